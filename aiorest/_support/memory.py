"""Glibc and freed memory: the heap kept for large buffers, and given back to the system when idle."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Callable

__all__ = ["give_back", "keep_buffers"]


def _glibc(function: str) -> Callable[..., int] | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        return getattr(libc, function)  # type: ignore[no-any-return]
    except (OSError, AttributeError, TypeError):  # not glibc (musl, macOS): nothing to tune this way
        return None


_trim = _glibc("malloc_trim")
_mallopt = _glibc("mallopt")
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
_MMAP_ABOVE = 4 * 1024 * 1024  # buffers smaller than this come from the heap
_TRIM_ABOVE = 8 * 1024 * 1024  # free memory at the top of the heap kept up to this


def keep_buffers() -> None:
    """Let glibc reuse the heap for the server's large buffers instead of mapping and unmapping each.

    A read of 256 KiB, its body chunk and the parts a form parser cuts from it are
    each above glibc's first mmap threshold (128 KiB): each would be mapped, faulted
    in page by page, zeroed and unmapped again (measured: a sixth of the CPU of an
    upload). From the heap they reuse pages already there; up to 8 MiB of free
    pages stay at its top, and :func:`give_back` returns the rest. Settings given in
    the environment (``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``) win.
    """
    if _mallopt is None:
        return
    if "MALLOC_MMAP_THRESHOLD_" not in os.environ:
        _mallopt(_M_MMAP_THRESHOLD, _MMAP_ABOVE)
    if "MALLOC_TRIM_THRESHOLD_" not in os.environ:
        _mallopt(_M_TRIM_THRESHOLD, _TRIM_ABOVE)


def give_back() -> None:
    """Return the free pages of the heap to the system (glibc's ``malloc_trim``; elsewhere nothing).

    Request bodies are freed in pieces of at most 16 KiB, below glibc's mmap threshold: they
    stay in the heap, and a process that once held many stalled bodies keeps their RSS after
    they are gone (200 bodies of 250 KiB: 85 MiB, against 33 before them).
    """
    if _trim is not None:
        _trim(0)

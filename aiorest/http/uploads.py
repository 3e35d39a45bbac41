"""Uploaded files: what a handler gets for a file part of a form, and the disk they spill to.

A small file stays in memory; past ``FormLimits.spool_threshold`` (or once the
form holds ``max_memory`` bytes in all) it moves to an anonymous temporary file
(``O_TMPFILE``: it has no name, so nothing can reach it by path, and the kernel
frees it when it is closed — after the response, when the handler raises, when
the client goes, when the process ends, even by a crash). :class:`Uploads`, one
per app, owns where those files go and counts the bytes all of them hold against
``max_disk``.
"""

from __future__ import annotations

import asyncio
import errno
import os
import tempfile
from collections.abc import AsyncIterator
from typing import IO

from .datastructures import Headers
from .exceptions import HTTPError, HTTPServiceUnavailable
from .formlimits import FormLimits

__all__ = ["UploadFile", "Uploads"]

_CHUNK = 256 * 1024  # what iterating a file, and saving it, read at a time


class Uploads:
    """Where a process's uploaded files spill to disk, and how many bytes they may hold there in all.

    ``App(uploads=Uploads(FormLimits(...), directory=...))``; the app makes the
    default one. ``directory``: where the temporary files are made (default: the
    system's, ``$TMPDIR``). The bytes every form of the process holds on disk count
    against ``limits.max_disk``: past it, the request that needs more gets 503 with
    ``Retry-After`` and its files are gone. A full disk (``ENOSPC``, ``EDQUOT``)
    answers 507.
    """

    def __init__(self, limits: FormLimits | None = None, *, directory: str | os.PathLike[str] | None = None) -> None:
        self.limits = limits or FormLimits()
        self.directory = os.fspath(directory) if directory is not None else None
        #: bytes the open upload files of this process hold on disk now
        self.on_disk = 0
        #: bytes the forms of this process hold in memory now: fields, and files not spilled
        self.in_memory = 0
        self._spilled: set[UploadFile] = set()  # the uploads with a temporary file open

    @property
    def open_files(self) -> int:
        """Temporary files open now."""
        return len(self._spilled)

    def new_file(self, upload: UploadFile) -> IO[bytes]:
        """An anonymous temporary file for ``upload``, unbuffered: the parser writes whole chunks."""
        try:
            file = tempfile.TemporaryFile(dir=self.directory, buffering=0)
        except OSError as exc:
            raise _disk_error(exc) from exc
        self._spilled.add(upload)
        return file

    def close_all(self) -> None:
        """Close every upload's temporary file: the server stops (those of uploads cut short too)."""
        for upload in list(self._spilled):
            upload.close()

    def reserve(self, size: int) -> None:
        """Count ``size`` more bytes on disk; 503 past ``max_disk``."""
        limit = self.limits.max_disk
        if self.on_disk + size > limit:
            raise HTTPServiceUnavailable(
                f"the server holds {limit} bytes of uploads on disk already (FormLimits.max_disk); try again",
                retry_after=1,
            )
        self.on_disk += size

    def can_hold(self, size: int) -> bool:
        """Whether forms may keep ``size`` more bytes in memory (else a file spills to disk now)."""
        return self.in_memory + size <= self.limits.max_process_memory

    def hold(self, size: int) -> None:
        """Count ``size`` more bytes of forms in memory; 503 past ``max_process_memory``."""
        if not self.can_hold(size):
            limit = self.limits.max_process_memory
            raise HTTPServiceUnavailable(
                f"the server holds {limit} bytes of forms in memory already (FormLimits.max_process_memory); try again",
                retry_after=1,
            )
        self.in_memory += size

    def free(self, size: int) -> None:
        """A form that held ``size`` bytes in memory is closed."""
        self.in_memory -= size

    def release(self, upload: UploadFile, size: int) -> None:
        """The file of ``upload``, which held ``size`` bytes, is closed."""
        self.on_disk -= size
        self._spilled.discard(upload)


def _disk_error(exc: OSError) -> HTTPError:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return HTTPError("no space left to store the upload", status=507)
    return HTTPError("the upload could not be stored", status=500)


class UploadFile:
    """A file sent in a ``multipart/form-data`` form.

    ``filename`` is what the client named it (never used as a path by aiorest: do
    not use it as one either), ``content_type`` its declared type, ``headers`` the
    part's headers, ``size`` its bytes. Read it with :meth:`read`, iterate over it
    in chunks (``async for chunk in upload``), or :meth:`save` it; ``file`` is the
    underlying binary file object, for a library that wants one.
    """

    __slots__ = (
        "name",
        "filename",
        "content_type",
        "headers",
        "size",
        "_memory",
        "_file",
        "_uploads",
        "_closed",
        "_position",
    )

    def __init__(self, name: str, filename: str | None, content_type: str, headers: Headers, uploads: Uploads) -> None:
        self.name = name
        self.filename = filename
        self.content_type = content_type
        self.headers = headers
        self.size = 0
        # in memory: the parser's chunks as they came (kept, not copied); None once spilled
        self._memory: list[bytes] | None = []
        self._file: IO[bytes] | None = None
        self._uploads = uploads
        self._closed = False
        self._position = 0  # where read() is, in memory

    # -- written by the form parser (forms.py) -----------------------------------

    @property
    def in_memory(self) -> bool:
        """Whether the file is still in memory (else it spilled to a temporary file)."""
        return self._file is None

    def write(self, data: bytes | bytearray) -> None:
        """Add ``data``: to memory, or to the temporary file once it spilled."""
        if self._file is None:
            assert self._memory is not None
            self._memory.append(data if type(data) is bytes else bytes(data))
            self.size += len(data)
            return
        self._uploads.reserve(len(data))
        self.size += len(data)  # what close() gives back: reserved, written or not
        try:
            self._file.write(data)
        except OSError as exc:
            raise _disk_error(exc) from exc

    def spill(self) -> int:
        """Move what is in memory to a temporary file; returns the bytes it freed from memory."""
        if self._file is not None:
            return 0
        memory = self._memory
        assert memory is not None
        self._file = self._uploads.new_file(self)  # closed, and given back, by close()
        self._memory = None
        held, self.size = self.size, 0
        for chunk in memory:
            self.write(chunk)
        return held

    def finished(self) -> None:
        """The part ended: reading starts from the beginning."""
        if self._file is not None:
            self._file.seek(0)

    # -- for the handler --------------------------------------------------------------

    @property
    def file(self) -> IO[bytes]:
        """The contents as a binary file object (a spooled file's own; an in-memory one's copy)."""
        self._check_open()
        if self._file is None:
            position = self._position
            self.spill()
        else:
            position = None
        file = self._file
        assert file is not None
        if position is not None:
            file.seek(position)  # where read() was
        return file

    async def read(self, size: int = -1) -> bytes:
        """Up to ``size`` bytes from where reading is (all that is left with -1); ``b""`` at the end."""
        self._check_open()
        file = self._file
        if file is not None:
            return file.read(size) or b""
        memory = self._joined()
        start = self._position
        end = len(memory) if size < 0 else min(len(memory), start + size)
        self._position = max(start, end)
        return memory[start:end]

    async def seek(self, offset: int) -> None:
        """Move where reading is to ``offset`` bytes from the beginning."""
        self._check_open()
        if offset < 0:
            raise ValueError(f"cannot seek to {offset}")
        if self._file is not None:
            self._file.seek(offset)
        else:
            self._position = offset

    async def chunks(self, size: int = _CHUNK) -> AsyncIterator[bytes]:
        """The contents from the beginning, ``size`` bytes at a time (where :meth:`read` is stays)."""
        self._check_open()
        if size < 1:
            raise ValueError(f"chunk size must be positive, got {size}")
        file = self._file
        if file is None:
            memory = self._joined()
            for start in range(0, len(memory), size):
                yield memory[start : start + size]
            return
        offset = 0
        while chunk := os.pread(file.fileno(), size, offset):
            offset += len(chunk)
            yield chunk

    def __aiter__(self) -> AsyncIterator[bytes]:
        """The contents from the beginning in pieces (of at most 256 KiB from disk; in memory, as they came)."""
        if self._file is None and self._memory is not None:
            return self._pieces(self._memory)
        return self.chunks()

    async def _pieces(self, memory: list[bytes]) -> AsyncIterator[bytes]:
        for piece in memory:
            yield piece

    def _joined(self) -> bytes:
        """The contents in memory, as one bytes (joined once, when first read whole)."""
        memory = self._memory
        assert memory is not None
        if len(memory) != 1:
            memory[:] = [b"".join(memory)]
        return memory[0]

    async def save(self, path: str | os.PathLike[str]) -> int:
        """Write the contents to ``path`` (made or replaced), in a thread; returns the bytes written."""
        self._check_open()
        if self._file is None:
            return await asyncio.to_thread(_write_bytes, os.fspath(path), self._joined())
        return await asyncio.to_thread(_copy_out, self._file, os.fspath(path))

    def close(self) -> None:
        """Free the contents (a temporary file is gone with it). Closing twice does nothing."""
        if self._closed:
            return
        self._closed = True
        self._memory = None
        file, self._file = self._file, None
        if file is not None:
            file.close()
            self._uploads.release(self, self.size)

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"upload {self.filename!r} is closed: the response to its request was sent")

    def __repr__(self) -> str:
        return f"<UploadFile {self.name!r} filename={self.filename!r} {self.content_type} {self.size} bytes>"


def _write_bytes(path: str, data: bytes) -> int:
    with open(path, "wb") as out:
        out.write(data)
    return len(data)


def _copy_out(file: IO[bytes], path: str) -> int:
    """Copy a temporary file to ``path`` in the kernel (sendfile), from its beginning."""
    source = file.fileno()
    size = os.fstat(source).st_size
    with open(path, "wb") as out:
        target = out.fileno()
        offset = 0
        while offset < size:
            sent = os.sendfile(target, source, offset, size - offset)
            if sent == 0:
                break
            offset += sent
    return offset

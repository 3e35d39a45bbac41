"""Request ids: one per request, in its response, and on every log record written while it is handled.

The connection gives each request an id before its handler runs (driving.py):
the ``X-Request-ID`` a trusted proxy sent, when it is a good one (bytes), or a
new one: the next number of a counter (an int), shown after a random prefix
made once per process (again in a forked child), as ``3f9a1c0b7d2e-1a2b``.
The number is formatted only where the id is shown — in the response's head,
as part of the one format that makes it, the prefix built into that format
(``on_new_prefix``) — and not once per request besides: that was 2,400
instructions of a request's 39,000.
The handler runs in a context of its own, where ``request_id_var`` holds the id;
the log record factory installed on import copies it onto every LogRecord as
``record.request_id`` ("-" outside a request), so that a format string can
use ``%(request_id)s`` in any handler, the application's own among them.
"""

from __future__ import annotations

import contextvars
import itertools
import logging
import os
import re
import secrets
from collections.abc import Callable
from typing import Any

from .datastructures import raw_header_values

__all__ = [
    "request_id",
    "request_id_var",
    "request_numbers",
    "prefix",
    "on_new_prefix",
    "format_request_id",
    "valid_request_id",
    "MAX_REQUEST_ID",
]

MAX_REQUEST_ID = 128
_VALID = re.compile(rb"[A-Za-z0-9._-]{1,%d}" % MAX_REQUEST_ID)

# A request's id as the connection keeps it: a number of this process's counter, or given bytes.
RequestId = int | bytes

request_id_var: contextvars.ContextVar[RequestId] = contextvars.ContextVar("aiorest_request_id")
request_numbers = itertools.count(1)
prefix = b""  # this process's: 12 random hex digits and "-"
_prefix_text = ""
_prefix_users: list[Callable[[], None]] = []


def _new_prefix() -> None:
    global prefix, _prefix_text
    _prefix_text = secrets.token_hex(6) + "-"
    prefix = _prefix_text.encode("ascii")
    for user in _prefix_users:
        user()


def on_new_prefix(user: Callable[[], None]) -> None:
    """Call ``user`` now, and again whenever the prefix changes (in a forked child): for
    what is built from the prefix once, such as writing.py's formats."""
    _prefix_users.append(user)
    user()


_new_prefix()
os.register_at_fork(after_in_child=_new_prefix)  # workers forked from one parent must not share ids


def format_request_id(value: RequestId) -> str:
    """The id as it is shown: a number after this process's prefix, or the bytes given."""
    if type(value) is int:
        return f"{_prefix_text}{value:x}"
    return value.decode("ascii")  # type: ignore[union-attr]


def request_id() -> str | None:
    """The id of the request being handled (its ``X-Request-ID``), or None outside a request.

    It follows the request into the tasks its handler starts, as any context variable does.
    """
    value = request_id_var.get(None)
    return None if value is None else format_request_id(value)


def valid_request_id(raw_headers: list[tuple[bytes, bytes]]) -> bytes | None:
    """The request's ``X-Request-ID`` if it has exactly one, of at most 128 characters among
    ``A-Z a-z 0-9 . _ -``; else None (a new id is made)."""
    values = raw_header_values(raw_headers, b"x-request-id")
    if len(values) == 1 and _VALID.fullmatch(values[0]):
        return values[0]
    return None


def _install_record_factory() -> None:
    previous = logging.getLogRecordFactory()
    if getattr(previous, "aiorest_request_id", False):
        return  # installed already (the module was reloaded)

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        value = request_id_var.get(None)
        if value is not None:
            record.request_id = format_request_id(value)
        elif not hasattr(record, "request_id"):  # one a factory before ours set is kept
            record.request_id = "-"
        return record

    factory.aiorest_request_id = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(factory)


_install_record_factory()

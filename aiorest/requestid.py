"""Request ids: one per request, in its response, and on every log record written while it is handled.

The connection gives each request an id before its handler runs (driving.py):
the ``X-Request-ID`` a trusted proxy sent, when it is a good one, or a new one
made of a random prefix (one per server, so per worker process) and a counter.
The handler runs in a context of its own, where ``request_id_var`` holds the id;
the log record factory installed on import copies it onto every LogRecord as
``record.request_id`` ("-" outside a request), so that a format string can
use ``%(request_id)s`` in any handler, the application's own among them.
"""

from __future__ import annotations

import contextvars
import logging
import re
import secrets
from typing import Any

__all__ = ["request_id", "request_id_var", "new_prefix", "valid_request_id", "MAX_REQUEST_ID"]

MAX_REQUEST_ID = 128
_VALID = re.compile(rb"[A-Za-z0-9._-]{1,%d}" % MAX_REQUEST_ID)

# bytes, as the id goes into the response head; the public face is a str
request_id_var: contextvars.ContextVar[bytes] = contextvars.ContextVar("aiorest_request_id")


def request_id() -> str | None:
    """The id of the request being handled (its ``X-Request-ID``), or None outside a request.

    It follows the request into the tasks its handler starts, as any context variable does.
    """
    value = request_id_var.get(None)
    return None if value is None else value.decode("ascii")


def new_prefix() -> bytes:
    """A random prefix for the ids a server makes: 12 hex digits, then ``-`` and a counter in hex."""
    return secrets.token_hex(6).encode("ascii") + b"-"


def valid_request_id(raw_headers: list[tuple[bytes, bytes]]) -> bytes | None:
    """The request's ``X-Request-ID`` if it has exactly one, of at most 128 characters among
    ``A-Z a-z 0-9 . _ -``; else None (a new id is made)."""
    found = None
    for name, value in raw_headers:
        if len(name) == 12 and name.lower() == b"x-request-id":
            if found is not None:
                return None
            found = value
    if found is not None and _VALID.fullmatch(found):
        return found
    return None


def _install_record_factory() -> None:
    previous = logging.getLogRecordFactory()
    if getattr(previous, "_aiorest_request_id", False):
        return  # installed already (the module was reloaded)

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        value = request_id_var.get(None)
        record.request_id = "-" if value is None else value.decode("ascii")
        return record

    factory._aiorest_request_id = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(factory)


_install_record_factory()

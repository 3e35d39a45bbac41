"""The checks of a JSON request body, one piece for ``Request.json`` and typed handlers.

The same messages for both; typed handlers ask for the ``details`` that name
where the problem is (``header.content-type``, ``body``).
"""

from __future__ import annotations

from typing import Protocol

from .exceptions import HTTPBadRequest, HTTPUnsupportedMediaType

__all__ = ["read_json_body", "bad_body"]


class _Body(Protocol):
    """What the checks read of a request (a :class:`~aiorest.Request`): no import of request.py, which calls them."""

    @property
    def content_type(self) -> str: ...

    async def read(self) -> bytes: ...


async def read_json_body(request: _Body, required: bool, strict_content_type: bool, locate: bool) -> bytes:
    """The body of ``request`` once its type says JSON (see ``Request.json_body``)."""
    content_type = request.content_type
    json = content_type == "application/json" or content_type.endswith("+json")
    if json or not (content_type or strict_content_type):
        return await _non_empty(request, required, locate)
    # Another type, or none when strict: a browser sends either cross-site with no
    # CORS preflight. Only an empty body goes on, to the default or to "body is empty".
    if content_type and required:
        raise _unsupported(content_type, locate)
    if await request.read():
        raise _unsupported(content_type, locate)
    return await _non_empty(request, required, locate)


async def _non_empty(request: _Body, required: bool, locate: bool) -> bytes:
    body = await request.read()
    if not body and required:
        raise bad_body("request body is empty; expected JSON", locate=locate)
    return body


def bad_body(message: str, *, locate: bool = True) -> HTTPBadRequest:
    """The 400 for a request body that cannot be read as asked; with ``locate``, its
    ``details`` name the location (``body``), as a typed handler's errors do."""
    return HTTPBadRequest(message, details=[{"location": "body", "message": message}] if locate else None)


def _unsupported(content_type: str, locate: bool) -> HTTPUnsupportedMediaType:
    got = content_type or "no Content-Type"
    details = [{"location": "header.content-type", "message": f"expected application/json, got {got}"}]
    return HTTPUnsupportedMediaType(
        f"expected a JSON body (application/json), got {got}", details=details if locate else None
    )

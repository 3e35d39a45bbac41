"""Bytes on the wire: status lines, content types, request targets."""

from __future__ import annotations

from http import HTTPStatus

import httptools

STATUS_LINES = {s.value: f"HTTP/1.1 {s.value} {s.phrase}\r\n" for s in HTTPStatus}
# Statuses whose responses carry a body, as bytes for the fast path.
STATUS_BYTES = {code: line.encode() for code, line in STATUS_LINES.items() if code >= 200 and code not in (204, 304)}
_CONTENT_TYPES: dict[str, bytes] = {}


def content_type_bytes(media_type: str) -> bytes:
    encoded = _CONTENT_TYPES.get(media_type)
    if encoded is None:
        encoded = media_type.encode("latin-1")
        if len(_CONTENT_TYPES) < 256:  # bounded: media types are few, but come from user code
            _CONTENT_TYPES[media_type] = encoded
    return encoded


def origin_form(target: bytes) -> bytes:
    """Reduce an absolute-form target (``http://host/p?q``) to its path and query."""
    if target == b"*":
        return b"*"
    try:
        url = httptools.parse_url(target)
    except httptools.HttpParserInvalidURLError:
        return target
    path = url.path or b"/"
    return path + b"?" + url.query if url.query else path

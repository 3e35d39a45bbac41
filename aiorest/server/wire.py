"""Bytes on the wire: status lines, content types, request targets."""

from __future__ import annotations

from http import HTTPStatus

import httptools

STATUS_LINES = {s.value: f"HTTP/1.1 {s.value} {s.phrase}\r\n" for s in HTTPStatus}
# Statuses whose responses carry a body, as bytes for the fast path.
STATUS_BYTES = {code: line.encode() for code, line in STATUS_LINES.items() if code >= 200 and code not in (204, 304)}
# media type → its header line, for the fast path; ASCII types only, at most 256
CONTENT_TYPE_LINES: dict[str, bytes] = {}


def content_type_line(media_type: str) -> bytes | None:
    """``Content-Type: <media_type>\r\n`` as bytes; None when the type is not ASCII."""
    line = CONTENT_TYPE_LINES.get(media_type)
    if line is None and media_type.isascii():
        line = b"Content-Type: %s\r\n" % media_type.encode("ascii")
        if len(CONTENT_TYPE_LINES) < 256:  # bounded: media types are few, but come from user code
            CONTENT_TYPE_LINES[media_type] = line
    return line


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

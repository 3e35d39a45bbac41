"""What makes a keyed request the request it is, hashed: the fingerprint :class:`~aiorest.Idempotency` compares.

A ``multipart/form-data`` body is hashed by what it says, not by its bytes: each
client encodes a retried form with a fresh random boundary, so the same upload
comes back as other bytes (and another ``Content-Type``). Its parts are hashed
instead, a file a chunk at a time from where the form spooled it: the body is
never held whole, whatever the route's ``max_body_size`` lets it grow to.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from ...http.uploads import UploadFile

if TYPE_CHECKING:
    from ...http.request import Request

__all__ = ["fingerprint"]

# RFC 9110, 13.1: the conditional request headers. A write made under another precondition
# is another request, and must not get the answer given to the first.
_PRECONDITIONS = (b"if-match", b"if-none-match", b"if-modified-since", b"if-unmodified-since", b"if-range")
# What the body's bytes mean: the same bytes as another type or coding are another body.
_BODY_HEADERS = (b"content-type", b"content-encoding")
_MULTIPART = "multipart/form-data"


async def fingerprint(request: Request) -> str:
    """The SHA-256 of the method, route and resolved path parameters, query, body and preconditions."""
    template = request.route_template
    # Resolved: /notes/07 and /notes/7 are the one note 7, by the route's convertors.
    params = sorted((name, repr(value)) for name, value in request.path_params.items())
    target = request.path if template is None else f"{template}\0{params!r}"
    digest = hashlib.sha256(f"{request.method}\0{target}\0{request.query_string}\0".encode())
    form = request.content_type == _MULTIPART
    for name in (*_BODY_HEADERS, *_PRECONDITIONS):
        if form and name == b"content-type":
            values = [_MULTIPART]  # its boundary differs from one encoding of the form to the next
        else:
            values = request.header_values(name)
        digest.update(b"\0".join(value.encode() for value in values) + b"\n")
    if not form:
        digest.update(await request.read())
        return digest.hexdigest()
    for field, value in (await request.form()).multi_items():
        if isinstance(value, UploadFile):
            _field(digest.update, "file", field, value.filename or "", value.content_type, str(value.size))
            async for chunk in value.chunks():  # from the beginning; where read() is stays
                digest.update(chunk)
        else:
            _field(digest.update, "field", field, value)
    return digest.hexdigest()


def _field(update: Callable[[bytes], None], *texts: str) -> None:
    # Each text with its length before it: no two different forms hash the same bytes.
    for text in texts:
        data = text.encode("utf-8", "surrogatepass")
        update(b"%d:%s" % (len(data), data))

"""Bounded request decompression, as middleware: ``Decompression`` expands request bodies
sent with a ``Content-Encoding``, never past the body limit (compression.py's twin).
"""

from __future__ import annotations

import zlib
from typing import Protocol

from ..http.exceptions import HTTPBadRequest, HTTPPayloadTooLarge, HTTPUnsupportedMediaType
from ..http.request import Request
from ..http.response import Response
from ..routing.route import Handler
from .compression import _DEFAULT_LIMITS, _GZIP_WBITS, BROTLI_AVAILABLE, _brotli

__all__ = ["Decompression"]


class _Decompressor(Protocol):
    def expand(self, data: bytes, limit: int) -> bytes:
        """At most ``limit`` bytes out of ``data`` and what is pending (``data`` may be b"")."""
        ...

    @property
    def pending(self) -> bool:
        """Output is left to take before more input can be given."""
        ...

    @property
    def finished(self) -> bool: ...


class _Inflate:
    def __init__(self, wbits: int) -> None:
        self._d = zlib.decompressobj(wbits)
        self._tail = b""

    def expand(self, data: bytes, limit: int) -> bytes:
        out = self._d.decompress(self._tail + data, limit)
        self._tail = self._d.unconsumed_tail
        if self._d.unused_data:
            raise HTTPBadRequest("request body has data after the end of its compressed stream")
        return out

    @property
    def pending(self) -> bool:
        return bool(self._tail)

    @property
    def finished(self) -> bool:
        return self._d.eof


class _Unbrotli:
    def __init__(self) -> None:
        assert _brotli is not None
        self._d = _brotli.Decompressor()

    def expand(self, data: bytes, limit: int) -> bytes:
        return bytes(self._d.process(data, output_buffer_limit=max(limit, 1)))

    @property
    def pending(self) -> bool:
        return not self._d.can_accept_more_data()

    @property
    def finished(self) -> bool:
        return bool(self._d.is_finished())


class Decompression:
    """Middleware expanding request bodies sent with ``Content-Encoding: gzip``, ``deflate``, or ``br``.

    The body is expanded as it arrives, never past ``max_size`` bytes (default:
    ``max_body_size`` of ``App(limits=...)``, else of the default ``Limits``):
    a larger one, such as a small "zip bomb", is refused with 413 after expanding at most ``max_size`` bytes.
    An encoding it does not know (or several) gets 415 with ``Accept-Encoding``
    naming those it does; a corrupt or truncated stream gets 400. The handler
    then reads the expanded body with :meth:`Request.read`, :meth:`Request.json`
    or :meth:`Request.stream`, and its headers as if it had been sent plain: no
    ``Content-Encoding``, and ``Content-Length`` the expanded size. A request
    without ``Content-Encoding`` (or with ``identity``) passes untouched.
    """

    def __init__(self, *, max_size: int | None = None) -> None:
        if max_size is not None and max_size <= 0:
            raise ValueError(f"max_size must be positive, got {max_size}")
        self.max_size = max_size
        self.codings: tuple[str, ...] = ("gzip", "deflate", "br") if BROTLI_AVAILABLE else ("gzip", "deflate")

    async def __call__(self, request: Request, handler: Handler) -> Response:
        if request.header(b"content-encoding") is not None:
            await self._expand(request)
        response: Response = await handler(request)
        return response

    async def _expand(self, request: Request) -> None:
        # Bounded like any header (the parser limits their size and number); identity means none.
        codings = [
            coding
            for line in request.header_values(b"content-encoding")
            for coding in (part.strip().lower() for part in line.split(","))
            if coding and coding != "identity"
        ]
        if not codings:
            return
        coding = codings[0]
        decompressor: _Decompressor
        if len(codings) > 1:
            coding = ""  # several codings, applied in turn: refused rather than expanded twice
        if coding in ("gzip", "x-gzip"):
            decompressor = _Inflate(_GZIP_WBITS)
        elif coding == "deflate":
            decompressor = _Inflate(zlib.MAX_WBITS)
        elif coding == "br" and _brotli is not None:
            decompressor = _Unbrotli()
        else:
            shown = ", ".join(codings)[:64]
            exc = HTTPUnsupportedMediaType(f"unsupported request Content-Encoding {shown!r}")
            exc.headers["Accept-Encoding"] = ", ".join(self.codings)
            raise exc
        limit = self.max_size or (request.app.limits or _DEFAULT_LIMITS).max_body_size
        parts: list[bytes] = []
        size = received = 0
        errors: tuple[type[Exception], ...] = (zlib.error,) if _brotli is None else (zlib.error, _brotli.error)
        try:
            async for chunk in request.stream():
                received += len(chunk)
                data = chunk
                while True:  # bounded output per call: a bomb stops at limit + 1 bytes
                    out = decompressor.expand(data, limit - size + 1)
                    data = b""
                    size += len(out)
                    if size > limit:
                        raise HTTPPayloadTooLarge(f"decompressed request body exceeds the limit of {limit} bytes")
                    parts.append(out)
                    if not decompressor.pending:
                        break
        except errors as exc:
            raise HTTPBadRequest(f"request body is not valid {coding}: {exc}") from None
        if received and not decompressor.finished:  # an empty body stays empty
            raise HTTPBadRequest(f"request body is a truncated {coding} stream")
        # The request now reads as if sent plain: an inner Decompression leaves it alone.
        request.replace_body(b"".join(parts), drop=(b"content-encoding",))

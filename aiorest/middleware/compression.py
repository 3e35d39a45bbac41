"""Response compression (gzip, brotli), as middleware: per app, per Router or per route.

``Compression`` compresses responses a client accepts compressed, when that pays;
its request-side twin, ``Decompression``, is in decompression.py.
"""

from __future__ import annotations

import importlib
import zlib
from collections.abc import AsyncIterator
from typing import Any, Protocol

from ..http.datastructures import Headers
from ..http.files import FileResponse
from ..http.limits import Limits
from ..http.request import Request
from ..http.response import JSONResponse, Response, StreamResponse, add_vary
from ..routing.route import Handler

_brotli: Any
try:  # the ``brotli`` extra (untyped: imported as Any)
    _brotli = importlib.import_module("brotli")
except ImportError:  # pragma: no cover - the test extra installs it
    _brotli = None

__all__ = ["Compression", "BROTLI_AVAILABLE"]

BROTLI_AVAILABLE = _brotli is not None

# Accept-Encoding is the client's: only this much of it is read, and only this many codings.
_MAX_ACCEPT_LENGTH = 512
_MAX_CODINGS = 16
_NEGOTIATED_CACHE = 256  # header value -> coding chosen; a few values cover all browsers
_VARY = Headers({"Vary": "Accept-Encoding"})  # what a compressible answer gets, whether compressed or not

# dask's rule (distributed.protocol.compression.maybe_compress): a large body is
# first tried on a sample at a fast level, and sent as is unless it shrinks by 10%.
_SAMPLE_ABOVE = 16 * 1024
_SAMPLE_SIZE = 8 * 1024
_MIN_GAIN = 0.9

_DEFAULT_LIMITS = Limits()

_GZIP_WBITS = 16 + zlib.MAX_WBITS

_COMPRESSIBLE_APPLICATION = frozenset(
    {
        "application/json",
        "application/javascript",
        "application/ecmascript",
        "application/xml",
        "application/x-www-form-urlencoded",
        "application/graphql",
        "application/wasm",
        "application/x-ndjson",
        "application/geo+json",
        "image/svg+xml",
        "image/bmp",
        "image/x-icon",
        "image/vnd.microsoft.icon",
        "font/ttf",
        "font/otf",
    }
)


def compressible(media_type: str) -> bool:
    """Whether a body of ``media_type`` is worth compressing: text, JSON, XML, JavaScript, SVG...

    Anything else (images but SVG, audio, video, archives, woff2, octet-stream) is
    taken as already compressed or binary; an event stream (``text/event-stream``) is never compressed.
    """
    known = _COMPRESSIBLE.get(media_type)
    if known is None:
        kind = media_type.partition(";")[0].strip().lower()
        known = (
            (kind.startswith("text/") and kind != "text/event-stream")  # each event must reach the client as sent
            or kind in _COMPRESSIBLE_APPLICATION
            or kind.endswith(("+json", "+xml"))
            or kind.endswith("javascript")
        )
        if len(_COMPRESSIBLE) < 256:  # bounded: the types come from user code
            _COMPRESSIBLE[media_type] = known
    return known


# media type as sent -> compressible; a response's type is one of a few
_COMPRESSIBLE: dict[str, bool] = {}


def parse_accept_encoding(header: str) -> dict[str, float]:
    """The codings of an ``Accept-Encoding`` value with their q-values, lower-cased.

    Bounded: only the first 512 characters and 16 codings are read; a malformed
    q-value counts as 0 (refused).
    """
    codings: dict[str, float] = {}
    for item in header[:_MAX_ACCEPT_LENGTH].split(",")[:_MAX_CODINGS]:
        coding, _, params = item.partition(";")
        coding = coding.strip().lower()
        if not coding:
            continue
        q = 1.0
        params = params.strip().lower()
        if params:
            name, _, value = params.partition("=")
            if name.strip() == "q":
                try:
                    q = float(value.strip())
                except ValueError:
                    q = 0.0
                if not 0.0 <= q <= 1.0:  # nan too
                    q = 0.0
        codings.setdefault(coding, q)
    return codings


def negotiate(header: str, available: tuple[str, ...]) -> str | None:
    """The coding of ``available`` (in order of preference at equal q) to answer with, or None.

    ``*`` stands for the codings not named; ``q=0`` refuses; a coding is taken over
    identity unless identity is named with a higher q.
    """
    codings = parse_accept_encoding(header)
    star = codings.get("*", 0.0)
    best, best_q = None, 0.0
    for coding in available:
        q = codings.get(coding, star)
        if coding == "gzip" and "gzip" not in codings:
            q = codings.get("x-gzip", q)
        if q > best_q:
            best, best_q = coding, q
    if best is not None and "identity" in codings and codings["identity"] > best_q:
        return None
    return best


class _StreamCompressor(Protocol):
    def chunk(self, data: bytes) -> bytes: ...

    def finish(self) -> bytes: ...


class _Gzip:
    def __init__(self, level: int) -> None:
        self._c = zlib.compressobj(level, zlib.DEFLATED, _GZIP_WBITS)

    def chunk(self, data: bytes) -> bytes:
        # Z_SYNC_FLUSH: the client can decode everything produced so far.
        return self._c.compress(data) + self._c.flush(zlib.Z_SYNC_FLUSH)

    def finish(self) -> bytes:
        return self._c.flush()


class _Brotli:
    def __init__(self, quality: int) -> None:
        assert _brotli is not None
        self._c = _brotli.Compressor(quality=quality)

    def chunk(self, data: bytes) -> bytes:
        return bytes(self._c.process(data) + self._c.flush())

    def finish(self) -> bytes:
        return bytes(self._c.finish())


class Compression:
    """Middleware compressing responses with gzip, or brotli when the ``brotli`` extra is installed.

    The coding is negotiated from ``Accept-Encoding`` (q-values, ``*``,
    ``identity``; brotli preferred at equal q). A response is compressed only if
    its media type is compressible (see ``compressible``: text, JSON, XML,
    JavaScript, SVG...), its body is at least ``minimum_size`` bytes, and
    compression pays: a body above 16 KiB is first tried on an 8 KiB sample at
    the fastest level, and any body is sent as is unless it shrinks by 10%. Never
    compressed: HEAD, 204, 304, 206 and requests with ``Range``, responses that
    already have a ``Content-Encoding``, files (a :class:`FileResponse` is sent as
    it is on disk, for its ranges and validators; its ``.br``/``.gz`` siblings are
    its compression). A compressible response always gets
    ``Vary: Accept-Encoding``, compressed or not, so that caches keep both.

    A :class:`StreamResponse` is compressed chunk by chunk, each flushed so that
    the client can decode it as soon as it arrives (no ``Content-Length``,
    chunked as always). ``level`` is gzip's (1-9), ``brotli_quality``
    brotli's (0-11); ``brotli=False`` offers only gzip.

    Error responses built from an :class:`HTTPError` are made after the
    outermost middleware, and are not compressed.
    """

    def __init__(
        self,
        *,
        minimum_size: int = 500,
        level: int = 6,
        brotli: bool = True,
        brotli_quality: int = 4,
    ) -> None:
        if minimum_size < 0:
            raise ValueError(f"minimum_size must be >= 0, got {minimum_size}")
        if not 1 <= level <= 9:
            raise ValueError(f"level must be from 1 to 9, got {level}")
        if not 0 <= brotli_quality <= 11:
            raise ValueError(f"brotli_quality must be from 0 to 11, got {brotli_quality}")
        self.minimum_size = minimum_size
        self.level = level
        self.brotli_quality = brotli_quality
        self.codings: tuple[str, ...] = ("br", "gzip") if brotli and BROTLI_AVAILABLE else ("gzip",)
        self._negotiated: dict[str, str | None] = {}

    def _coding(self, accept: str) -> str | None:
        coding = self._negotiated.get(accept, "")
        if coding == "":
            coding = negotiate(accept, self.codings)
            if len(self._negotiated) < _NEGOTIATED_CACHE and len(accept) <= _MAX_ACCEPT_LENGTH:
                self._negotiated[accept] = coding
        return coding

    def _compress(self, coding: str, data: bytes | bytearray | memoryview, *, fast: bool = False) -> bytes:
        if coding == "br":
            assert _brotli is not None
            return bytes(_brotli.compress(bytes(data), quality=0 if fast else self.brotli_quality))
        return zlib.compress(data, 1 if fast else self.level, _GZIP_WBITS)

    async def __call__(self, request: Request, handler: Handler) -> Response:
        response: Response = await handler(request)
        if response.status in (204, 206, 304) or not compressible(response.media_type):
            return response
        if response.header("content-encoding") is not None or isinstance(response, FileResponse):
            return response
        content_type = response.header("content-type")  # a handler may set it as a header
        if content_type is not None and not compressible(content_type):
            return response
        headers = response.headers
        if headers:
            add_vary(headers, "Accept-Encoding")
        else:  # the usual answer, no fields of its own: the one Vary, made once
            headers.extend(_VARY)
        if request.method == "HEAD" or request.header(b"range") is not None:
            return response
        accept = request.header(b"accept-encoding")
        if not accept:
            return response
        coding = self._coding(accept)
        if coding is None:
            return response
        if isinstance(response, StreamResponse):
            response.content = self._stream(coding, response.content)
            _encoded(response, coding)
            return response
        body = response.render(request.app.json)
        size = len(body)
        if size >= self.minimum_size and (
            size <= _SAMPLE_ABOVE
            or len(self._compress(coding, memoryview(body)[:_SAMPLE_SIZE], fast=True)) <= _MIN_GAIN * _SAMPLE_SIZE
        ):
            compressed = self._compress(coding, body)
            if len(compressed) <= _MIN_GAIN * size:
                response = response.with_body(compressed)
                _encoded(response, coding)
                return response
        if size < self.minimum_size and type(response) is JSONResponse:
            return response  # small: sent as a handler's dict is sent, encoded again (cheaper than the general path)
        return response.with_body(body)  # rendered once: the server does not render it again

    async def _stream(self, coding: str, content: Any) -> AsyncIterator[bytes]:
        compressor: _StreamCompressor = _Brotli(self.brotli_quality) if coding == "br" else _Gzip(self.level)
        try:
            async for chunk in content:
                if isinstance(chunk, str):
                    chunk = chunk.encode()
                if chunk:
                    yield compressor.chunk(chunk)
            yield compressor.finish()
        finally:
            aclose = getattr(content, "aclose", None)
            if aclose is not None:
                await aclose()


def _encoded(response: Response, coding: str) -> None:
    """``response``'s body is now ``coding``-encoded: say so, and make a strong ETag weak, as nginx does.

    The encoded bytes are not the ones the strong tag named (RFC 9110 §8.8.3): a
    weak tag still answers ``If-None-Match`` (304), never ``If-Match`` or ``If-Range``.
    """
    headers = response.headers
    headers["Content-Encoding"] = coding
    etag = headers.get("ETag")
    if etag is not None and not etag.startswith("W/"):
        headers["ETag"] = "W/" + etag

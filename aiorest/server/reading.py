"""Reading requests: llhttp's (httptools') callbacks turn bytes into queued Requests.

``RequestReader`` is the parsing part of the connection (``HttpProtocol`` in
protocol.py): the parser calls ``on_url``, ``on_header``, ``on_headers_complete``,
``on_body`` and ``on_message_complete`` on it; a complete head becomes a
Request appended to the connection's queue, in arrival order (pipelining);
framing headers, limits and the strictness rules of RFC 9112 are decided here.
A head that cannot be served becomes a Request carrying the error to answer
(``_head_error``), so that it is answered in its turn, after those before it.

It is a mixin, not an object of its own, so that llhttp calls these methods
on the connection itself: the state below is the connection's, set in its
``__init__``, and a request pays no hop from one object to another.
"""

from __future__ import annotations

import ipaddress
import logging
import re
from collections import deque
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import httptools

from ..http.exceptions import (
    HTTPBadRequest,
    HTTPError,
    HTTPNotImplemented,
    HTTPPayloadTooLarge,
    HTTPRequestHeaderFieldsTooLarge,
    HTTPURITooLong,
    HTTPVersionNotSupported,
)
from ..http.limits import Limits
from ..http.request import Request
from .wire import origin_form

__all__ = ["RequestReader"]

logger = logging.getLogger("aiorest.error")

_METHODS = {m.encode(): m for m in ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")}
_FRAMING_SIZES = frozenset({len(b"content-length"), len(b"connection"), len(b"expect"), len(b"transfer-encoding")})
_PERCENT = ord("%")  # `int in bytes` tests one byte; `bytes in bytes` first tries an int, at a cost
_new_object = object.__new__

# RFC 9112, 3.2: one Host line, whose value is RFC 9110's  Host = uri-host [ ":" port ],  from RFC 3986, 3.2.2:
#   host       = IP-literal / IPv4address / reg-name     (an IPv4address is also a reg-name)
#   IP-literal = "[" ( IPv6address / IPvFuture ) "]"
#   IPvFuture  = "v" 1*HEXDIG "." 1*( unreserved / sub-delims / ":" )
#   reg-name   = *( unreserved / pct-encoded / sub-delims )
#   port       = *DIGIT
# llhttp leaves the trailing OWS on a value: allowed after it.
_REG_CHARS = rb"A-Za-z0-9\-._~!$&'()*+,;="
_HOST = re.compile(
    rb"(?:(?:[%s]|%%[0-9A-Fa-f]{2})*|\[(?:([0-9A-Fa-f:.]+)|v[0-9A-Fa-f]+\.[%s:]+)\])(?::[0-9]*)?[ \t]*"
    % (_REG_CHARS, _REG_CHARS)
)

if TYPE_CHECKING:
    from ..http.forwarded import TrustedProxies
    from .driving import ServedApp


class _ParseAbort(Exception):
    """Raised in a parser callback: answer ``error`` and close."""

    def __init__(self, error: HTTPError) -> None:
        self.error = error


class _StopParsing(Exception):
    """Raised in a parser callback: the request is queued; read nothing more."""


class RequestReader:
    """The parser's callbacks: a connection's bytes become Requests in its queue."""

    # The connection's state this part reads and writes (HttpProtocol.__init__ sets it).
    _app: ServedApp
    _limits: Limits
    _parser: httptools.HttpRequestParser
    _queue: deque[Request]
    _receiving: Request | None  # the request whose body is arriving
    _refusal: HTTPError | None
    _parsing_stopped: bool
    _close_after_queue: bool
    _pending_data: memoryview | None
    _buffered_body: int
    # the head being parsed
    _in_head: bool
    _url: bytes
    _raw_headers: list[tuple[bytes, bytes]]
    _header_bytes: int
    _has_host: bool
    _checked_host: bytes  # the last Host value found valid on this connection
    _framing: bool  # one of the four below was sent: on_headers_complete's general path
    _content_length: int | None
    _expect_continue: bool
    _connection_header: bool
    _transfer_encoding: bytes | None
    _body_received: int
    # limits read for every request, kept on the connection (one attribute lookup, not two)
    _max_request_line: int
    _max_headers: int
    _max_header_size: int
    _max_pipeline: int

    if TYPE_CHECKING:
        # What the connection provides besides: it is the BodySource of the requests made here.
        peername: Any
        transport: Any
        trusted_proxies: TrustedProxies | None

        def _pause_reading(self) -> None: ...
        def body_consumed(self, size: int) -> None: ...
        def body_wait(self) -> None: ...
        def body_paused(self) -> bool: ...
        def send_continue(self) -> None: ...

    def _parse_error(self, exc: Exception) -> None:
        if isinstance(exc, httptools.HttpParserCallbackError):
            cause = exc.__context__
            if isinstance(cause, _StopParsing):
                self._stop_parsing()
            elif isinstance(cause, _ParseAbort):
                self._abort_parsing(cause.error)
            else:
                logger.error("parser callback failed", exc_info=cause)
                self._abort_parsing(HTTPBadRequest("malformed request"))
        elif isinstance(exc, httptools.HttpParserUpgrade):
            # We speak no other protocol: answer the request, then close.
            if self._queue:
                self._queue[-1].keep_alive = False
            self._stop_parsing()
        else:
            # Before its method is complete, the parser still reports the previous request's.
            method_known = not isinstance(exc, httptools.HttpParserInvalidMethodError)
            self._abort_parsing(HTTPBadRequest(f"malformed request: {exc}"), method_known)

    def on_url(self, url: bytes) -> None:
        self._url += url
        if len(self._url) > self._max_request_line:
            raise _ParseAbort(HTTPURITooLong(f"request target longer than {self._max_request_line} bytes"))

    def on_header(self, name: bytes, value: bytes) -> None:
        headers = self._raw_headers
        headers.append((name, value))
        size = len(name)
        self._header_bytes += size + len(value)
        if len(headers) > self._max_headers or self._header_bytes > self._max_header_size:
            raise _ParseAbort(HTTPRequestHeaderFieldsTooLarge("request headers too large or too many"))
        # Cheap length tests first: most headers are none of these.
        if size == 4:
            if name == b"Host" or name.lower() == b"host":  # as most clients spell it: no lower()
                # A connection's client sends the same Host each time: checked once.
                if self._has_host or value != self._checked_host:
                    self._check_host(value)
                self._has_host = True
        elif size in _FRAMING_SIZES:
            self._framing_header(name.lower(), value)

    def _check_host(self, value: bytes) -> None:
        """RFC 9112, 3.2: a second Host line, or a Host that is not a host, is a 400."""
        if self._has_host:
            raise _ParseAbort(HTTPBadRequest("more than one Host header"))
        found = _HOST.fullmatch(value)
        if found is None or (found[1] is not None and not _is_ipv6(found[1])):
            shown = value[:64].decode("latin-1")
            raise _ParseAbort(HTTPBadRequest(f"the Host header {shown!r} is not a valid host[:port]"))
        self._checked_host = value

    def _framing_header(self, name: bytes, value: bytes) -> None:
        """A header that changes how the request is framed or answered."""
        if name == b"content-length":
            self._content_length = int(value)  # llhttp accepts digits only
        elif name == b"connection":
            self._connection_header = True
        elif name == b"expect":
            if value.lower() != b"100-continue":
                return
            self._expect_continue = True
        elif name == b"transfer-encoding":
            # Repeated lines make one list (RFC 9110, 5.3): "gzip" then "chunked" is "gzip, chunked".
            previous = self._transfer_encoding
            self._transfer_encoding = value if previous is None else previous + b"," + value
        else:
            return
        self._framing = True

    def on_headers_complete(self) -> None:
        self._in_head = False
        parser = self._parser
        target = self._url
        # The common request first: HTTP/1.1 kept alive, a Host, no body framing,
        # Expect or Connection header, a plain origin-form target, a known method.
        if (
            self._has_host
            and not self._framing
            and self._refusal is None
            and parser.should_keep_alive()
            and target[:1] == b"/"
            and _PERCENT not in target  # an int: b"%" would raise and catch a TypeError inside
        ):
            method = _METHODS.get(parser.get_method())
            if method is not None:
                raw_path, _, query = target.partition(b"?")
                # Request.__init__'s eight attributes, set here: calling a class with a
                # Python __init__ costs CPython 3.11 about 900 instructions more
                # (test_protocol checks that both ways make the same request).
                request = _new_object(Request)
                request.method = method
                request.path = raw_path.decode("latin-1")
                request.raw_path = raw_path
                request.query_string = query.decode("latin-1")
                request.http_version = "1.1"
                request.app = self._app
                request._raw_headers = self._raw_headers
                request._protocol = self
                # Without Content-Length or Transfer-Encoding a request has no body
                # (RFC 9112, 6.3): it is complete now, and on_message_complete has nothing to do.
                request._body_done = True
                if method != "HEAD":
                    request._plain = True
                queue = self._queue
                queue.append(request)
                # Ready for the next head (_next_head, without the call; no framing header was sent).
                self._url = b""
                self._raw_headers = []
                self._header_bytes = 0
                self._has_host = False
                if len(queue) >= self._max_pipeline:
                    self._pause_reading()
                return
        self._head_complete(parser, target)
        self._next_head()

    def _next_head(self) -> None:
        """Forget the head just parsed: the parser may go on with the next one."""
        self._url = b""
        self._raw_headers = []
        self._header_bytes = 0
        self._has_host = False
        if self._framing:
            self._framing = False
            self._content_length = None
            self._expect_continue = False
            self._connection_header = False
            self._transfer_encoding = None

    def _head_complete(self, parser: httptools.HttpRequestParser, target: bytes) -> None:
        """on_headers_complete for every other request (all those with a body among them)."""
        self._body_received = 0
        method = parser.get_method()
        keep_alive = parser.should_keep_alive()
        # Formatting the version costs 0.2 µs; without a Connection header, only
        # HTTP/1.1 is kept alive, so the common case needs no formatting.
        http_version = "1.1" if keep_alive and not self._connection_header else parser.get_http_version()
        head_error: HTTPError | None = None
        if not target.startswith(b"/"):
            target = origin_form(target)
        if b"?" in target:
            raw_path, _, query_bytes = target.partition(b"?")
            query = query_bytes.decode("latin-1")
        else:
            raw_path, query = target, ""
        path = raw_path.decode("latin-1")
        if "%" in path:
            try:
                path = unquote(path, errors="strict")
            except UnicodeDecodeError:
                head_error = HTTPBadRequest("request path is not valid UTF-8 after percent-decoding")
        request = Request(
            _METHODS.get(method) or method.decode("ascii"),
            path,
            raw_path,
            query,
            http_version,
            self._raw_headers,
            self._app,
            self,
        )
        if not keep_alive:
            request.keep_alive = False
        elif http_version == "1.1" and not self._expect_continue and method != b"HEAD":
            request._plain = True  # may take the fast path in _respond
        if self._expect_continue and http_version == "1.1":
            request._expect_continue = True
        self._queue.append(request)
        self._receiving = request
        if self._content_length is not None and self._content_length > self._limits.max_body_size:
            request._head_error = HTTPPayloadTooLarge(
                f"request body of {self._content_length} bytes exceeds the limit of {self._limits.max_body_size}"
            )
            request.keep_alive = False
            raise _StopParsing
        if http_version == "1.1" and not self._has_host:
            head_error = HTTPBadRequest("an HTTP/1.1 request needs a Host header")  # RFC 9112, 3.2
            request.keep_alive = False
        if self._transfer_encoding is not None:
            codings = [coding.strip().lower() for coding in self._transfer_encoding.split(b",")]
            if codings[-1] != b"chunked":
                # RFC 9112, 6.3: the body's length cannot be known; 400, and read no more.
                request._head_error = HTTPBadRequest(
                    "the last transfer coding of a request must be chunked; its body length cannot be known"
                )
                request.keep_alive = False
                raise _StopParsing
            if len(codings) > 1:
                # llhttp accepts "gzip, chunked"; we would hand the handler a still-encoded body.
                head_error = HTTPNotImplemented("only the chunked transfer coding is supported")
                request.keep_alive = False
            elif http_version == "1.0":
                request.keep_alive = False  # RFC 9112, 6.1: its framing is suspect; close after it
        if http_version != "1.1" and http_version != "1.0":  # llhttp also takes 0.9 and 2.0
            head_error = HTTPVersionNotSupported(f"HTTP/{http_version} is not supported; this server speaks HTTP/1.1")
            request.keep_alive = False
        if self._refusal is not None:
            head_error = self._refusal
            request.keep_alive = False
        if head_error is not None:
            request._head_error = head_error
        if len(self._queue) >= self._max_pipeline:
            self._pause_reading()

    def on_body(self, body: bytes) -> None:
        request = self._receiving
        assert request is not None
        self._body_received += len(body)
        if self._body_received > self._limits.max_body_size:
            request._finish_body(
                HTTPPayloadTooLarge(f"request body exceeds the limit of {self._limits.max_body_size} bytes")
            )
            request.keep_alive = False
            raise _StopParsing
        if request._discard:
            return
        request._feed(body)
        self._buffered_body += len(body)
        if self._buffered_body > self._limits.body_buffer:
            self._pause_reading()

    def on_message_complete(self) -> None:
        request = self._receiving
        if request is None:
            return  # a request without a body, completed by on_headers_complete
        if request._chunks is None and request._waiter is None:
            request._body_done = True  # no body, nobody waiting: skip the call
        else:
            request._finish_body()
        self._receiving = None
        self._body_since = 0.0

    def _stop_parsing(self) -> None:
        """Read nothing more: answer what is queued, then close."""
        self._parsing_stopped = True
        self._close_after_queue = True
        self._pending_data = None
        self._pause_reading()

    def _abort_parsing(self, error: HTTPError, method_known: bool = True) -> None:
        """The bytes on the wire are broken: answer ``error`` after what is queued, then close."""
        self._stop_parsing()
        receiving = self._receiving
        if receiving is not None:
            # A handler reading this body gets the error; one that already
            # answered has nothing more to send, and the connection closes.
            receiving._finish_body(error)
            self._receiving = None
            return
        request = self._broken_request(method_known)
        request._head_error = error
        request._finish_body()
        self._queue.append(request)

    def _broken_request(self, method_known: bool) -> Request:
        """A stand-in for a request whose head could not be parsed, to answer an error and close.

        A HEAD keeps its method when the parser got that far, so that its answer has
        no body: the client would read the body as the start of the next response.
        """
        request = Request("HEAD" if self._is_head(method_known) else "GET", "", b"", "", "1.1", [], self._app, self)
        request.keep_alive = False
        return request

    def _is_head(self, method_known: bool) -> bool:
        """Whether the head being parsed is a HEAD request's, as far as the parser got."""
        return method_known and self._parser.get_method() == b"HEAD"


def _is_ipv6(text: bytes) -> bool:
    try:
        ipaddress.IPv6Address(text.decode("ascii"))
    except ValueError:
        return False
    return True

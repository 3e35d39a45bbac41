"""HeadReader: bytes in, through llhttp, to requests' heads, with the limits and deadlines of a head.

It owns the parser. A read goes to ``receive_data`` (the transport's owner hands it over
directly); the head's callbacks (``on_url``, ``on_header``, ``on_headers_complete``) are
its own methods, so the bytes of a head and the request they make are counted, checked
and built here: the request line's and the headers' limits, the Host check, the head's
deadline and the keep-alive wait before it. llhttp's body and message callbacks belong
to the connection's state machine and body intake (H1Connection wires them, see
``Callbacks``); broken bytes go to BrokenBytes (broken.py).

The common request (see ``on_headers_complete``) is built and appended to the
connection's queue here, on the hot path; the state machine counts it when llhttp
reports the message complete, its next call. Every other head is handed over with
``head_received``. What HeadReader needs of the state machine is ``StateMachine``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import NamedTuple, Protocol

import httptools

from ...http import exceptions as errors
from ...http.exceptions import HTTPError
from ...http.limits import Limits
from ...http.request import AppInterface, BodySource, Request
from .body import BodyIntake
from .broken import BrokenBytes, ParseAbort, is_head
from .heads import NO_FRAMING, Framing, framing_header, general_request, host_error
from .states import BODY, HEAD, STOPPED, UPGRADED, Clock, Timeout, nothing

__all__ = ["HeadReader", "Callbacks", "StateMachine", "CLOSE"]

CLOSE = "close"  # head_deadline: close the connection, writing nothing

# Here, not imported from py: imported, it measured 490 instructions a request more (/json).
_METHODS = {m.encode(): m for m in ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")}
_FRAMING_SIZES = frozenset({len(b"content-length"), len(b"connection"), len(b"expect"), len(b"transfer-encoding")})
_FEED_SLICE = 16 * 1024  # bytes parsed at a time, so that a connection told to stop reading stops promptly
_PERCENT = ord("%")  # `int in bytes` tests one byte; `bytes in bytes` first tries an int, at a cost
_new_object = object.__new__


class StateMachine(Protocol):
    """What HeadReader needs of the connection's state machine (H1Connection)."""

    recv_state: str
    want_read: bool
    idle_since: float  # when the last answer was finished

    @property
    def stopped(self) -> bool: ...
    def head_received(self, request: Request, error: HTTPError | None, chunked: bool, stop: bool) -> None: ...
    def stop_reading(self) -> None: ...
    def upgrade_asked(self, rest: bytes | memoryview) -> None: ...
    def after_upgrade(self, data: bytes | memoryview) -> None: ...
    def answer_broken(self, request: Request, error: HTTPError) -> None: ...


class Callbacks(NamedTuple):
    """The object llhttp calls: httptools takes each callback from it once, when the parser is made,
    so each is a bound method of the piece whose idea it is, called with no call in between."""

    on_url: Callable[[bytes], None]
    on_header: Callable[[bytes, bytes], None]
    on_headers_complete: Callable[[], None]
    on_body: Callable[[bytes], None]
    on_chunk_header: Callable[[], None]
    on_message_complete: Callable[[], None]


class HeadReader:
    """Bytes in: heads become Requests in the connection's queue; a head's limits and deadlines."""

    __slots__ = (
        "_conn",
        "_queue",
        "_body",
        "_app",
        "_limits",
        "_clock",
        "_body_source",
        "_parser",
        "_broken",
        "_ready",
        "_unparsed",
        "_refusal",
        "_url",
        "_raw_headers",
        "_head_bytes",
        "_header_bytes",
        "_in_head",
        "_has_host",
        "_checked_host",
        "_framing",
        "_max_request_line",
        "_max_headers",
        "_max_header_size",
        "_head_since",
    )

    def __init__(
        self,
        conn: StateMachine,
        queue: deque[Request],
        body: BodyIntake,
        app: AppInterface,
        limits: Limits,
        clock: Clock,
        body_source: BodySource | None,
        on_body: Callable[[bytes], None],
        on_message_complete: Callable[[], None],
    ) -> None:
        self._conn = conn
        self._queue = queue  # the connection's: the common request is appended to it here
        self._body = body
        self._app = app
        self._limits = limits
        self._clock = clock
        self._body_source = body_source  # what the requests made here pull their body through
        callbacks = Callbacks(
            self.on_url, self.on_header, self.on_headers_complete, on_body, body.on_chunk_header, on_message_complete
        )
        self._parser = parser = httptools.HttpRequestParser(callbacks)
        self._broken = BrokenBytes(conn, parser, body, app, body_source)
        self._ready = nothing  # see on_ready
        self._unparsed: memoryview | None = None  # the rest of a large read, while want_read is False
        self._refusal: HTTPError | None = None
        # the head being parsed
        self._url = b""
        self._raw_headers: list[tuple[bytes, bytes]] = []
        self._head_bytes = 0  # the head's bytes so far, as received (a head that never ends is bounded)
        self._header_bytes = 0  # its header lines' names and values (a head that arrives at once is bounded)
        self._in_head = True
        self._has_host = False
        self._checked_host = b""  # the last Host value found valid here (RFC 3986: a reg-name may be empty)
        self._framing: Framing | None = None  # a framing header was sent: on_headers_complete's general path
        # limits read for every request, kept here (one attribute lookup, not two)
        self._max_request_line = limits.max_request_line
        self._max_headers = limits.max_headers
        self._max_header_size = limits.max_header_size
        self._head_since = clock.now  # when the head under way began

    def on_ready(self, ready: Callable[[], None]) -> None:
        """Call ``ready`` after each read is parsed."""
        self._ready = ready

    def refuse(self, error: HTTPError) -> None:
        """Answer the next head with ``error`` instead of running its handler."""
        self._refusal = error

    # -- bytes in ----------------------------------------------------------------------

    def receive_data(self, data: bytes | memoryview) -> None:
        """Parse ``data``: complete heads join the queue; body bytes go to the request being received."""
        state = self._conn.recv_state
        if state is not HEAD and state is not BODY:
            if state is UPGRADED:  # bytes of the new protocol, read before reading paused
                self._conn.after_upgrade(data)
            return
        size = len(data)
        if size > _FEED_SLICE:
            self._receive_slices(memoryview(data))
            return
        if self._in_head:
            self._head_bytes += size
        elif self._body.receiving is not None:
            self._receive_body(data, size)
            return
        else:
            # Between requests: these bytes begin the next head (its clock starts here, not in an on_message_begin
            # callback, a call a request), or go on with one begun in the read that ended the previous request
            # (_url is set), timed from the answer as in head_deadline.
            self._in_head = True
            self._head_bytes = size
            if self._url and not self._queue:
                self._head_since = self._conn.idle_since
            else:
                self._head_since = self._clock.now
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._broken.parse_error(exc)
        except httptools.HttpParserUpgrade as exc:
            # llhttp stopped after a head asking to change protocol: what follows it is the new protocol's
            self._conn.upgrade_asked(data[exc.args[0] :])
        if self._in_head and self._head_bytes > self._max_header_size and self._conn.recv_state is not STOPPED:
            self._broken.abort(errors.HTTPRequestHeaderFieldsTooLarge("request head too large"))
        self._ready()

    def _receive_body(self, data: bytes | memoryview, size: int) -> None:
        """A read that begins inside a body; if it ends there too, its bytes beside the data are counted."""
        body = self._body
        receiving, received = body.receiving, body.received
        try:
            self._parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            self._broken.parse_error(exc)
        if body.receiving is receiving and receiving is not None and not self._conn.stopped:
            error = body.count_wire(size, body.received - received)
            if error is not None:
                self._broken.abort(error)
        self._ready()

    def _receive_slices(self, data: memoryview) -> None:
        """A large read, a slice at a time, so that a full pipeline or body buffer stops it promptly.

        Inside a body a slice is as large as the room left in the body's buffer: a large
        upload is parsed in a few large pieces, not in many of 16 KiB (each piece costs a
        chunk for the handler to take, whatever its size).
        """
        conn = self._conn
        body = self._body
        start, end = 0, len(data)
        while start < end:
            if not conn.want_read:
                if not conn.stopped:
                    self._unparsed = data[start:]  # parsed once want_read is True again: receive_unparsed
                return
            if body.receiving is not None and not self._in_head:
                size = max(_FEED_SLICE, body.buffer_limit - body.buffered)
                piece = data[start : start + size]
                self._receive_body(piece, len(piece))
            else:
                size = _FEED_SLICE
                self.receive_data(data[start : start + size])
            start += size

    def has_unparsed(self) -> bool:
        return self._unparsed is not None

    def take_unparsed(self) -> bytes:
        """What is left of a large read, taken (the bytes after an upgrade's head)."""
        data, self._unparsed = self._unparsed, None
        return b"" if data is None else bytes(data)

    def retire(self) -> None:
        """The connection is a WebSocket's now: llhttp's parser, its callbacks and what answers a broken
        request go (about a kilobyte and ten objects a WebSocket keeps otherwise). Nothing is parsed here
        again: what arrives is the WebSocket's (and an UPGRADED connection's bytes never reach the parser)."""
        del self._parser, self._broken

    def receive_unparsed(self) -> None:
        data, self._unparsed = self._unparsed, None
        if data is not None and not self._conn.stopped:
            self._receive_slices(data)

    def drop_unparsed(self) -> None:
        """Reading stopped for good: what is left of a large read is never parsed."""
        self._unparsed = None

    # -- a head's deadlines --------------------------------------------------------------

    def head_deadline(self, now: float, idle_since: float) -> str | Timeout | None:
        """With nothing queued, once a second: None, CLOSE, or a Timeout to answer before closing.

        ``idle_since``: when the connection answered its last request; the keep-alive wait runs from then.
        """
        limits = self._limits
        if self._in_head or self._url:
            # _url alone: begun in the bytes ending the previous request (unseen by receive_data); timed from then.
            since = self._head_since if self._in_head else idle_since
            if now - since > limits.head_timeout:
                if self._head_bytes or self._url:
                    # _url: the method of the head under way was parsed (it comes before the target)
                    error = errors.HTTPRequestTimeout("request head not received in time")
                    return Timeout(error, is_head(self._parser, bool(self._url)))
                return CLOSE
        elif now - idle_since > limits.keepalive_timeout:
            return CLOSE
        return None

    @property
    def head_begun(self) -> bool:
        # _url alone: begun in the read that ended the previous request (see head_deadline)
        return bool((self._in_head and self._head_bytes) or self._url)

    # -- llhttp's head callbacks ---------------------------------------------------------

    def on_url(self, url: bytes) -> None:
        self._url += url
        if len(self._url) > self._max_request_line:
            raise ParseAbort(errors.HTTPURITooLong(f"request target longer than {self._max_request_line} bytes"))

    def on_header(self, name: bytes, value: bytes) -> None:
        headers = self._raw_headers
        headers.append((name, value))
        size = len(name)
        self._header_bytes += size + len(value)
        if len(headers) > self._max_headers or self._header_bytes > self._max_header_size:
            raise ParseAbort(errors.HTTPRequestHeaderFieldsTooLarge("request headers too large or too many"))
        # Cheap length tests first: most headers are none of these.
        if size == 4:
            if name == b"Host" or name.lower() == b"host":  # as most clients spell it: no lower()
                # A connection's client sends the same Host each time: checked once.
                if self._has_host or value != self._checked_host:
                    self._check_host(value)
                self._has_host = True
        elif size in _FRAMING_SIZES:
            framing = framing_header(self._framing, name.lower(), value)
            if framing is not None:
                self._framing = framing

    def _check_host(self, value: bytes) -> None:
        """RFC 9112, 3.2: a second Host line, or a Host that is not a host, is a 400."""
        if self._has_host:
            raise ParseAbort(errors.HTTPBadRequest("more than one Host header"))
        error = host_error(value)
        if error is not None:
            raise ParseAbort(error)
        self._checked_host = value

    def on_headers_complete(self) -> None:
        self._in_head = False
        parser = self._parser
        target = self._url
        # The common request first: HTTP/1.1 kept alive, a Host, no body framing, Expect or Connection header,
        # a plain origin-form target, a known method. No body (RFC 9112, 6.3): recv stays HEAD (RECV[HEAD, "no_body"]).
        if (
            self._has_host
            and self._framing is None
            and self._refusal is None
            and parser.should_keep_alive()
            and target[:1] == b"/"
            and _PERCENT not in target  # an int: b"%" would raise and catch a TypeError inside
        ):
            method = _METHODS.get(parser.get_method())
            if method is not None and method != "HEAD":
                raw_path, _, query = target.partition(b"?")
                # Request.__init__'s eight attributes, set here: a Python __init__ costs 900 instructions more
                # (CPython 3.11); test_protocol checks that both ways make the same request.
                request = _new_object(Request)
                request.method = method
                request.path = raw_path.decode("latin-1")
                request.raw_path = raw_path
                request.query_string = query.decode("latin-1")
                request.http_version = "1.1"
                request.app = self._app
                request.raw_headers = self._raw_headers
                request.protocol = self._body_source
                # No Content-Length or Transfer-Encoding, no body (RFC 9112, 6.3): complete now, as Request's
                # class values say, and answerable the short way (a HEAD is not: it takes _head_complete).
                # Queued here; the state machine counts it in on_message_complete, llhttp's next call.
                self._queue.append(request)
                # Ready for the next head (_next_head, without the call; no framing header was sent).
                self._url = b""
                self._raw_headers = []
                self._header_bytes = 0
                self._has_host = False
                return
        self._head_complete(parser, target)
        self._next_head()

    def _next_head(self) -> None:
        """Forget the head just parsed: the parser may go on with the next one."""
        self._url = b""
        self._raw_headers = []
        self._header_bytes = 0
        self._has_host = False
        self._framing = None

    def _head_complete(self, parser: httptools.HttpRequestParser, target: bytes) -> None:
        """on_headers_complete for every other request (all those with a body among them)."""
        method = parser.get_method()
        framing = self._framing
        request, error, stop = general_request(
            parser,
            _METHODS.get(method) or method.decode("ascii"),
            target,
            self._app,
            self._body_source,
            self._raw_headers,
            self._limits.max_body_size,
            has_host=self._has_host,
            framing=framing or NO_FRAMING,
            refusal=self._refusal,
        )
        chunked = framing is not None and framing.transfer_encoding is not None
        self._conn.head_received(request, error, chunked, stop)

"""H1Connection: one HTTP/1.1 connection's protocol state, with no I/O and no event loop.

Bytes go in (``receive_data``), through llhttp (httptools), whose callbacks are this object's own methods:
a complete head becomes a Request appended to ``queue``, in arrival order (pipelining); framing headers,
limits and RFC 9112's strictness rules are decided here. A head that cannot be served becomes a Request
whose error is kept in ``head_errors``, answered in its turn. Body bytes go into the request being received.

The owner of the transport (protocol.py) acts on ``want_read``, ``queue[0]``, ``connection_line``,
``finish`` (False: close now), ``check_deadline`` and ``shutdown``, each described below. States: states.py.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import httptools

from ...http import exceptions as errors
from ...http.exceptions import HTTPError
from ...http.limits import Limits
from ...http.request import AppInterface, BodySource, Request
from .body import BodyIntake, BodyMemory
from .heads import (
    NO_FRAMING,
    Framing,
    ParseAbort,
    StopParsing,
    broken_request,
    framing_header,
    general_request,
    host_error,
    parse_failure,
    upgrade_refused,
)
from .states import CLOSED, CLOSING, HEAD, IDLE, RECV, SEND, STOPPED, Clock, Timeout, nothing

__all__ = ["H1Connection", "CLOSE"]

CLOSE = "close"  # check_deadline: close the connection, writing nothing
_CLOSE_LINE = "Connection: close\r\n"
_KEEP_ALIVE_LINE = "Connection: keep-alive\r\n"  # for an HTTP/1.0 client that asked to keep alive

# Here, not imported from py: imported, it measured 490 instructions a request more (/json).
_METHODS = {m.encode(): m for m in ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")}
_FRAMING_SIZES = frozenset({len(b"content-length"), len(b"connection"), len(b"expect"), len(b"transfer-encoding")})
_FEED_SLICE = 16 * 1024  # bytes parsed at a time, so that a connection told to stop reading stops promptly
_PERCENT = ord("%")  # `int in bytes` tests one byte; `bytes in bytes` first tries an int, at a cost
_new_object = object.__new__

# The send side's table, one event at a time: a dict keyed by a str is one lookup, no tuple.
_ON_REQUEST = {state: new for (state, event), new in SEND.items() if event == "request"}
_ON_KEPT = {state: new for (state, event), new in SEND.items() if event == "kept"}


class H1Connection:
    """One connection's HTTP/1.1 state: bytes in become Requests in ``queue``; answers are finished in order."""

    # Slots: over 30 attributes leave CPython 3.11's shared-key dicts (a dict lookup per attribute read).
    __slots__ = tuple(
        "_app _limits _clock _body_source _parser recv_state send_state want_read queue head_errors _body "
        "_refusal _url _raw_headers _head_bytes _header_bytes _in_head _has_host _checked_host _framing "
        "_max_request_line _max_headers _max_header_size _max_pipeline _head_since _idle_since _ready _unparsed".split()
    )

    def __init__(
        self,
        app: AppInterface,
        limits: Limits,
        clock: Clock,
        body_source: BodySource | None = None,
        body_memory: BodyMemory | None = None,
    ) -> None:
        self._app = app
        self._limits = limits
        self._clock = clock
        self._body_source = body_source  # what the requests made here pull their body through
        self._parser = httptools.HttpRequestParser(self)
        self._ready = nothing  # see on_ready
        self._unparsed: memoryview | None = None  # the rest of a large read, while want_read is False
        self.recv_state = HEAD
        self.send_state = IDLE
        self.want_read = True
        # requests received, in order; the first is the one being answered
        self.queue: deque[Request] = deque()
        # the queued requests whose head cannot be served: the error to answer instead of running a handler
        self.head_errors: dict[Request, HTTPError] = {}
        self._body = BodyIntake(limits, clock, body_memory)  # the body arriving: its deadline, the bytes it holds
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
        self._max_pipeline = limits.max_pipeline
        # deadlines: when the head began, the connection went idle (the body's: BodyIntake)
        self._head_since = clock.now
        self._idle_since = clock.now

    def on_ready(self, ready: Callable[[], None]) -> None:
        """Call ``ready`` after each read is parsed: the owner's cue to act on ``queue`` and ``want_read``."""
        self._ready = ready

    # -- events in -------------------------------------------------------------------

    def receive_data(self, data: bytes | memoryview) -> None:
        """Parse ``data``: complete heads join ``queue``; body bytes go to the request being received."""
        state = self.recv_state
        if state is STOPPED or state is CLOSED:
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
            # (_url is set), timed from the answer as in check_deadline.
            self._in_head = True
            self._head_bytes = size
            if self._url and not self.queue:
                self._head_since = self._idle_since
            else:
                self._head_since = self._clock.now
        try:
            self._parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            self._parse_error(exc)
        if self._in_head and self._head_bytes > self._max_header_size and self.recv_state is not STOPPED:
            self._abort_parsing(errors.HTTPRequestHeaderFieldsTooLarge("request head too large"))
        self._ready()

    def _receive_body(self, data: bytes | memoryview, size: int) -> None:
        """A read that begins inside a body; if it ends there too, its bytes beside the data are counted."""
        body = self._body
        receiving, received = body.receiving, body.received
        try:
            self._parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            self._parse_error(exc)
        if body.receiving is receiving and receiving is not None and not self.stopped:
            error = body.count_wire(size, body.received - received)
            if error is not None:
                self._abort_parsing(error)
        self._ready()

    def _receive_slices(self, data: memoryview) -> None:
        """A large read, a slice at a time, so that a full pipeline or body buffer stops it promptly."""
        for start in range(0, len(data), _FEED_SLICE):
            if not self.want_read:
                if not self.stopped:
                    self._unparsed = data[start:]  # parsed once want_read is True again: receive_unparsed
                return
            self.receive_data(data[start : start + _FEED_SLICE])

    def has_unparsed(self) -> bool:
        """Whether bytes of an earlier read wait to be parsed (``receive_unparsed``) before more are read."""
        return self._unparsed is not None

    def receive_unparsed(self) -> None:
        """Parse what was left of a large read when ``want_read`` became False."""
        data, self._unparsed = self._unparsed, None
        if data is not None and not self.stopped:
            self._receive_slices(data)

    def receive_eof(self) -> None:
        """The client half-closed: the body being received ends short; answer what was received, then close."""
        self._close_after_queue()
        self._body.complete(errors.ClientDisconnected("the client closed its side before the body ended"))

    def connection_lost(self, answering: bool) -> None:
        """The transport is gone: bodies end with ClientDisconnected; nothing more is answered.

        ``answering``: a handler is answering the queue's head, which stays until it is finished.
        """
        self.recv_state = RECV[self.recv_state, "lost"]
        self.send_state = SEND[self.send_state, "lost"]
        self.want_read = False
        self._body.lost()
        gone = errors.ClientDisconnected("the client closed the connection")
        for request in self.queue:
            request.protocol = None
            request.end_body(gone)
        if not answering:
            self._clear_queue()

    def refuse(self, error: HTTPError) -> None:
        """Answer the first request with ``error`` (after reading its head), then close: past max_connections."""
        self._refusal = error

    def next_request(self) -> Request | None:
        """The request to answer now, the queue's head (the driver, on its hot path, reads ``queue[0]``)."""
        return self.queue[0] if self.queue else None

    def take_head_error(self, request: Request) -> HTTPError | None:
        """The error to answer instead of running ``request``'s handler (its head could not be served), forgotten."""
        return self.head_errors.pop(request, None)

    def connection_line(self, request: Request) -> str:
        """The Connection line of the answer to ``request``: whether the connection stays open is decided here."""
        if request.waits_for_continue:
            request.keep_alive = False  # the client waits for 100 Continue; its body may never come
        if not request.keep_alive or (self.send_state is CLOSING and len(self.queue) <= 1):
            request.keep_alive = False
            return _CLOSE_LINE
        if request.http_version == "1.0":
            return _KEEP_ALIVE_LINE
        return ""

    def finish(self, request: Request) -> bool:
        """``request`` (the queue's head) is answered; False: close the connection now."""
        state = self.send_state
        if state is CLOSED:
            self._clear_queue()
            return False
        if request.keep_alive:
            return self.finish_kept(request) or True
        self.queue.popleft()
        self._drop_body(request)
        self.send_state = SEND[state, "closed"]
        self._clear_queue()  # what was pipelined after a Connection: close is never answered
        return False

    def finish_kept(self, request: Request) -> bool:
        """``finish`` for a kept-alive ``request`` on an open connection (the driver's common answer); ``want_read``."""
        queue = self.queue
        queue.popleft()
        # Its body is buffered or still arriving (a superset: the bytes may be a later request's).
        body = self._body
        if body.buffered or request is body.receiving:
            self._drop_body(request)
        if not queue:  # else the next one is answered: (kept, then request) leaves the state as it is
            self.send_state = _ON_KEPT[self.send_state]
        self._idle_since = self._clock.now
        if not self.want_read:
            self._update_want_read()
        return self.want_read

    def abandon(self) -> None:
        """The answer under way failed (its handler was cancelled, a bug of ours): answer nothing more."""
        self.send_state = SEND[self.send_state, "abandon"]
        self._clear_queue()

    def body_consumed(self, size: int) -> None:
        """A handler took ``size`` body bytes out of the buffer (``want_read`` may become True)."""
        self._body.release(size)
        if not self.want_read:
            self._update_want_read()

    def buffer_whole_body(self) -> None:
        """Buffer the body arriving whole (up to ``max_body_size``): the admission gate waits for it."""
        self._body.whole()
        if not self.want_read:
            self._update_want_read()

    def check_deadline(self, now: float) -> str | Timeout | None:
        """Called once a second: None, CLOSE, or a Timeout to answer before closing."""
        if self.send_state is CLOSED:
            return None
        limits = self._limits
        if not self.queue:
            if self._in_head or self._url:
                # _url alone: begun in the bytes ending the previous request (unseen by receive_data); timed from then.
                since = self._head_since if self._in_head else self._idle_since
                if now - since > limits.head_timeout:
                    if self._head_bytes or self._url:
                        # _url: the method of the head under way was parsed (it comes before the target)
                        error = errors.HTTPRequestTimeout("request head not received in time")
                        return Timeout(error, self._is_head(bool(self._url)))
                    return CLOSE
            elif now - self._idle_since > limits.keepalive_timeout:
                return CLOSE
        if self._body.deadline and self.want_read and now > self._body.deadline:
            # The body arriving is late: a handler that may read it gets 408; past its answer, close.
            late = self._body.complete(errors.HTTPRequestTimeout("request body not received in time"))
            self._stop_parsing()
            if late is None or not self.queue or self.queue[-1] is not late:
                return CLOSE
            late.keep_alive = False
        return None

    def shutdown(self, close_idle: bool = True) -> bool:
        """Server shutdown: answer what is queued, then close; True: close now (idle, ``close_idle``).

        A connection whose next request head has begun to arrive is not idle: its
        client sent it before the shutdown, so it is answered (or times out).
        """
        self._close_after_queue()
        return close_idle and not self.queue and not self.head_begun

    @property
    def stopped(self) -> bool:
        """Whether parsing stopped for good: the bytes still to come are never read."""
        return self.recv_state is STOPPED or self.recv_state is CLOSED

    @property
    def head_begun(self) -> bool:
        # _url alone: begun in the read that ended the previous request (see check_deadline)
        return bool((self._in_head and self._head_bytes) or self._url)

    # -- the close decision, flow control ------------------------------------------------

    def _close_after_queue(self) -> None:
        self.send_state = SEND[self.send_state, "closing"]

    def _update_want_read(self) -> None:
        """Reading may resume once the pipeline and the body buffer have room."""
        state = self.recv_state
        if (
            state is not STOPPED
            and state is not CLOSED
            and len(self.queue) < self._max_pipeline
            and self._body.buffered <= self._body.buffer_limit
        ):
            self.want_read = True
            self._body.resumed()

    def _clear_queue(self) -> None:
        self.queue.clear()
        self.head_errors.clear()

    def _drop_body(self, request: Request) -> None:
        """The request is answered: free its buffered body, discard what is still to come."""
        self._body.release(request.drop_body())

    # -- llhttp's callbacks ------------------------------------------------------------

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
                queue = self.queue
                queue.append(request)
                self.send_state = _ON_REQUEST[self.send_state]
                # Ready for the next head (_next_head, without the call; no framing header was sent).
                self._url = b""
                self._raw_headers = []
                self._header_bytes = 0
                self._has_host = False
                if len(queue) >= self._max_pipeline:
                    self.want_read = False
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
        request, error, stop = general_request(
            parser,
            _METHODS.get(method) or method.decode("ascii"),
            target,
            self._app,
            self._body_source,
            self._raw_headers,
            self._limits.max_body_size,
            has_host=self._has_host,
            framing=self._framing or NO_FRAMING,
            refusal=self._refusal,
        )
        self.queue.append(request)
        if error is not None:
            self.head_errors[request] = error
        self.send_state = _ON_REQUEST[self.send_state]
        self._body.begin(request, self._framing is not None and self._framing.transfer_encoding is not None)
        self.recv_state = RECV[self.recv_state, "body"]  # on_message_complete may follow at once: HEAD again
        if stop:
            raise StopParsing
        if len(self.queue) >= self._max_pipeline:
            self.want_read = False
            self._body.paused()

    def on_body(self, body: bytes) -> None:
        if self._body.feed(body):  # the buffer is full: read no more until a handler takes some
            self.want_read = False
            self._body.paused()

    def on_chunk_header(self) -> None:
        self._body.chunks += 1

    def on_message_complete(self) -> None:
        body = self._body
        if body.receiving is not None:  # else a request without a body, completed by on_headers_complete
            body.complete()
            self.recv_state = RECV[self.recv_state, "complete"]

    # -- broken bytes --------------------------------------------------------------------

    def _parse_error(self, exc: Exception) -> None:
        error, method_known = parse_failure(exc)
        if error is not None:
            self._abort_parsing(error, method_known)
            return
        if isinstance(exc, httptools.HttpParserUpgrade) and self.queue:
            upgrade_refused(self.queue[-1], self.head_errors)  # we speak no other protocol
        self._stop_parsing()

    def _stop_parsing(self) -> None:
        """Read nothing more: answer what is queued, then close."""
        self._unparsed = None
        self.recv_state = RECV[self.recv_state, "stop"]
        self.want_read = False
        self._close_after_queue()

    def _abort_parsing(self, error: HTTPError, method_known: bool = True) -> None:
        """The bytes on the wire are broken: answer ``error`` after what is queued, then close."""
        self._stop_parsing()
        if self._body.complete(error) is not None:
            # A handler reading this body gets the error; one that answered already: the connection closes.
            return
        method = "HEAD" if self._is_head(method_known) else "GET"
        request = broken_request(method, self._app, self._body_source)
        self.queue.append(request)
        self.head_errors[request] = error
        self.send_state = _ON_REQUEST[self.send_state]

    def _is_head(self, method_known: bool) -> bool:
        """Whether the head being parsed is a HEAD request's, as far as the parser got."""
        return method_known and self._parser.get_method() == b"HEAD"

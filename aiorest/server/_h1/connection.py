"""H1Connection: one HTTP/1.1 connection's protocol state, with no I/O and no event loop.

Bytes go in (``receive_data``) to its HeadReader (reader.py), which feeds llhttp (httptools):
a complete head becomes a Request appended to ``queue``, in arrival order (pipelining); the
head's limits, Host check and deadlines are the reader's, RFC 9112's rules for a head are
heads.py's, the body arriving is BodyIntake's (body.py), broken bytes are BrokenBytes'
(broken.py). This object is the state machine between them: each side's state moves along
its table (states.py), and here are the flow-control decisions (``want_read``), the close
decision (``connection_line``, ``finish``) and the place where a connection would change
protocol (``upgrade_asked``). A head that cannot be served becomes a Request whose error is
kept in ``head_errors``, answered in its turn.

The owner of the transport (protocol.py) acts on ``want_read``, ``queue[0]``, ``connection_line``,
``finish`` (False: close now), ``check_deadline`` and ``shutdown``, each described below.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from ...http import exceptions as errors
from ...http.exceptions import HTTPError
from ...http.limits import Limits
from ...http.request import AppInterface, BodySource, Request
from .body import BodyIntake, BodyMemory
from .broken import StopParsing
from .heads import upgrade_refused, wants_websocket
from .reader import CLOSE, HeadReader
from .states import BODY, CLOSED, CLOSING, HEAD, IDLE, RECV, SEND, UPGRADED, Clock, Timeout

__all__ = ["H1Connection", "CLOSE"]

_CLOSE_LINE = "Connection: close\r\n"
_KEEP_ALIVE_LINE = "Connection: keep-alive\r\n"  # for an HTTP/1.0 client that asked to keep alive

# The send side's table, one event at a time: a dict keyed by a str is one lookup, no tuple.
_ON_REQUEST = {state: new for (state, event), new in SEND.items() if event == "request"}
_ON_KEPT = {state: new for (state, event), new in SEND.items() if event == "kept"}


class H1Connection:
    """One connection's HTTP/1.1 state: bytes in become Requests in ``queue``; answers are finished in order."""

    __slots__ = (
        "_clock",
        "_reader",
        "_body",
        "_max_pipeline",
        "recv_state",
        "send_state",
        "want_read",
        "queue",
        "head_errors",
        "idle_since",
        "receive_data",
        "_upgrade_bytes",
        "_max_upgrade_bytes",
    )

    def __init__(
        self,
        app: AppInterface,
        limits: Limits,
        clock: Clock,
        body_source: BodySource | None = None,
        body_memory: BodyMemory | None = None,
    ) -> None:
        self._clock = clock
        self.recv_state = HEAD
        self.send_state = IDLE
        self.want_read = True
        # requests received, in order; the first is the one being answered
        self.queue: deque[Request] = deque()
        # the queued requests whose head cannot be served: the error to answer instead of running a handler
        self.head_errors: dict[Request, HTTPError] = {}
        self._body = body = BodyIntake(limits, clock, body_memory)  # the body arriving: its deadline, its bytes
        self._max_pipeline = limits.max_pipeline  # read for every request: kept here
        self.idle_since = clock.now  # when the last answer was finished: the keep-alive wait runs from then
        self._upgrade_bytes: bytearray | None = None  # after a WebSocket's head: the new protocol's first bytes
        self._max_upgrade_bytes = limits.max_header_size
        self._reader = reader = HeadReader(
            self, self.queue, body, app, limits, clock, body_source, self.on_body, self.on_message_complete
        )
        # Bytes in go to the reader itself: the transport's owner hands each read to it with no call in between.
        self.receive_data: Callable[[bytes | memoryview], None] = reader.receive_data

    def on_ready(self, ready: Callable[[], None]) -> None:
        """Call ``ready`` after each read is parsed: the owner's cue to act on ``queue`` and ``want_read``."""
        self._reader.on_ready(ready)

    # -- events in -------------------------------------------------------------------

    def has_unparsed(self) -> bool:
        """Whether bytes of an earlier read wait to be parsed (``receive_unparsed``) before more are read."""
        return self._reader.has_unparsed()

    def receive_unparsed(self) -> None:
        """Parse what was left of a large read when ``want_read`` became False."""
        self._reader.receive_unparsed()

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
        self._reader.refuse(error)

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
        self.idle_since = self._clock.now
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

    def buffer_whole_body(self) -> bool:
        """Buffer the body arriving whole (up to ``max_body_size``): the admission gate waits for it.
        False: its route lets it grow past that (an upload), it is read as it arrives."""
        whole = self._body.whole()
        if not self.want_read:
            self._update_want_read()
        return whole

    def check_deadline(self, now: float) -> str | Timeout | None:
        """Called once a second: None, CLOSE, or a Timeout to answer before closing."""
        if self.send_state is CLOSED:
            return None
        if not self.queue:
            late = self._reader.head_deadline(now, self.idle_since)
            if late is not None:
                return late
        body = self._body
        if body.deadline and self.want_read and now > body.deadline:
            # The body arriving is late: a handler that may read it gets 408; past its answer, close.
            late_request = body.complete(errors.HTTPRequestTimeout("request body not received in time"))
            self.stop_reading()
            if late_request is None or not self.queue or self.queue[-1] is not late_request:
                return CLOSE
            late_request.keep_alive = False
        return None

    def shutdown(self, close_idle: bool = True) -> bool:
        """Server shutdown: answer what is queued, then close; True: close now (idle, ``close_idle``).

        A connection whose next request head has begun to arrive is not idle: its
        client sent it before the shutdown, so it is answered (or times out).
        """
        self._close_after_queue()
        return close_idle and not self.queue and not self._reader.head_begun

    @property
    def stopped(self) -> bool:
        """Whether parsing stopped for good: the bytes still to come are never read."""
        state = self.recv_state
        return state is not HEAD and state is not BODY and state is not UPGRADED

    @property
    def head_begun(self) -> bool:
        """Whether the next request's head has begun to arrive."""
        return self._reader.head_begun

    # -- the close decision, flow control ------------------------------------------------

    def _close_after_queue(self) -> None:
        self.send_state = SEND[self.send_state, "closing"]

    def _update_want_read(self) -> None:
        """Reading may resume once the pipeline and the body buffer have room."""
        state = self.recv_state
        if (
            (state is HEAD or state is BODY)
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

    # -- what the reader hands over ---------------------------------------------------------

    def head_received(self, request: Request, error: HTTPError | None, chunked: bool, stop: bool) -> None:
        """A head off the common path, its Request made (HeadReader): ``error`` to answer instead of its
        handler, if any; ``chunked``: its body is; ``stop``: read nothing more after it."""
        self.queue.append(request)
        if error is not None:
            self.head_errors[request] = error
        self.send_state = _ON_REQUEST[self.send_state]
        self._body.begin(request, chunked)
        self.recv_state = RECV[self.recv_state, "body"]  # on_message_complete may follow at once: HEAD again
        if stop:
            raise StopParsing
        if len(self.queue) >= self._max_pipeline:
            self.want_read = False
            self._body.paused()

    # -- llhttp's body and message callbacks (the head's are HeadReader's) ---------------

    def on_body(self, body: bytes) -> None:
        if self._body.feed(body):  # the buffer is full: read no more until a handler takes some
            self.want_read = False
            self._body.paused()

    def on_message_complete(self) -> None:
        body = self._body
        if body.receiving is not None:
            body.complete()
            self.recv_state = RECV[self.recv_state, "complete"]
        else:
            # A request without a body, complete with its head: HeadReader's common path queued it, and
            # it is counted here, in the call llhttp makes next anyway (a call a request fewer).
            self.send_state = _ON_REQUEST[self.send_state]
            if len(self.queue) >= self._max_pipeline:
                self.want_read = False

    # -- broken bytes, a change of protocol (BrokenBytes calls these) -----------------------

    def stop_reading(self) -> None:
        """Read nothing more: answer what is queued, then close."""
        self._reader.drop_unparsed()
        self._upgrade_bytes = None
        self.recv_state = RECV[self.recv_state, "stop"]
        self.want_read = False
        self._close_after_queue()

    def answer_broken(self, request: Request, error: HTTPError) -> None:
        """Answer ``error`` with ``request``, the stand-in for a head that could not be read, after what is queued."""
        self.queue.append(request)
        self.head_errors[request] = error
        self.send_state = _ON_REQUEST[self.send_state]

    def upgrade_asked(self, rest: bytes | memoryview) -> None:
        """llhttp stopped at a head asking to change protocol (``Connection: upgrade``, or CONNECT);
        ``rest``: the bytes after it, in the same read.

        A WebSocket's (RFC 6455, 4.2.1: a GET without a body asking for ``websocket``) is queued
        as a request, its handler to accept or refuse it; the bytes after its head are kept for
        the WebSocket (``upgrade``), and nothing more is read meanwhile. Any other is answered as
        HTTP/1.1, then the connection closes: we speak no other protocol.
        """
        request = self.queue[-1] if self.queue else None
        if (
            request is not None
            and self.recv_state is HEAD
            and request not in self.head_errors
            and wants_websocket(request)
        ):
            request.keep_alive = False  # refused (an HTTP answer), the connection closes after it
            self.recv_state = RECV[self.recv_state, "upgrade"]
            self.want_read = False
            self._upgrade_bytes = bytearray(rest)
            return
        if request is not None:
            upgrade_refused(request, self.head_errors)
        self.stop_reading()

    def after_upgrade(self, data: bytes | memoryview) -> None:
        """Bytes read after a WebSocket's head, before reading paused: the WebSocket's, up to ``max_header_size``
        (a client that sends more before its answer is refused: the connection closes after it)."""
        kept = self._upgrade_bytes
        if kept is not None and len(kept) + len(data) <= self._max_upgrade_bytes:
            kept += data
        else:
            self.stop_reading()

    def upgrade(self) -> bytes | None:
        """The handler accepted the WebSocket (101 goes out now): the connection is the WebSocket's,
        with the bytes that followed the head. None: it cannot be (no WebSocket's head, or reading stopped)."""
        if self.recv_state is not UPGRADED:
            return None
        self.send_state = SEND[self.send_state, "upgrade"]
        rest = bytes(self._upgrade_bytes or b"") + self._reader.take_unparsed()
        self._upgrade_bytes = None
        self._reader.retire()
        return rest

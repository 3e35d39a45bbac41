"""The HTTP/1.1 connection: an asyncio.Protocol assembled from its parts.

One HttpProtocol per connection. Four places, one concern each:

    reading.py   llhttp's (httptools') callbacks: bytes -> Requests, queued in
                 arrival order (pipelining); framing, limits, strictness
    protocol.py  this module: the connection's life (made, data, lost), its
                 queue of requests, flow control both ways, deadlines, closing
    driving.py   each request's handler, in order, inside the connection's Task
    writing.py   responses as bytes: head, body by framing, error-and-close

All I/O goes through ``self.transport``; feeding bytes to ``data_received``
with a stand-in transport exercises the whole state machine. The app is seen
only through ``ServedApp`` (driving.py), the interface App provides.

Deadlines are timestamps, checked once a second by ServerState, never timers
per request. What a connection is doing decides which one applies:

    a head is arriving, nothing in flight  -> head_timeout from its first byte
                                              (or from accept): 408 or close
    a handler waits for body bytes         -> body_timeout without progress: 408
    (or the admission gate does)              (not while reading is paused: the wait is ours)
    kept alive, nothing in flight          -> keepalive_timeout: close
"""

from __future__ import annotations

import asyncio
import contextvars
import socket
from collections import deque
from collections.abc import Generator
from contextvars import copy_context
from typing import Any, cast

import httptools

from ..http.exceptions import (
    ClientDisconnected,
    HTTPError,
    HTTPRequestHeaderFieldsTooLarge,
    HTTPRequestTimeout,
    HTTPServiceUnavailable,
)
from ..http.limits import Limits
from ..http.request import Request
from .driving import HandlerDriver, ServedApp
from .reading import RequestReader
from .state import ServerState
from .stepping import INLINE, stepping
from .writing import CLOSE, KEEP_ALIVE, write_error

__all__ = ["HttpProtocol", "ServerState"]  # ServerState is re-exported for the server

_FEED_SLICE = 16 * 1024  # bytes parsed at a time, so a paused connection stops promptly


class HttpProtocol(HandlerDriver, RequestReader, asyncio.Protocol):
    """One client connection: reading (reading.py), the queue, driving handlers (driving.py), writing (writing.py)."""

    def __init__(self, app: ServedApp, state: ServerState, limits: Limits, loop: asyncio.AbstractEventLoop) -> None:
        self._app = app
        self._static_endpoints = app.static_endpoints
        self._codec = app.json
        self._dumps = app.json.dumps
        self._state = state
        self._access_log = state.access_log
        self.trusted_proxies = None  # the server's, if the peer is one of them: see connection_made
        self._limits = limits
        self._loop = loop
        self._parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.peername: Any = None
        # head being parsed
        self._url = b""
        self._raw_headers: list[tuple[bytes, bytes]] = []
        self._head_bytes = 0
        self._in_head = True
        self._content_length: int | None = None
        self._expect_continue = False
        self._connection_header = False
        self._has_host = False
        self._checked_host = b""  # valid (RFC 3986: a reg-name may be empty)
        self._transfer_encoding: bytes | None = None
        self._framing = False  # one of the four above was sent: on_headers_complete's general path
        # Limits read for every request, kept here (one attribute lookup, not two).
        self._max_request_line = limits.max_request_line
        self._max_headers = limits.max_headers
        self._max_header_size = limits.max_header_size
        self._max_pipeline = limits.max_pipeline
        # requests received, in order; the first is the one being answered
        self._queue: deque[Request] = deque()
        self._receiving: Request | None = None
        self._body_received = 0
        self._current: Request | None = None
        self._parsing_stopped = False
        self._pending_data: memoryview | None = None
        self._closed = False
        self._close_after_queue = False
        # flow control
        self._buffered_body = 0
        self._reading_paused = False
        self._writing_paused = False
        self._drain_waiter: asyncio.Future[None] | None = None
        # the connection's Task (the note above HandlerDriver._new_runner), what wakes it, the handler it is to carry on
        self._runner: asyncio.Task[None] | None = None
        self._wake: asyncio.Future[None] | None = None
        self._suspended: tuple[contextvars.Context, Generator[Any, Any, None], Any] | None = None
        self._serving = False  # _serve is running _process: its Task is the current one
        self._inline = stepping() == INLINE  # how handlers are stepped: see stepping.py
        self._refusal: HTTPError | None = None  # set past max_connections
        # deadlines: when the head began, the connection went idle, a body wait began
        self._head_since = state.now
        self._idle_since = state.now
        self._body_since = 0.0
        self._header_bytes = 0

    # -- asyncio.Protocol ------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)
        self.peername = transport.get_extra_info("peername")
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        self._state.connections.add(self)
        proxies = self._state.proxies
        if proxies is not None and proxies.trusts_peer(self.peername):
            self.trusted_proxies = proxies
        # The context the connection's callbacks start from, never a request's.
        self._context = copy_context()
        # Started now, it waits for work by the time a request arrives: a cancel
        # that reached it before its first step would end it without a word.
        if self._inline:
            self._new_runner()
        if len(self._state.connections) > self._limits.max_connections:
            # Answer the first request with 503, after reading it: closing with the
            # request unread would reset the connection before the client sees the answer.
            self._refusal = HTTPServiceUnavailable("too many connections", retry_after=1)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._closed = True
        self._state.connections.discard(self)
        gone = ClientDisconnected("the client closed the connection")
        for request in self._queue:
            request._protocol = None
            request._finish_body(gone)
        if self._current is None:
            self._queue.clear()
        waiter = self._drain_waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(gone)
            waiter.exception()  # retrieved: nobody may be left to await it
        wake = self._wake
        if wake is not None and not wake.done():
            wake.set_result(None)  # _serve ends
        if self._state.cancel_on_disconnect and self._current is not None:
            self._cancel_handler()

    def _cancel_handler(self) -> None:
        """The client is gone (closed, or half-closed its side): CancelledError in the handler at its await.

        Opt-in (``cancel_on_disconnect``); docs/deployment.rst says why it is off by default.
        """
        runner = self._runner
        if runner is not None and not runner.done():
            runner.cancel()  # _serve throws it into the handler; the requests queued behind are dropped

    def data_received(self, data: bytes) -> None:
        if self._parsing_stopped or self._closed:
            return
        size = len(data)
        if self._in_head:
            self._head_bytes += size
        elif self._receiving is not None:
            if self._body_since:  # a handler waits for these body bytes
                self._body_since = self._state.now
        else:
            # Between requests: these bytes begin the next head (its clock starts
            # here, not in an on_message_begin callback, which would cost a call
            # a request), or go on with one that began in the read that ended the
            # previous request (_url is set): that one is timed from the previous
            # answer, here as in check_deadline, or its clock would start again.
            self._in_head = True
            self._head_bytes = size
            if self._url and self._current is None and not self._queue:
                self._head_since = self._idle_since
            else:
                self._head_since = self._state.now
        if size > _FEED_SLICE:
            self._feed_slices(memoryview(data))
        else:
            try:
                self._parser.feed_data(data)
            except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
                self._parse_error(exc)
        if self._in_head and self._head_bytes > self._max_header_size and not self._parsing_stopped:
            self._abort_parsing(HTTPRequestHeaderFieldsTooLarge("request head too large"))
        self._process()

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        waiter = self._drain_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        elif self._current is None and self._queue:
            self._process()  # pipelined requests waited for the client to read

    def eof_received(self) -> bool | None:
        # The client half-closed: answer what was received, then close.
        self._close_after_queue = True
        receiving = self._receiving
        if receiving is not None:
            receiving._finish_body(ClientDisconnected("the client closed its side before the body ended"))
        if self._current is None and not self._queue:
            return False
        if self._state.cancel_on_disconnect and self._current is not None:
            return False  # gone, as far as this option can tell: close; connection_lost cancels the handler
        return True

    # -- parsing ----------------------------------------------------------------------

    def _feed_slices(self, data: memoryview) -> None:
        for start in range(0, len(data), _FEED_SLICE):
            if self._parsing_stopped:
                return
            if self._reading_paused:
                self._pending_data = data[start:]
                return
            self._feed(data[start : start + _FEED_SLICE])

    def _feed(self, data: bytes | memoryview) -> None:
        try:
            self._parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            self._parse_error(exc)

    # -- the queue: finishing a request, keep-alive ----------------------------------------

    async def drain(self) -> None:
        """Wait until the transport's write buffer is below its high-water mark."""
        if self._closed:
            raise ClientDisconnected("the client closed the connection")
        if not self._writing_paused:
            return
        waiter = self._loop.create_future()
        self._drain_waiter = waiter
        try:
            await waiter
        finally:
            self._drain_waiter = None

    def _finish(self, request: Request) -> None:
        self._current = None
        if self._closed:
            self._queue.clear()
            return
        self._queue.popleft()
        if request._chunks is not None or not request._body_done:
            self._drop_body(request)
        if not request.keep_alive:
            self._close()
            return
        self._idle_since = self._state.now
        self._body_since = 0.0
        if self._reading_paused:
            self._update_reading()

    def _connection_line(self, request: Request) -> str:
        """The Connection line of the answer to ``request``: whether the connection stays open is decided here."""
        if not request.keep_alive or (self._close_after_queue and len(self._queue) <= 1):
            request.keep_alive = False
            return CLOSE
        if request.http_version == "1.0":
            return KEEP_ALIVE
        return ""

    def _drop_body(self, request: Request) -> None:
        """The request is answered: free its buffered body, discard what is still to come."""
        if request._chunks is not None:
            self._buffered_body -= request._buffered
            request._chunks = None
        if not request._body_done:
            request._discard = True

    # -- flow control and deadlines ---------------------------------------------------------

    def body_consumed(self, size: int) -> None:
        """A handler took ``size`` body bytes out of the buffer."""
        self._buffered_body -= size
        self._update_reading()

    def body_wait(self) -> None:
        """A handler waits for body bytes: the body deadline runs."""
        self._body_since = self._state.now

    def body_paused(self) -> bool:
        """Whether reading is paused: no more body comes until a handler takes some (or the queue shrinks)."""
        return self._reading_paused

    def send_continue(self) -> None:
        """Tell a client that sent ``Expect: 100-continue`` to send its body."""
        if self.transport is not None and not self._closed:
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def _pause_reading(self) -> None:
        if not self._reading_paused and self.transport is not None and not self._closed:
            self._reading_paused = True
            self.transport.pause_reading()

    def _update_reading(self) -> None:
        if (
            self._reading_paused
            and not self._parsing_stopped
            and len(self._queue) < self._limits.max_pipeline
            and self._buffered_body <= self._limits.body_buffer
        ):
            self._reading_paused = False
            if self._body_since:  # the body's clock stood still while the server did not read
                self._body_since = self._state.now
            if self._pending_data is not None:
                # Parse what is left of the last read before reading more; not
                # from here, which may be inside a handler reading its body.
                self._loop.call_soon(self._feed_pending, context=self._context)
            else:
                assert self.transport is not None
                self.transport.resume_reading()

    def _feed_pending(self) -> None:
        data, self._pending_data = self._pending_data, None
        if data is None or self._closed or self._parsing_stopped:
            return
        self._feed_slices(data)
        if self._pending_data is None and not self._reading_paused and self.transport is not None:
            self.transport.resume_reading()
        self._process()

    def check_deadline(self, now: float) -> None:
        """Called once a second: close or time out a connection past its deadline."""
        if self._closed or (self.transport is not None and self.transport.is_closing()):
            return
        limits = self._limits
        if self._current is None and not self._queue:
            if self._in_head or self._url:
                # _url alone: a head that began in the bytes that ended the previous
                # request (data_received did not see it begin); timed from that answer.
                since = self._head_since if self._in_head else self._idle_since
                if now - since > limits.head_timeout:
                    if self._head_bytes or self._url:
                        self._write_error_and_close(HTTPRequestTimeout("request head not received in time"))
                    else:
                        self._close()
            elif now - self._idle_since > limits.keepalive_timeout:
                self._close()
        elif self._body_since and not self._reading_paused and now - self._body_since > limits.body_timeout:
            self._body_since = 0.0
            receiving = self._receiving
            if receiving is not None:
                receiving._finish_body(HTTPRequestTimeout("request body not received in time"))
                receiving.keep_alive = False
            self._stop_parsing()

    def _write_error_and_close(self, error: HTTPError) -> None:
        assert self.transport is not None
        # _url: the method of the head under way was parsed (it comes before the target)
        head_request = self._is_head(method_known=bool(self._url))
        write_error(
            self.transport, error, self._codec, head_request=head_request, header_lines=self._state.header_lines
        )
        self._close()

    def _close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    def shutdown(self, close_idle: bool = True) -> None:
        """Server shutdown: close after the response in flight; an idle connection now,
        or, with ``close_idle`` false, after it answers its next request (``Connection: close``).

        A connection whose next request head has begun to arrive is not idle: its
        client sent it before the shutdown, so it is answered (or times out).
        """
        self._close_after_queue = True
        if close_idle and self._current is None and not self._queue and not self._head_begun:
            self._close()

    @property
    def _head_begun(self) -> bool:
        # _url alone: begun in the read that ended the previous request (see check_deadline)
        return bool((self._in_head and self._head_bytes) or self._url)

    @property
    def idle(self) -> bool:
        return self._current is None and not self._queue

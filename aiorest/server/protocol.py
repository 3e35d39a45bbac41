"""The HTTP/1.1 connection's asyncio side: transport, flow control, timers.

One HttpProtocol per connection, holding three things, one concern each:

    _h1/         H1Connection: the protocol state without I/O -- its
                 HeadReader turns bytes into Requests queued in arrival
                 order (pipelining), with the heads' limits and deadlines;
                 BodyIntake takes bodies; the state machine decides
                 keep-alive, flow control and the close; states are data
    protocol.py  this module: the transport, applying the connection's
                 decisions (pause/resume reading, close, a 408), drain, the
                 once-a-second deadline tick, the body source of its requests
    driving.py   each request's handler, in order, inside the connection's Task
    writing.py   responses as bytes: head, body by framing, error-and-close

The protocol and the connection talk through method calls and the
connection's public attributes (``queue``, ``want_read``, ``send_state``).
The app is seen only through ``ServedApp`` (interfaces.py), the interface App provides.

Deadlines are timestamps, checked once a second by ServerState (shared.py), never timers
per request; H1Connection.check_deadline says which one applies.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Sequence
from contextvars import copy_context
from typing import TYPE_CHECKING, Any, cast

from ..http.exceptions import ClientDisconnected, HTTPBadRequest, HTTPServiceUnavailable
from ..http.limits import Limits
from ..http.request import Request
from ..http.websocket import WebSocketChannel, WebSocketLimits
from ._h1 import H1Connection, Timeout
from ._h1.connection import CLOSE
from .driving import HandlerDriver
from .interfaces import ServedApp
from .shared import ServerState
from .writing import write_error

if TYPE_CHECKING:
    from ..http.forwarded import TrustedProxies

__all__ = ["HttpProtocol", "ServerState"]  # ServerState is re-exported for the server


class HttpProtocol(asyncio.Protocol):
    """One client connection: its H1Connection (the protocol state), its HandlerDriver (driving.py), the transport."""

    __slots__ = (
        "_state",
        "_codec",
        "trusted_proxies",
        "_limits",
        "_loop",
        "_conn",
        "_driver",
        "transport",
        "peername",
        "data_received",
        "closed",
        "reading_paused",
        "writing_paused",
        "_drain_waiter",
        "_context",
    )

    def __init__(self, app: ServedApp, state: ServerState, limits: Limits, loop: asyncio.AbstractEventLoop) -> None:
        self._state = state
        self._codec = app.json
        self.trusted_proxies: TrustedProxies | None = None  # the server's, if the peer is one of them
        self._limits = limits
        self._loop = loop
        self._conn = conn = H1Connection(app, limits, state, self, state.body_memory(limits.max_body_memory))
        self._driver = HandlerDriver(app, state, conn, self, loop)
        # The connection calls the driver once a read is parsed.
        conn.on_ready(self._driver.process)
        # asyncio hands each read to the connection itself, which calls the driver once it is parsed:
        # one Python call a read fewer than a method here that passes it on.
        self.data_received = conn.receive_data  # type: ignore[method-assign,assignment]  # on purpose, see above
        self.transport: asyncio.Transport | None = None
        self.peername: Any = None
        self.closed = False
        # flow control
        self.reading_paused = False
        self.writing_paused = False
        self._drain_waiter: asyncio.Future[None] | None = None

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
        self._driver.connection_made(self.transport, self.trusted_proxies)
        if len(self._state.connections) > self._limits.max_connections:
            # Answer the first request with 503, after reading it: closing with the
            # request unread would reset the connection before the client sees the answer.
            self._conn.refuse(HTTPServiceUnavailable("too many connections", retry_after=1))

    def connection_lost(self, exc: BaseException | None) -> None:
        self.closed = True
        self._state.connections.discard(self)
        driver = self._driver
        self._conn.connection_lost(answering=driver.current is not None)
        gone = ClientDisconnected("the client closed the connection")
        waiter = self._drain_waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(gone)
            waiter.exception()  # retrieved: nobody may be left to await it
        # cancel_on_disconnect: CancelledError in the handler at its await (opt-in;
        # docs/deployment.rst says why it is off by default).
        driver.connection_lost(cancel=self._state.cancel_on_disconnect)

    def pause_writing(self) -> None:
        self.writing_paused = True

    def resume_writing(self) -> None:
        self.writing_paused = False
        waiter = self._drain_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        elif self._driver.current is None and self._conn.queue:
            self._driver.process()  # pipelined requests waited for the client to read

    def eof_received(self) -> bool | None:
        # The client half-closed: answer what was received, then close.
        self._conn.receive_eof()
        if self.idle:
            return False
        if self._driver.current is not None:
            self._driver.current.client_gone()  # what it streams may end (Request.disconnected)
        if self._state.cancel_on_disconnect and self._driver.current is not None:
            return False  # gone, as far as this option can tell: close; connection_lost cancels the handler
        return True

    # -- reading: slices, flow control -----------------------------------------------

    def pause_reading(self) -> None:
        if not self.reading_paused and self.transport is not None and not self.closed:
            self.reading_paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        """The connection wants to read again (``want_read``): after the rest of the last read, if any."""
        self.reading_paused = False
        if self._conn.has_unparsed():
            # Parse what is left of the last read before reading more; not
            # from here, which may be inside a handler reading its body.
            self._loop.call_soon(self._feed_pending, context=self._context)
        else:
            assert self.transport is not None
            self.transport.resume_reading()

    def _feed_pending(self) -> None:
        if self.closed:
            return
        conn = self._conn
        conn.receive_unparsed()
        if conn.want_read and not conn.has_unparsed() and self.transport is not None:
            self.transport.resume_reading()
        self._driver.process()

    async def drain(self) -> None:
        """Wait until the transport's write buffer is below its high-water mark."""
        if self.closed:
            raise ClientDisconnected("the client closed the connection")
        if not self.writing_paused:
            return
        waiter = self._loop.create_future()
        self._drain_waiter = waiter
        try:
            await waiter
        finally:
            self._drain_waiter = None

    # -- a change of protocol ---------------------------------------------------------------

    def upgrade_websocket(
        self, request: Request, limits: WebSocketLimits, subprotocol: str | None, headers: Sequence[tuple[str, str]]
    ) -> WebSocketChannel:
        """The handler of ``request`` accepts its WebSocket: answer 101 and hand the transport over
        (the bytes after the head included); an HTTPError to answer instead if it cannot be."""
        from ._ws import WebSocketConnection, handshake  # the websockets library: only where one is accepted

        state = self._state
        if self.closed or self.transport is None:
            raise ClientDisconnected("the client closed the connection")
        if state.draining or len(state.websockets) >= self._limits.max_websockets:
            raise HTTPServiceUnavailable("too many WebSockets" if not state.draining else "stopping", retry_after=1)
        protocol = handshake(request, limits, subprotocol, headers)
        received = self._conn.upgrade()
        if received is None:
            raise HTTPBadRequest("the request cannot be upgraded to a WebSocket")
        transport = self.transport
        # The HTTP side of the connection ends here: its driver writes nothing more, its tick stops.
        self.closed = True
        self.transport = None
        state.connections.discard(self)
        websocket = WebSocketConnection(protocol, limits, state, self._loop)
        websocket.start(transport, received)
        self._driver.log_switch(request)
        return websocket

    # -- the body source of its requests, flow control and deadlines ---------------------------

    def body_consumed(self, size: int) -> None:
        """A handler took ``size`` body bytes out of the buffer."""
        self._conn.body_consumed(size)
        if self.reading_paused and self._conn.want_read:
            self.resume_reading()

    def buffer_whole_body(self) -> bool:
        """Read the body arriving whole, ``body_buffer`` notwithstanding (the admission gate waits for it);
        False for a body its route lets grow past what the server buffers whole (an upload)."""
        whole = self._conn.buffer_whole_body()
        if self.reading_paused and self._conn.want_read:
            self.resume_reading()
        return whole

    def send_continue(self) -> None:
        """Tell a client that sent ``Expect: 100-continue`` to send its body."""
        if self.transport is not None and not self.closed:
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def check_deadline(self, now: float) -> None:
        """Called once a second: close or time out a connection past its deadline."""
        if self.closed or (self.transport is not None and self.transport.is_closing()):
            return
        action = self._conn.check_deadline(now)
        if action is None:
            if not self._conn.want_read:  # a body timed out: read nothing more
                self.pause_reading()
        elif action is CLOSE:
            self.close()
        else:
            assert self.transport is not None and isinstance(action, Timeout)
            write_error(
                self.transport,
                action.error,
                self._codec,
                head_request=action.head_request,
                header_lines=self._state.header_lines,
            )
            self.close()

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    def shutdown(self, close_idle: bool = True) -> None:
        """Server shutdown: close after the response in flight; an idle connection now,
        or, with ``close_idle`` false, after it answers its next request (``Connection: close``).
        """
        self._driver.grace = not close_idle
        if self._conn.shutdown(close_idle) and self._driver.current is None:
            self.close()

    @property
    def idle(self) -> bool:
        return self._driver.current is None and not self._conn.queue

"""What the connections of one server share (ServerState): the clock and its once-a-second tick over
the connections' deadlines, the Server/Date lines, the set of connections, the body memory."""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Callable, Mapping
from email.utils import formatdate
from typing import TYPE_CHECKING, Any

from .._support.memory import give_back, keep_buffers
from ..http.datastructures import check_header_value
from ._h1.body import BodyMemory
from .interfaces import ServedConnection

if TYPE_CHECKING:
    from ..http.forwarded import TrustedProxies
    from ..ops.accesslog import AccessLog

__all__ = ["ServerState"]

# Body bytes freed since the most held, past which the tick gives the heap's free pages back (a few ms).
_GIVE_BACK_AFTER = 8 * 1024 * 1024


class ServerState:
    """What the connections of one server share: the clock, the Server/Date lines, the set.

    ``draining`` is True once the server has begun to stop (``/readyz`` then answers
    503); ``cancel_on_disconnect``: a connection lost with a handler running cancels it.
    """

    def __init__(self, server_header: str | None = "aiorest", *, cancel_on_disconnect: bool = False) -> None:
        if server_header is not None:
            check_header_value(server_header, "server_header")
        self.connections: set[ServedConnection] = set()
        self.websockets: set[ServedConnection] = set()  # the accepted WebSockets (in ``connections`` too)
        self.draining = False
        self.cancel_on_disconnect = cancel_on_disconnect
        self._server_line = f"Server: {server_header}\r\n" if server_header else ""
        self.header_lines = ""
        self.header_bytes = b""
        self.json_prefix = b""
        self.now = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.proxies: TrustedProxies | None = None  # forwarded_allow_ips, when not empty
        self.access_log: AccessLog | None = None
        # The server's first lookup: path -> method -> endpoint of the app's routes without
        # parameters (ServedApp.static_endpoints), set once the app started; empty, every
        # request goes through the app's router.
        self.static_endpoints: Mapping[str, Mapping[str, Callable[..., Any]]] = {}
        self._body_memory: BodyMemory | None = None
        # each event stream's future, done when the server stops; weakly held: a stream's goes with it
        self._stream_ends: weakref.WeakSet[asyncio.Future[None]] = weakref.WeakSet()
        self._streams_ended = False

    def stopping(self) -> asyncio.Future[None]:
        """A future done once the server begins to stop: what a stream without end (an event stream) ends on.

        One for each stream, not one for all: 10,000 streams' callbacks on one shared future took
        O(N²) to remove when their clients all went at once (1.3 s with the loop stuck, measured), where
        each stream's own future just goes with it."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self._streams_ended:
            future.set_result(None)
        else:
            self._stream_ends.add(future)
        return future

    def end_streams(self) -> None:
        """The server stops: each :meth:`stopping` future is done (and any asked for from now on)."""
        self._streams_ended = True
        for future in list(self._stream_ends):
            if not future.done():
                future.set_result(None)

    def body_memory(self, limit: int) -> BodyMemory:
        """The body bytes all the connections buffer, against ``limit`` (``Limits.max_body_memory``): one
        count for the server, made by its first connection."""
        if self._body_memory is None:
            self._body_memory = BodyMemory(limit)
        return self._body_memory

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        keep_buffers()
        self._stopping = None
        self._tick()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def refresh(self) -> None:
        """Format this second's Server/Date lines and the head of a JSON 200 with them."""
        self.header_lines = f"{self._server_line}Date: {formatdate(usegmt=True)}\r\n"
        self.header_bytes = self.header_lines.encode("latin-1")
        self.json_prefix = f"HTTP/1.1 200 OK\r\n{self.header_lines}Content-Type: application/json\r\n".encode("latin-1")

    def _tick(self) -> None:
        # One formatted Date per second for every response, and one sweep of
        # deadlines, instead of a timer per connection or per request.
        assert self._loop is not None
        self.now = self._loop.time()
        self.refresh()
        for connection in list(self.connections):
            connection.check_deadline(self.now)
        memory = self._body_memory
        if memory is not None and memory.peak - memory.used > _GIVE_BACK_AFTER:
            memory.peak = memory.used
            give_back()
        # Tick just after the wall clock's next second, so the Date is never stale.
        self._timer = self._loop.call_at(self.now + 1.001 - time.time() % 1.0, self._tick)

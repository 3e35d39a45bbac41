"""An accepted WebSocket's asyncio side: the transport, the messages' queues, the deadlines.

The frames are the ``websockets`` library's sans-IO Protocol's to read and write (RFC 6455,
RFC 7692): it checks their framing (1002), their size and a message's, fragments together
and after inflating (1009), and answers pings and the closing handshake. Here its frames
become messages (a text message's UTF-8 checked as it arrives: 1007), messages wait in a
queue of ``max_queue`` for the handler (at it, reading stops: the client's TCP window fills),
a send waits while the client does not read (past ``send_timeout``: 1008), and the server's
once-a-second tick (ServerState) sends pings and applies the ping, idle and close deadlines.

WebSocketConnection is both the transport's protocol (after ``start``) and the channel the
handler's WebSocket (aiorest.http.websocket) talks to.
"""

from __future__ import annotations

import asyncio
import codecs
import os
from typing import TYPE_CHECKING, cast

from websockets.frames import Frame, Opcode
from websockets.protocol import OPEN
from websockets.server import ServerProtocol

from ...http.websocket import WebSocketDisconnect, WebSocketLimits

if TYPE_CHECKING:
    from ..shared import ServerState

__all__ = ["WebSocketConnection"]

_TEXT, _BINARY, _CONT, _PONG = Opcode.TEXT, Opcode.BINARY, Opcode.CONT, Opcode.PONG
_utf8 = codecs.getincrementaldecoder("utf-8")


_last_frame: tuple[str | bytes, bytes] = ("", Frame(_TEXT, b"").serialize(mask=False))


_KEPT_FRAME = 64 * 1024  # bytes of the largest frame kept for the next send of the same message


def _frame_of(message: str | bytes) -> bytes:
    """``message`` as one unmasked frame, serialized by the ``websockets`` library, without extensions.

    The last message's frame is kept, up to 64 KiB, and given again for the same object: a broadcast's
    loop of ``send`` serializes its message once. A larger message is serialized each time rather than
    kept alive, twice over, after the broadcast."""
    global _last_frame
    last = _last_frame
    if last[0] is message:
        return last[1]
    if isinstance(message, str):
        frame = Frame(_TEXT, message.encode()).serialize(mask=False)
    else:
        frame = Frame(_BINARY, bytes(message)).serialize(mask=False)
    if len(frame) <= _KEPT_FRAME:
        _last_frame = (message, frame)
    return frame


class WebSocketConnection(asyncio.Protocol):
    """One accepted WebSocket: frames by ``protocol`` (OPEN, its 101 queued), messages to and from its handler."""

    def __init__(
        self, protocol: ServerProtocol, limits: WebSocketLimits, state: ServerState, loop: asyncio.AbstractEventLoop
    ) -> None:
        self._ws = protocol
        self._limits = limits
        self._state = state
        self._loop = loop
        self.transport: asyncio.Transport | None = None
        self.closed = False  # the transport is gone
        # a list, not a deque: at most max_queue long, and 56 bytes empty where a deque takes 600
        self._messages: list[str | bytes] = []
        self._receiver: asyncio.Future[None] | None = None  # the handler waits for a message
        self._drain: asyncio.Future[None] | None = None  # the handler waits for the client to read
        self._writing_paused = False
        self._reading_paused = False
        # the message arriving: its fragments, and whether it is text (then decoded as it comes)
        self._fragments: list[str | bytes] = []
        self._decoder: codecs.IncrementalDecoder | None = None
        now = state.now
        self._last_message = now  # received or sent: the idle deadline runs from it
        self._next_ping = now + (limits.ping_interval or 0.0)
        self._ping: tuple[bytes, float] | None = None  # the ping awaiting its pong, and when it went
        self._send_since: float | None = None  # when a send began to wait for the client to read
        self._closing_since: float | None = None

    def start(self, transport: asyncio.Transport, received: bytes) -> None:
        """Take over ``transport`` (reading paused by the HTTP side), send the 101, then the bytes ``received``."""
        self.transport = transport
        transport.set_protocol(self)
        transport.set_write_buffer_limits(high=self._limits.write_limit)
        self._state.connections.add(self)
        self._state.websockets.add(self)
        self._flush()
        if received:
            self.data_received(received)
        if not self._reading_paused and not self.closed:
            transport.resume_reading()

    @property
    def close_code(self) -> int | None:
        return None if self._ws.state is OPEN and not self.closed else self._close()[0]

    def _close(self) -> tuple[int, str]:
        """The close's code and reason: the client's, ours, else 1006 (no close frame)."""
        close = self._ws.close_rcvd or self._ws.close_sent
        return (close.code, close.reason) if close is not None else (1006, "")

    # -- bytes in ------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        self._ws.receive_data(data)
        self._take_events()

    def eof_received(self) -> bool | None:
        self._ws.receive_eof()
        self._take_events()
        return None  # close the transport

    def _take_events(self) -> None:
        ws = self._ws
        for frame in cast("list[Frame]", ws.events_received()):  # past the handshake: frames only
            opcode = frame.opcode
            if opcode is _TEXT or opcode is _BINARY or opcode is _CONT:
                if not self._fragment(frame):
                    break
            elif opcode is _PONG and self._ping is not None and frame.data == self._ping[0]:
                self._ping = None
        self._flush()
        if ws.state is not OPEN:
            self._wake()

    def _fragment(self, frame: Frame) -> bool:
        """Add a frame to the message arriving; False: the message is not valid UTF-8 (close 1007)."""
        if frame.opcode is not _CONT:
            self._decoder = _utf8() if frame.opcode is _TEXT else None
        decoder = self._decoder
        if decoder is not None:
            try:
                self._fragments.append(decoder.decode(frame.data, frame.fin))
            except UnicodeDecodeError as exc:
                self._fail(1007, f"invalid UTF-8 at byte {exc.start} of a frame")
                return False
        else:
            self._fragments.append(bytes(frame.data))
        if frame.fin:
            parts, self._fragments = self._fragments, []
            message: str | bytes = "".join(parts) if decoder is not None else b"".join(parts)  # type: ignore[arg-type]
            self._messages.append(message)
            self._last_message = self._state.now
            self._wake()
            if len(self._messages) >= self._limits.max_queue and not self._reading_paused and self.transport:
                self._reading_paused = True  # the handler is behind: let the client's TCP window fill
                self.transport.pause_reading()
        return True

    def _wake(self) -> None:
        waiter = self._receiver
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- the handler's side (WebSocketChannel) ---------------------------------------------

    async def receive(self) -> str | bytes:
        messages = self._messages
        while not messages:
            if self.closed or self._ws.state is not OPEN:
                raise WebSocketDisconnect(*self._close())
            waiter = self._receiver = self._loop.create_future()
            try:
                await waiter
            finally:
                self._receiver = None
        message = messages.pop(0)
        if self._reading_paused and len(messages) < self._limits.max_queue and not self.closed:
            self._reading_paused = False
            assert self.transport is not None
            self.transport.resume_reading()
        return message

    async def send(self, message: str | bytes) -> None:
        ws = self._ws
        if self.closed or ws.state is not OPEN:
            raise WebSocketDisconnect(*self._close())
        if not ws.extensions and self.transport is not None:
            # No extension changes the frame: the library's frame of this message, made once for every
            # connection a broadcast sends it to (what ws.send_text would queue, our sends never fragment).
            self.transport.write(_frame_of(message))
        else:
            if isinstance(message, str):
                ws.send_text(message.encode())
            else:
                ws.send_binary(message)
            self._flush()
        self._last_message = self._state.now
        if self._writing_paused:
            self._send_since = self._state.now
            waiter = self._drain = self._loop.create_future()
            try:
                await waiter
            finally:
                self._drain = None
                self._send_since = None

    async def close(self, code: int = 1000, reason: str = "") -> None:
        self.begin_close(code, reason)

    def begin_close(self, code: int, reason: str) -> None:
        """Send the close frame (if the closing handshake has not begun); the client's answer ends it."""
        if self._ws.state is OPEN and not self.closed:
            self._ws.send_close(code, reason)
            self._closing_since = self._state.now
            self._flush()
            self._wake()

    # -- bytes out, flow control ---------------------------------------------------------------

    def _flush(self) -> None:
        transport = self.transport
        if transport is None or self.closed:
            return
        for data in self._ws.data_to_send():
            if data:
                transport.write(data)
            elif transport.can_write_eof():
                # The library's end of stream (the close frames exchanged, or the connection failed):
                # half-close, as its sans-IO guide says, and read on until the client closes its side
                # (eof_received; check_deadline aborts past close_timeout). Closing at once would make
                # the kernel answer what the client is still sending with a reset, which can reach it
                # before it reads our close frame: a client over max_message would see a reset, not 1009.
                transport.write_eof()
            else:
                transport.close()

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        waiter = self._drain
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _fail(self, code: int, reason: str) -> None:
        """Close with ``code`` at once, without waiting for the handler: the client broke a limit."""
        self._ws.fail(code, reason)
        self._closing_since = self._state.now
        self._flush()
        self._wake()
        waiter = self._drain
        if waiter is not None and not waiter.done():
            waiter.set_exception(WebSocketDisconnect(code, reason))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._state.connections.discard(self)
        self._state.websockets.discard(self)
        self._ws.receive_eof()
        self._ws.data_to_send()  # nothing can go out now
        self._wake()
        waiter = self._drain
        if waiter is not None and not waiter.done():
            waiter.set_exception(WebSocketDisconnect(*self._close()))
            waiter.exception()  # retrieved: the handler may be gone

    # -- deadlines, shutdown (the server's once-a-second tick: ServedConnection) ------------------

    def check_deadline(self, now: float) -> None:
        if self.closed or self.transport is None:
            return
        limits = self._limits
        if self._ws.state is not OPEN:
            if self._closing_since is None:
                self._closing_since = now
            elif now - self._closing_since > limits.close_timeout:
                self.transport.abort()  # the client neither closed nor read our close frame
            return
        if self._send_since is not None and now - self._send_since > limits.send_timeout:
            self._fail(1008, "the client does not read its messages")
        elif self._ping is not None:
            if now - self._ping[1] > limits.ping_timeout:
                self._fail(1011, "keepalive ping timeout")
        elif limits.ping_interval is not None and now >= self._next_ping:
            payload = os.urandom(4)
            self._ping = (payload, now)
            self._next_ping = now + limits.ping_interval
            self._ws.send_ping(payload)
            self._flush()
        if limits.idle_timeout is not None and now - self._last_message > limits.idle_timeout:
            self.begin_close(1001, "idle timeout")

    def shutdown(self, close_idle: bool = True) -> None:
        """The server stops: close with 1001 (Going Away); the handler's next receive ends."""
        self.begin_close(1001, "the server is stopping")

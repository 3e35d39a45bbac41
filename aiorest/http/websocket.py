"""The WebSocket a handler sees (beside Request): accept, receive and send messages, close.

A ``@app.websocket`` route's handler gets a :class:`WebSocket` made of its request. Until
``accept`` the connection is an HTTP request like another (middleware, sessions and bearer
tokens ran before the handler; an HTTPError raised now is answered as HTTP). ``accept``
asks the connection to upgrade (``WebSocketUpgrade``, which the server's HttpProtocol
provides); from then on messages go through a ``WebSocketChannel``: the server's side,
where a sans-IO library reads and writes the frames under ``WebSocketLimits``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, overload

from .exceptions import ClientDisconnected, HTTPInternalServerError

if TYPE_CHECKING:
    from .request import Request

__all__ = [
    "WebSocket",
    "WebSocketChannel",
    "WebSocketDisconnect",
    "WebSocketLimits",
    "WebSocketUpgrade",
]

_T = TypeVar("_T")
_M = TypeVar("_M")


@dataclass(frozen=True, slots=True)
class WebSocketLimits:
    """What one WebSocket connection may receive, hold and take; each with its end.

    ======================  ==========================================================
    ``max_message``         bytes of a message, fragments together and after
                            decompression (the ``websockets`` library's default,
                            1 MiB); past it: close 1009
    ``max_frame``           bytes of one frame (None: ``max_message`` alone); past
                            it: close 1009
    ``max_queue``           messages received and not yet taken by the handler;
                            at it the server stops reading from the client
    ``write_limit``         bytes waiting to go out before ``send`` waits for the
                            client to read
    ``send_timeout``        seconds a ``send`` may wait for the client to read;
                            then close 1008 (a client that stopped reading)
    ``ping_interval``       seconds between keepalive pings (None: no pings)
    ``ping_timeout``        seconds a ping's pong may take; then close 1011
    ``idle_timeout``        seconds without a message either way (None: no limit);
                            then close 1001
    ``close_timeout``       seconds the closing handshake may take; then the TCP
                            connection is dropped
    ``compression``         offer permessage-deflate (RFC 7692); a message inflates
                            to ``max_message`` at most: past it, close 1009
    ======================  ==========================================================
    """

    max_message: int = 1024 * 1024
    max_frame: int | None = None
    max_queue: int = 16
    write_limit: int = 64 * 1024
    send_timeout: float = 30.0
    ping_interval: float | None = 20.0
    ping_timeout: float = 20.0
    idle_timeout: float | None = None
    close_timeout: float = 10.0
    compression: bool = True

    def __post_init__(self) -> None:
        for name in ("max_message", "max_queue", "write_limit"):
            if getattr(self, name) < 1:
                raise ValueError(f"WebSocketLimits.{name} must be at least 1, not {getattr(self, name)!r}")
        for name in ("send_timeout", "ping_timeout", "close_timeout", "ping_interval", "idle_timeout"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"WebSocketLimits.{name} must be positive, not {value!r}")


class WebSocketDisconnect(Exception):
    """The WebSocket is closed: ``code`` and ``reason`` of its close (1006: no close frame came)."""

    def __init__(self, code: int = 1000, reason: str = "") -> None:
        super().__init__(code, reason)
        self.code = code
        self.reason = reason


class WebSocketChannel(Protocol):
    """The server's side of an accepted WebSocket: messages in and out, the close."""

    @property
    def close_code(self) -> int | None:
        """The code the connection closed with; None while it is open."""

    async def receive(self) -> str | bytes:
        """The next message; WebSocketDisconnect once the connection is closed."""
        ...

    async def send(self, message: str | bytes) -> None:
        """Send ``message``; waits while the client does not read. WebSocketDisconnect if closed."""

    async def close(self, code: int, reason: str) -> None:
        """Begin the closing handshake (nothing happens if it has begun)."""


class WebSocketUpgrade(Protocol):
    """What a request's connection offers to change protocol (the server's HttpProtocol)."""

    def upgrade_websocket(
        self,
        request: Request,
        limits: WebSocketLimits,
        subprotocol: str | None,
        headers: Sequence[tuple[str, str]],
    ) -> WebSocketChannel:
        """Answer 101 and hand the connection over; HTTPError if the handshake is refused."""
        ...


class WebSocket(Generic[_M]):
    """A WebSocket connection, as its handler sees it (the request it began as: ``request``).

    Messages are ``str`` (text) or ``bytes`` (binary); JSON goes through the app's codec,
    and a message type given to ``receive_json`` is decoded by msgspec. A handler that declares
    its parameter ``WebSocket[Model]`` has its messages' type there (``message_type``):
    ``receive_json()`` and ``iter_json()`` decode each message into a ``Model``.
    """

    def __init__(
        self, request: Request, limits: WebSocketLimits | None = None, message_type: type[_M] | None = None
    ) -> None:
        self.request = request
        self.limits = limits or WebSocketLimits()
        self.message_type = message_type  #: what ``receive_json()`` decodes into; None: any JSON
        self.subprotocol: str | None = None  #: the subprotocol chosen at ``accept``
        self._channel: WebSocketChannel | None = None

    @property
    def subprotocols(self) -> list[str]:
        """The subprotocols the client offered (``Sec-WebSocket-Protocol``), in its order."""
        offered = self.request.header_values("sec-websocket-protocol")
        return [name.strip() for value in offered for name in value.split(",") if name.strip()]

    @property
    def accepted(self) -> bool:
        return self._channel is not None

    @property
    def close_code(self) -> int | None:
        """The code the connection closed with; None before accept and while open."""
        return None if self._channel is None else self._channel.close_code

    async def accept(self, subprotocol: str | None = None, headers: Mapping[str, str] | None = None) -> None:
        """Answer 101 Switching Protocols, with ``subprotocol`` (one the client offered) and extra ``headers``.

        A handshake the client got wrong (its key, its version) is answered 400 or 426
        instead, a server at its ``Limits.max_websockets`` answers 503: each raises the HTTPError.
        """
        if self._channel is not None:
            raise RuntimeError("the WebSocket is already accepted")
        if subprotocol is not None and subprotocol not in self.subprotocols:
            raise ValueError(f"subprotocol {subprotocol!r} was not offered by the client: {self.subprotocols!r}")
        connection = self.request.protocol
        if connection is None:
            raise ClientDisconnected("the client closed the connection")
        upgrade = getattr(connection, "upgrade_websocket", None)
        if upgrade is None:
            raise HTTPInternalServerError("this connection cannot change protocol")
        self._channel = upgrade(self.request, self.limits, subprotocol, list((headers or {}).items()))
        self.subprotocol = subprotocol

    def _open(self) -> WebSocketChannel:
        if self._channel is None:
            raise RuntimeError("accept the WebSocket before sending or receiving")
        return self._channel

    async def receive(self) -> str | bytes:
        """The next message, text or binary; WebSocketDisconnect once closed."""
        return await self._open().receive()

    async def receive_text(self) -> str:
        message = await self.receive()
        if not isinstance(message, str):
            raise TypeError("expected a text message, received a binary one")
        return message

    async def receive_bytes(self) -> bytes:
        message = await self.receive()
        if not isinstance(message, bytes):
            raise TypeError("expected a binary message, received a text one")
        return message

    @overload
    async def receive_json(self) -> _M: ...
    @overload
    async def receive_json(self, type: type[_T]) -> _T: ...
    async def receive_json(self, type: Any = None) -> Any:
        """The next message as JSON (text or binary), by the app's codec; with ``type`` (or the handler's
        ``WebSocket[Model]``), decoded and validated by msgspec (a message that does not fit: close 1007,
        then WebSocketDisconnect)."""
        message = await self.receive()
        type = type or self.message_type
        try:
            if type is None:
                return self.request.app.json.loads(message.encode() if isinstance(message, str) else message)
            import msgspec

            return msgspec.json.decode(message, type=type)
        except (ValueError, TypeError) as exc:  # msgspec's errors are ValueErrors too
            await self.close(1007, "the message is not the JSON expected")
            raise WebSocketDisconnect(1007, str(exc)[:120]) from exc

    async def send(self, message: str | bytes) -> None:
        await self._open().send(message)

    async def send_text(self, text: str) -> None:
        await self._open().send(text)

    async def send_bytes(self, data: bytes) -> None:
        await self._open().send(bytes(data))

    async def send_json(self, value: Any, *, binary: bool = False) -> None:
        """Send ``value`` as JSON by the app's codec (a msgspec Struct too): a text message, or binary."""
        if hasattr(type(value), "__struct_fields__"):  # a msgspec Struct, as a typed handler's model
            import msgspec

            encoded = msgspec.json.encode(value)
        else:
            encoded = self.request.app.json.dumps(value)
        await self._open().send(encoded if binary else encoded.decode())

    async def close(self, code: int = 1000, reason: str = "") -> None:
        """Close with ``code`` and ``reason`` (at most 123 bytes of UTF-8)."""
        if self._channel is not None:
            await self._channel.close(code, reason)

    def __aiter__(self) -> AsyncIterator[str | bytes]:
        return self._messages()

    async def _messages(self) -> AsyncIterator[str | bytes]:
        """Each message until the client closes (a close ends the iteration, it raises nothing)."""
        try:
            while True:
                yield await self.receive()
        except WebSocketDisconnect:
            return

    async def iter_json(self) -> AsyncIterator[_M]:
        """Each message as :meth:`receive_json` gives it, until the client closes (a close ends the
        iteration; a message that does not fit closes 1007 and ends it too)."""
        try:
            while True:
                yield await self.receive_json()
        except WebSocketDisconnect:
            return

    def __repr__(self) -> str:
        return f"<WebSocket {self.request.path!r} accepted={self.accepted} close_code={self.close_code}>"

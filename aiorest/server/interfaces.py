"""The seams of the server: what each of its pieces needs of another, and of the app it serves.

    ServedApp          what a connection needs of the app (App provides it)
    TransportSide      what the handler driver (driving.py) needs of the asyncio side of
                       its connection (HttpProtocol, protocol.py): the transport's state
                       and flow control
    ServedConnection   a connection as the server and its shared state (shared.py) see it
                       (HttpProtocol is one)

Each is a typing Protocol: the pieces see each other through these, not through their classes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, Protocol

from ..http.request import AppInterface, Request
from ..http.response import Response

__all__ = ["Endpoint", "ServedApp", "TransportSide", "ServedConnection"]

Endpoint = Callable[[Request], Awaitable[Any]]


class ServedApp(AppInterface, Protocol):
    """What a connection needs of the app it serves; :class:`App` provides it."""

    def static_endpoints(self) -> Mapping[str, Mapping[str, Endpoint]]:
        """Path → method → endpoint of the routes without parameters, once the app started:
        the server keeps it (``ServerState.static_endpoints``) for its first lookup."""
        ...

    def begin(self, request: Request) -> Awaitable[Any]:
        """Route ``request`` and start its endpoint; routing errors raise HTTPError."""
        ...

    def handle_exception(self, request: Request, exc: BaseException) -> Coroutine[Any, Any, Response]:
        """The response for an exception a handler raised; never raises."""
        ...


class TransportSide(Protocol):
    """What the driver needs of the asyncio side of its connection (``HttpProtocol``)."""

    closed: bool  # the transport is gone
    reading_paused: bool
    writing_paused: bool  # the client does not read: answer nothing more for now

    def pause_reading(self) -> None: ...
    def resume_reading(self) -> None: ...
    def close(self) -> None: ...
    async def drain(self) -> None: ...


class ServedConnection(Protocol):
    """A connection as the server and its shared state see it (HttpProtocol is one)."""

    @property
    def transport(self) -> asyncio.Transport | None: ...

    def check_deadline(self, now: float) -> None:
        """Close or time out the connection if it is past its deadline."""

    def shutdown(self, close_idle: bool = True) -> None:
        """Close after the response in flight; an idle connection now, or with ``close_idle``
        false after it answers its next request."""

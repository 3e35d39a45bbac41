"""A WebSocket route's endpoint: the request checked (an upgrade to WebSocket, from an origin
allowed), the handler given a WebSocket, the connection closed when the handler returns.

It is an endpoint like another (``GET``): the app's and the route's middleware, sessions and
bearer tokens run before it, so before the upgrade; what they answer goes out as HTTP.
"""

from __future__ import annotations

import importlib.util
import inspect
import logging
import typing
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable
from urllib.parse import urlsplit

from ..http.exceptions import HTTPError, HTTPForbidden
from ..http.response import Response
from ..http.websocket import WebSocket, WebSocketDisconnect, WebSocketLimits

if TYPE_CHECKING:
    from ..http.request import Request

__all__ = ["WebSocketEndpoint", "WebSocketHandler", "OriginPolicy"]

logger = logging.getLogger("aiorest.error")

WebSocketHandler = Callable[[WebSocket[Any]], Awaitable[Any]]


@runtime_checkable
class OriginPolicy(Protocol):
    """What decides which origins may open a WebSocket: :class:`~aiorest.middleware.CORS` is one."""

    def allows_origin(self, origin: str) -> bool: ...


class WebSocketEndpoint:
    """The endpoint of a ``@app.websocket`` route (see :doc:`websockets`).

    ``origins``: the ``Origin`` values allowed besides the server's own (the request's
    ``Host``) and those the app's :class:`~aiorest.CORS` middleware allows: a list, a
    policy with ``allows_origin``, or ``"*"`` for any. A browser always sends ``Origin``: another site's page is refused
    403 before the upgrade (cross-site WebSocket hijacking). A client that sends none
    (not a browser) is not refused.
    """

    def __init__(
        self,
        handler: WebSocketHandler,
        limits: WebSocketLimits | None = None,
        origins: Iterable[str] | OriginPolicy | str = (),
    ) -> None:
        if importlib.util.find_spec("websockets") is None:
            raise RuntimeError(
                "WebSocket routes need the websockets library: pip install '.[websockets]' in aiorest's checkout"
            )
        self.handler = handler
        self.limits = limits or WebSocketLimits()
        self._any_origin = origins == "*"
        self._policy: OriginPolicy | None = None
        self._origins: frozenset[str] = frozenset()
        if hasattr(origins, "allows_origin"):
            self._policy = origins  # type: ignore[assignment]
        elif not self._any_origin:
            self._origins = frozenset(origin.rstrip("/").lower() for origin in origins)
        self.message_type = message_type_of(handler)
        self.__name__ = getattr(handler, "__name__", "websocket")
        self.__qualname__ = getattr(handler, "__qualname__", self.__name__)
        self.__doc__ = handler.__doc__

    async def __call__(self, request: Request) -> Any:
        if not _asks_for_websocket(request):
            raise HTTPError(
                "this route speaks WebSocket: send a GET with Upgrade: websocket",
                status=426,
                headers={"Upgrade": "websocket", "Connection": "Upgrade"},
            )
        origin = request.header("origin")
        if origin is not None and not self.allows(origin, request.header("host") or "", request.app):
            raise HTTPForbidden(f"WebSocket connections from {origin[:100]!r} are not allowed")
        websocket: WebSocket[Any] = WebSocket(request, self.limits, self.message_type)
        try:
            await self.handler(websocket)
        except WebSocketDisconnect:
            pass  # the client went away: nothing is left to answer
        except Exception:
            if not websocket.accepted:
                raise  # answered as HTTP, as any handler's error
            logger.exception("WebSocket handler %s failed", self.__qualname__)
            await websocket.close(1011, "internal error")
            return Response(b"")  # the connection is no longer HTTP: nothing of this is written
        if not websocket.accepted:
            # As Starlette does: a handler that returns without accepting refuses the connection.
            raise HTTPForbidden("the WebSocket was not accepted")
        await websocket.close(1000)
        return Response(b"")

    def allows(self, origin: str, host: str, app: object = None) -> bool:
        """Whether a page of ``origin`` may open a WebSocket on the server ``host`` (the request's Host);
        ``app``'s own origin policies (its :class:`~aiorest.CORS` middleware) allow too."""
        if self._any_origin:
            return True
        if self._policy is not None and self._policy.allows_origin(origin):
            return True
        for middleware in getattr(app, "middleware", ()):
            if isinstance(middleware, OriginPolicy) and middleware.allows_origin(origin):
                return True
        normal = origin.rstrip("/").lower()
        if normal in self._origins:
            return True
        return bool(host) and urlsplit(normal).netloc == host.lower()


def message_type_of(handler: WebSocketHandler) -> Any:
    """The ``Model`` of a handler whose first parameter is declared ``WebSocket[Model]``, else None.
    A declared type that does not resolve, or that msgspec refuses, is a TypeError now, not at the first message."""
    parameters = list(inspect.signature(handler).parameters.values())
    if not parameters or parameters[0].annotation is inspect.Parameter.empty:
        return None
    try:
        declared = typing.get_type_hints(handler).get(parameters[0].name)
    except Exception as exc:  # an annotation that does not resolve
        if "[" in str(parameters[0].annotation):  # a message type declared but not found: not ignored
            raise TypeError(f"{handler.__qualname__}: {parameters[0].annotation} does not resolve ({exc})") from exc
        return None  # the handler takes what it takes
    if typing.get_origin(declared) is not WebSocket or not typing.get_args(declared):
        return None
    model = typing.get_args(declared)[0]
    if model is Any:
        return None
    try:
        import msgspec
    except ImportError:
        raise RuntimeError("WebSocket[Model] needs msgspec: pip install '.[typed]' in aiorest's checkout") from None
    msgspec.json.Decoder(model)  # TypeError for what msgspec refuses outright
    return model


def _asks_for_websocket(request: Request) -> bool:
    upgrade = request.header("upgrade") or ""  # header(): a WebSocket keeps no Headers it did not need
    return request.method == "GET" and "websocket" in [token.strip().lower() for token in upgrade.split(",")]

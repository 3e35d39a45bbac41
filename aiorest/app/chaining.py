"""Middleware chained once, at startup: the app's (outermost), then the route's, around a handler;
and the endpoints the app makes itself (routing errors, OPTIONS and its preflights).

An endpoint is a chain of small callables built here (no closure per request),
then wrapped in the server's layers (admission, metrics), outermost first.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from ..http.response import Response, to_response
from ..routing.route import ROUTE_BINDING, Handler, Middleware, Route, _is_async
from ..routing.websocket import WebSocketEndpoint

if TYPE_CHECKING:
    from ..http.request import Request

__all__ = ["EndpointLayer", "answer_options", "chain", "layers_for", "preflight_route", "raise_routing_error", "wrap"]

#: Wraps an endpoint for one run of the server (admission control, metrics):
#: ``layer(endpoint, template)`` returns the endpoint to call instead; ``template``
#: is the route's path template, or None for the answers to routing errors and OPTIONS.
EndpointLayer = Callable[[Handler, "str | None"], Handler]


def layers_for(route: Route, layers: Sequence[EndpointLayer]) -> Sequence[EndpointLayer]:
    """The server's layers around ``route``. Around a WebSocket's, whose handler lives as long as its
    connection (no request slot, no request latency: ``Limits.max_websockets`` and their own gauge), only
    those that have a ``websocket`` layer for it (tracing's: a span covering the session)."""
    if not isinstance(route.call, WebSocketEndpoint):
        return layers
    return [layer.websocket for layer in layers if hasattr(layer, "websocket")]


def wrap(endpoint: Handler, template: str | None, layers: Sequence[EndpointLayer]) -> Handler:
    """``endpoint`` inside ``layers``, the first outermost."""
    for layer in reversed(layers):
        endpoint = layer(endpoint, template)
    return endpoint


def chain(
    app_middleware: Sequence[Middleware],
    handler: Handler,
    route_middleware: Sequence[Middleware] = (),
    route: Route | None = None,
) -> Handler:
    """The app's middleware (outermost), then the route's, around ``handler``.

    On a ``route``, a middleware with ``for_route`` (:data:`~aiorest.routing.ROUTE_BINDING`)
    says what runs in its place and what next to the handler, inside all the others.
    """
    outer: list[Middleware] = []
    inner: list[Middleware] = []
    for middleware in (*app_middleware, *route_middleware):
        bind = None if route is None else getattr(middleware, ROUTE_BINDING, None)
        if bind is None:
            outer.append(middleware)
            continue
        at_place, next_to_handler = bind(route)
        if at_place is not None:
            outer.append(at_place)
        if next_to_handler is not None:
            inner.append(next_to_handler)
    if not outer and not inner:
        return handler
    endpoint: Handler = _Converting(handler)
    for middleware in reversed((*outer, *inner)):
        # The server drives endpoints with ``yield from``, which takes coroutines
        # only: a middleware that is a plain function returning an awaitable is awaited.
        endpoint = _Link(middleware, endpoint) if _is_async(middleware) else _AwaitingLink(middleware, endpoint)
    return endpoint


class _Link:
    """One middleware bound to the rest of the chain (no closure per request)."""

    __slots__ = ("middleware", "next")

    def __init__(self, middleware: Middleware, next: Handler) -> None:
        self.middleware = middleware
        self.next = next

    def __call__(self, request: Request) -> Awaitable[Response]:
        return self.middleware(request, self.next)


class _AwaitingLink(_Link):
    """A middleware that is not an async function: its awaitable, awaited in a coroutine."""

    __slots__ = ()

    async def __call__(self, request: Request) -> Response:
        return await self.middleware(request, self.next)


class _Converting:
    """The innermost link when there is middleware: middleware always sees a Response."""

    __slots__ = ("handler",)

    def __init__(self, handler: Handler) -> None:
        self.handler = handler

    async def __call__(self, request: Request) -> Response:
        return to_response(await self.handler(request))


def preflight_route(
    app_middleware: Sequence[Middleware], path: str, middleware: Sequence[Middleware], layers: Sequence[EndpointLayer]
) -> Route:
    """The automatic answer to OPTIONS on ``path``, through the routes' preflight middleware (CORS)."""
    route = Route("OPTIONS", path, answer_options, middleware=middleware)
    route.endpoint = wrap(chain(app_middleware, answer_options, route.middleware), path, layers)
    return route


async def raise_routing_error(request: Request) -> Response:
    """A routing error (404/405) as an endpoint, so that middleware sees it too."""
    assert request.match is not None and request.match.error is not None
    raise request.match.error


async def answer_options(request: Request) -> Response:
    """OPTIONS on a path with no OPTIONS handler: 204 with ``Allow``."""
    assert request.match is not None
    return Response(status=204, headers={"Allow": ", ".join(sorted(request.match.allow))})

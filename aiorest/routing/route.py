"""Routes and route groups: what a handler is registered with (the table that matches them is in ``table``)."""

from __future__ import annotations

import inspect
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar, Unpack, cast

from ..http.datastructures import _check_header
from ..http.response import _checked_status
from .static import StaticFiles
from .websocket import OriginPolicy, WebSocketEndpoint, WebSocketHandler

if TYPE_CHECKING:
    from ..http.request import Request
    from ..http.response import Response
    from ..http.websocket import WebSocketLimits

__all__ = ["Route", "Router", "RouteOptions", "NoMatchFound", "Handler", "Middleware", "METHODS", "ROUTE_BINDING"]

Handler = Callable[["Request"], Awaitable[Any]]
Middleware = Callable[["Request", Handler], Awaitable["Response"]]
#: The attribute under which a decorator puts middleware on a handler, for each of its routes.
HANDLER_MIDDLEWARE = "__aiorest_middleware__"
#: A route's middleware with this attribute set (CORS) also runs around the App's
#: automatic answer to OPTIONS on the route's path, so that it answers preflights.
PREFLIGHT_MIDDLEWARE = "__aiorest_preflight__"
#: A middleware with a method of this name is asked, once per route when the App chains it,
#: what to run on that route: ``for_route(route)`` returns ``(outer, inner)``, the middleware
#: for its own place in the chain and one for next to the handler, inside every other one
#: (either None for nothing). Idempotency uses it: it keys only the routes it concerns, and
#: keeps the handler's answer before the middleware inside it changed it (compressed it...).
ROUTE_BINDING = "for_route"
# What a route is given: the request, then any typed parameters (aiorest.typed).
RouteHandler = Callable[..., Awaitable[Any]]
_H = TypeVar("_H", bound=RouteHandler)


class RouteOptions(TypedDict, total=False):
    """The options of a route, taken by :meth:`App.route`, :meth:`App.get`... and ``add_route``."""

    #: The route's name, for :meth:`App.url_for`.
    name: str | None
    #: The status of the responses made of what the handler returns (a model, a dict, a list, None).
    status: int | None
    #: Headers added to those responses.
    headers: Mapping[str, str] | None
    #: The route's own middleware, inside the app's (and its routers').
    middleware: Sequence[Middleware]
    #: False: a typed JSON body may also come without a Content-Type (default: 415).
    strict_content_type: bool
    #: The most body bytes a request to this route may send, instead of the server's
    #: ``Limits.max_body_size`` (see :doc:`forms`): an upload route's.
    max_body_size: int | None


METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class NoMatchFound(LookupError):
    """``url_for`` was given an unknown route name or wrong parameters."""


class Route:
    """One handler for one method on one path template.

    ``status`` and ``headers``: the status and the headers of the responses made
    of what the handler returns (see :doc:`typed`), checked here.
    ``strict_content_type``: whether a typed JSON body must come with a JSON
    Content-Type (True) or may also come without one. ``signature``:
    what a typed handler declares (None for one that takes only the request),
    and ``call`` what the app calls, the handler or its
    :class:`~aiorest.typed.TypedEndpoint`; the App sets both when it registers
    the route. ``middleware``: the route's own, inside the app's (its routers'
    first, then what the route was given, then what decorators put on the
    handler under ``__aiorest_middleware__``). ``endpoint`` is
    ``call`` wrapped in all the middleware; the App sets it when it starts.
    """

    __slots__ = (
        "method",
        "path",
        "handler",
        "name",
        "status",
        "headers",
        "middleware",
        "strict_content_type",
        "max_body_size",
        "_given_middleware",
        "signature",
        "call",
        "endpoint",
    )

    def __init__(
        self,
        method: str,
        path: str,
        handler: RouteHandler,
        name: str | None = None,
        *,
        status: int | None = None,
        headers: Mapping[str, str] | None = None,
        middleware: Sequence[Middleware] = (),
        strict_content_type: bool = True,
        max_body_size: int | None = None,
    ) -> None:
        method = method.upper()
        if not path.startswith("/"):
            raise ValueError(f"route path {path!r} must start with '/'")
        if not _is_async(handler):
            raise TypeError(
                f"handler {describe(handler)} for {method} {path} is not an async "
                "function: aiorest awaits every handler, so define it with 'async def'"
            )
        if status is not None:
            status = _checked_status(status)
        if max_body_size is not None and (type(max_body_size) is not int or max_body_size < 0):
            raise ValueError(f"route {method} {path}: max_body_size must be an int of 0 or more, got {max_body_size!r}")
        if headers:
            for header, value in headers.items():
                _check_header(header, value)
                if header.lower() in ("content-length", "transfer-encoding", "content-type"):
                    raise ValueError(f"route {method} {path}: the server sets {header}; do not declare it")
        self.method = method
        self.path = path
        self.handler = handler
        self.name = name
        self.status = status
        self.headers: Mapping[str, str] | None = MappingProxyType(dict(headers)) if headers else None
        self.strict_content_type = strict_content_type
        self.max_body_size = max_body_size
        where = f"route {method} {path}"
        self._given_middleware = _checked_middleware(middleware, where)
        self.middleware = self._given_middleware + _checked_middleware(getattr(handler, HANDLER_MIDDLEWARE, ()), where)
        # what the layer that binds typed handlers (the App) read of the handler: the router only keeps it
        self.signature: Any = None
        # an untyped handler is called as it is, unless the App binds it
        self.call: Handler = cast(Handler, handler)
        self.endpoint: Handler = self.call

    def options(self, **changed: Any) -> RouteOptions:
        """The options the route was made with (a Router copies routes with them).

        ``middleware`` is what the route was given: the handler's own comes with the
        handler, and a copy of the route adds it again, after what it is given.
        """
        options = RouteOptions(
            name=self.name,
            status=self.status,
            headers=self.headers,
            middleware=self._given_middleware,
            strict_content_type=self.strict_content_type,
            max_body_size=self.max_body_size,
        )
        options.update(changed)  # type: ignore[typeddict-item]
        return options

    def __repr__(self) -> str:
        return f"Route({self.method!r}, {self.path!r}, {describe(self.handler)}, name={self.name!r})"


def _checked_middleware(middleware: Any, where: str) -> tuple[Middleware, ...]:
    if not isinstance(middleware, (list, tuple)):
        raise TypeError(f"{where}: middleware must be a list of middleware, not {type(middleware).__name__}")
    for one in middleware:
        if not callable(one):
            raise TypeError(f"{where}: middleware {one!r} is not callable")
    return tuple(middleware)


def _is_async(handler: object) -> bool:
    if inspect.iscoroutinefunction(handler):
        return True
    # an instance of a class with ``async def __call__``
    return not inspect.isfunction(handler) and inspect.iscoroutinefunction(type(handler).__call__)


def describe(handler: object) -> str:
    """A handler's name for messages: its qualified name, or its class's for an instance with ``__call__``."""
    return repr(getattr(handler, "__qualname__", None) or type(handler).__qualname__)


class _RouteDecorators:
    """The decorator API shared by App and Router; subclasses implement ``add_route``."""

    def add_route(self, method: str, path: str, handler: RouteHandler, **options: Unpack[RouteOptions]) -> None:
        raise NotImplementedError

    def route(
        self, path: str, methods: Iterable[str] = ("GET",), **options: Unpack[RouteOptions]
    ) -> Callable[[_H], _H]:
        """Register the decorated handler for ``path`` and every method in ``methods``.

        The options are those of :class:`RouteOptions`: ``name``, ``status`` and
        ``headers`` of the responses made of what the handler returns, and the
        route's own ``middleware``.
        """
        if isinstance(methods, str):
            raise TypeError(f"methods must be a list of method names, e.g. [{methods!r}], not a string")
        methods = list(methods)
        if not methods:
            raise TypeError("methods must be a non-empty list of method names, e.g. ['GET', 'POST']")

        def decorator(handler: _H) -> _H:
            for method in methods:
                self.add_route(method, path, handler, **options)
            return handler

        return decorator

    def static(
        self,
        prefix: str,
        directory: str | os.PathLike[str],
        *,
        cache_control: str | None = None,
        precompressed: bool = True,
        name: str | None = None,
    ) -> None:
        """Serve the files under ``directory`` at ``prefix`` (GET and HEAD): see :doc:`responses`.

        ``cache_control`` is sent as ``Cache-Control``; ``precompressed``: a ``.br`` or
        ``.gz`` sibling is sent when ``Accept-Encoding`` allows; ``name``: the route's.
        """
        handler = StaticFiles(prefix, directory, cache_control=cache_control, precompressed=precompressed)
        self.add_route("GET", handler.prefix + "{path:path}", handler, name=name)

    def get(self, path: str, **options: Unpack[RouteOptions]) -> Callable[[_H], _H]:
        """``route(path, ["GET"], ...)``: the route answers HEAD too."""
        return self.route(path, ["GET"], **options)

    def post(self, path: str, **options: Unpack[RouteOptions]) -> Callable[[_H], _H]:
        """``route(path, ["POST"], ...)``."""
        return self.route(path, ["POST"], **options)

    def put(self, path: str, **options: Unpack[RouteOptions]) -> Callable[[_H], _H]:
        """``route(path, ["PUT"], ...)``."""
        return self.route(path, ["PUT"], **options)

    def patch(self, path: str, **options: Unpack[RouteOptions]) -> Callable[[_H], _H]:
        """``route(path, ["PATCH"], ...)``."""
        return self.route(path, ["PATCH"], **options)

    def delete(self, path: str, **options: Unpack[RouteOptions]) -> Callable[[_H], _H]:
        """``route(path, ["DELETE"], ...)``."""
        return self.route(path, ["DELETE"], **options)

    def websocket(
        self,
        path: str,
        *,
        limits: WebSocketLimits | None = None,
        origins: Iterable[str] | OriginPolicy | str = (),
        name: str | None = None,
        middleware: Sequence[Middleware] = (),
    ) -> Callable[[WebSocketHandler], WebSocketHandler]:
        """Register the decorated handler, given a :class:`~aiorest.WebSocket`, for WebSockets at ``path``
        (see :doc:`websockets`): ``limits`` of its connections, the ``origins`` allowed besides the server's own.
        """

        def decorator(handler: WebSocketHandler) -> WebSocketHandler:
            endpoint = WebSocketEndpoint(handler, limits, origins)
            # the handler's decorators' middleware (login_required): the endpoint, not the handler, is the route's
            given = (*middleware, *getattr(handler, HANDLER_MIDDLEWARE, ()))
            self.add_route("GET", path, endpoint, name=name, middleware=given)
            return handler

        return decorator

    def include(self, router: Router, prefix: str = "", *, name: str | None = None) -> None:
        """Add every route of ``router`` under ``prefix``.

        A router may be included several times; give each inclusion a ``name`` so
        that route names stay unique: they become ``"<name>.<route name>"``.
        """
        if prefix and (not prefix.startswith("/") or prefix.endswith("/")):
            raise ValueError(f"prefix {prefix!r} must start with '/' and must not end with '/'")
        for route in router.routes:
            route_name = route.name
            if name is not None:
                route_name = f"{name}.{route_name or getattr(route.handler, '__name__', 'route')}"
            self.add_route(route.method, prefix + route.path, route.handler, **route.options(name=route_name))


class Router(_RouteDecorators):
    """A group of routes, included into an App (or another Router) under a prefix.

    ``middleware`` applies to every route of the group, inside the app's
    middleware and outside each route's own.
    """

    def __init__(self, routes: Iterable[Route] = (), *, middleware: Sequence[Middleware] = ()) -> None:
        self.routes: list[Route] = []
        self.middleware: tuple[Middleware, ...] = _checked_middleware(middleware, "Router")
        for route in routes:
            self.add_route(route.method, route.path, route.handler, **route.options())

    def add_route(self, method: str, path: str, handler: RouteHandler, **options: Unpack[RouteOptions]) -> None:
        options["middleware"] = (*self.middleware, *options.get("middleware", ()))
        self.routes.append(Route(method, path, handler, **options))

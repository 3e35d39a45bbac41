"""The App: assembles routes, middleware, hooks and error handling.

Middleware is chained once per route when the app starts, never per request.
With no middleware, a route's endpoint is the handler itself, and the server
turns what it returns into a response.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, TypeVar, Unpack

from ..http.background import BackgroundTasks
from ..http.datastructures import State
from ..http.exceptions import ClientDisconnected, HTTPError, HTTPUnprocessableEntity
from ..http.jsoncodec import JSONCodec, get_codec
from ..http.limits import Limits
from ..http.request import RouteMatch
from ..http.response import JSONResponse, Response, error_response, to_response
from ..http.uploads import Uploads
from ..routing.convertors import Convertor
from ..routing.paths import PathTemplate, compile_path
from ..routing.route import (
    PREFLIGHT_MIDDLEWARE,
    Handler,
    Middleware,
    Route,
    RouteHandler,
    RouteOptions,
    _RouteDecorators,
)
from ..routing.table import RouteTable
from ..typed.binding import TypedEndpoint
from ..typed.declare import read_signature
from .chaining import EndpointLayer, answer_options, chain, layers_for, preflight_route, raise_routing_error, wrap
from .readiness import Readiness

if TYPE_CHECKING:
    from ..http.request import Request

__all__ = ["App", "Middleware", "Hook", "ExceptionHandler", "Lifespan", "EndpointLayer"]

logger = logging.getLogger("aiorest.error")

Hook = Callable[["App"], Awaitable[None]]
ExceptionHandler = Callable[["Request", Any], Awaitable[Any]]
Lifespan = Callable[["App"], AbstractAsyncContextManager[None]]
_F = TypeVar("_F", bound=Callable[..., Any])

_INTERNAL_ERROR = {"error": {"status": 500, "message": "Internal Server Error", "details": None}}


class App(_RouteDecorators):
    """An aiorest application.

    ``routes``: Route objects to register up front. ``json``: the JSON codec,
    ``"ujson"`` (default), ``"orjson"``, ``"json"`` or a ``JSONCodec``.
    ``middleware``: functions ``async def mw(request, handler) -> Response``, outermost
    first. ``lifespan``: a function taking the app and returning an async context
    manager. ``contexts``: more such functions, for resources opened at startup and
    closed at shutdown (``Database.setup`` adds one). ``on_startup``/``on_shutdown``:
    ``async def hook(app)``. Startup enters the lifespan, then the contexts, then
    runs the startup hooks; shutdown undoes it in reverse. If a step of the startup
    raises, exactly the contexts entered (and the lifespan) are left, and no shutdown
    hook runs. ``convertors``: extra path parameter converters by name. ``limits``:
    the server's limits and timeouts. ``uploads``: the limits of forms and where their
    files spill (see :doc:`forms`). ``title`` and ``version``: the API's, in its
    OpenAPI document (see :meth:`openapi`).
    """

    def __init__(
        self,
        routes: Iterable[Route] = (),
        *,
        json: str | JSONCodec = "ujson",
        middleware: Sequence[Middleware] = (),
        on_startup: Sequence[Hook] = (),
        on_shutdown: Sequence[Hook] = (),
        lifespan: Lifespan | None = None,
        contexts: Sequence[Lifespan] = (),
        convertors: dict[str, Convertor] | None = None,
        limits: Limits | None = None,
        uploads: Uploads | None = None,
        title: str = "aiorest",
        version: str = "0.1.0",
    ) -> None:
        self.title = title
        self.version = version
        self.router = RouteTable(convertors)
        self.state = State()
        #: the app's Database (``Database.setup`` sets it): the server hands it to health and metrics
        self.database: Any = None
        #: the other backing services ``/readyz`` checks: the middleware's (collected at startup) and any added
        self.readiness = Readiness()
        self.json: JSONCodec = get_codec(json)
        self.middleware: list[Middleware] = list(middleware)
        self.on_startup: list[Hook] = list(on_startup)
        self.on_shutdown: list[Hook] = list(on_shutdown)
        self.lifespan = lifespan
        self.contexts: list[Lifespan] = list(contexts)
        self.limits = limits
        self.uploads = uploads or Uploads()
        #: what the handlers leave to run after their responses (``request.background``, docs/background.rst)
        self.background = BackgroundTasks((limits or Limits()).max_background_tasks)
        self._exception_handlers: dict[type[BaseException], ExceptionHandler] = {}
        # the lifespan and contexts entered, with what to call them in messages
        self._entered: list[tuple[str, AbstractAsyncContextManager[None]]] = []
        self._routing_error_endpoint: Handler = raise_routing_error
        self._options_endpoint: Handler = answer_options
        self._matches: dict[str, RouteMatch] = {}  # template -> the match of its requests
        # path → method → endpoint of the routes without parameters, built at startup:
        # the server routes most requests by two lookups in it, and calls begin
        # only for the others (parameters, HEAD, OPTIONS, 404, 405)
        self._static_endpoints: dict[str, dict[str, Handler]] = {}
        self._wrapped = False  # middleware or layers wrap the endpoints: routing errors go through them too
        self._started = False
        for route in routes:
            self.add_route(route.method, route.path, route.handler, **route.options())

    # -- registration ------------------------------------------------------------

    def add_route(self, method: str, path: str, handler: RouteHandler, **options: Unpack[RouteOptions]) -> None:
        """Register ``handler`` for ``method`` on the path template ``path``.

        A typed handler's declarations are read and checked here (see :doc:`typed`):
        one that cannot work raises TypeError naming the handler and the parameter.
        ``options``: see :class:`RouteOptions`.
        """
        self._check_not_started("add a route")
        route = Route(method, path, handler, **options)
        params = compile_path(route.path, self.router.convertors, PathTemplate).params
        signature = read_signature(
            handler, route.method, path, params, route.status, route.headers, route.strict_content_type
        )
        if signature is not None:
            route.signature = signature
            route.call = TypedEndpoint(signature)
        self.router.add(route)

    def add_middleware(self, middleware: Middleware) -> None:
        """Add a middleware inside those already added."""
        self._check_not_started("add middleware")
        self.middleware.append(middleware)

    def add_convertor(self, name: str, convertor: Convertor) -> None:
        """Make ``{param:name}`` usable in routes registered from now on."""
        self.router.convertors[name] = convertor

    def exception_handler(self, exc_class: type[BaseException]) -> Callable[[_F], _F]:
        """Register ``async def handler(request, exc)`` for ``exc_class`` and its subclasses.

        It returns what a route handler may return. The most specific class wins.
        """

        def decorator(handler: _F) -> _F:
            self._exception_handlers[exc_class] = handler
            return handler

        return decorator

    def url_for(self, name: str, /, **params: Any) -> str:
        """The path of the route named ``name`` with ``params`` filled in."""
        return self.router.url_for(name, **params)

    def openapi(self, *, title: str | None = None, version: str | None = None) -> dict[str, Any]:
        """The OpenAPI 3.1 document of the routes, as a dict (see :doc:`typed`).

        ``title`` and ``version`` default to the App's. Needs msgspec (aiorest's ``openapi`` extra).
        """
        from ..typed.openapi import build_openapi

        return build_openapi(self.router, self.middleware, title=title or self.title, version=version or self.version)

    def add_openapi_routes(
        self,
        openapi_url: str = "/openapi.json",
        docs_url: str | None = "/docs",
        redoc_url: str | None = "/redoc",
        *,
        title: str | None = None,
        version: str | None = None,
    ) -> None:
        """Serve the OpenAPI document at ``openapi_url`` and interactive docs: Swagger UI at
        ``docs_url``, ReDoc at ``redoc_url`` (None leaves one out), from local files only.

        The document is built on its first request, then kept. The docs' scripts and
        styles are served under ``docs_url`` and ``redoc_url`` from the
        ``openapi-ui-bundles`` package (aiorest's ``openapi`` extra): RuntimeError
        here when it is missing. These routes are not in the document.
        """
        from ..typed.docpages import openapi_routes

        self._check_not_started("add the OpenAPI routes")

        def document() -> dict[str, Any]:
            return self.openapi(title=title, version=version)

        for path, endpoint in openapi_routes(document, title or self.title, openapi_url, docs_url, redoc_url):
            self.add_route("GET", path, endpoint)

    def run(self, host: str = "127.0.0.1", port: int = 8080, *, reload: bool = False, **options: Any) -> None:
        """Serve the app until SIGINT or SIGTERM (``options``: ``aiorest.run``'s; ``reload=True``: :ref:`reload`)."""
        from ..server.server import run  # the server layer sits above the app

        run(self, host=host, port=port, reload=reload, **options)

    # -- lifecycle -------------------------------------------------------------------

    async def startup(self, *, layers: Sequence[EndpointLayer] = (), routes: Sequence[Route] = ()) -> None:
        """Enter the lifespan and the contexts, run the startup hooks, chain the middleware.

        The server passes ``layers``, which wrap each endpoint outside the middleware
        (the first outermost), and ``routes`` of its own (``/healthz``, ``/metrics``):
        routes without parameters, served as they are (no middleware, no layer), for
        this run only; a path the app routes too is refused with ValueError.

        If one of them raises (or the startup is cancelled), the contexts already
        entered and the lifespan are left, last entered first, and the exception
        propagates with a note naming the step that raised it.
        """
        if self._started:
            raise RuntimeError("the app is already started")
        served = self._served_routes(routes)
        self._check_preflight_middleware()
        step = ""
        try:
            if self.lifespan is not None:
                step = f"the lifespan {_name(self.lifespan)}"
                await self._enter(step, self.lifespan)
            for context in self.contexts:
                step = f"the context {_name(context)}"
                await self._enter(step, context)
            for hook in self.on_startup:
                step = f"the startup hook {_name(hook)}"
                await hook(self)
        except BaseException as exc:
            if isinstance(exc, Exception):
                exc.add_note(f"raised in {step}")
            await self._leave()
            raise
        answers_422 = self._find_exception_handler(HTTPUnprocessableEntity) is not None
        self.readiness.collect(self.middleware)
        for route in self.router.routes():
            self.readiness.collect(route.middleware)
            if isinstance(route.call, TypedEndpoint):
                route.call.raise_errors = answers_422  # else it returns its 422, which costs less
            endpoint = chain(self.middleware, route.call, route.middleware, route)
            route.endpoint = wrap(endpoint, route.path, layers_for(route, layers))
        self._static_endpoints = {
            path: {method: route.endpoint for method, route in methods.items()}
            for path, methods in self.router.static_routes().items()
        }
        self._static_endpoints.update(served)
        self.router.set_preflights(lambda path, middleware: preflight_route(self.middleware, path, middleware, layers))
        self._routing_error_endpoint = wrap(chain(self.middleware, raise_routing_error), None, layers)
        self._options_endpoint = wrap(chain(self.middleware, answer_options), None, layers)
        self._wrapped = bool(self.middleware or layers)
        self._started = True

    async def shutdown(self) -> None:
        """Run the shutdown hooks (last added first), then leave the contexts and the lifespan."""
        if not self._started:
            return
        self._started = False
        try:
            for hook in reversed(self.on_shutdown):
                try:
                    await hook(self)
                except Exception:
                    logger.exception("the shutdown hook %s failed", _name(hook))
        finally:
            await self._leave()

    async def _enter(self, name: str, lifespan: Lifespan) -> None:
        context = lifespan(self)
        await context.__aenter__()
        self._entered.append((name, context))

    async def _leave(self) -> None:
        """Leave what was entered, last first; one that raises is logged and the others still left."""
        while self._entered:
            name, context = self._entered.pop()
            try:
                await context.__aexit__(None, None, None)
            except Exception:
                logger.exception("leaving %s failed", name)

    def _check_not_started(self, what: str) -> None:
        if self._started:
            raise RuntimeError(f"cannot {what} after the app has started")

    def _served_routes(self, routes: Sequence[Route]) -> dict[str, dict[str, Handler]]:
        """The server's own routes as static endpoints (GET ones answer HEAD too)."""
        served: dict[str, dict[str, Handler]] = {}
        own = self.router.static_routes() if routes else {}
        for route in routes:
            if "{" in route.path:
                raise ValueError(f"the server's route {route.path!r} must have no parameters")
            if route.path in own:
                raise ValueError(f"the app has a route {route.path!r}, which the server serves too: drop one")
            methods = served.setdefault(route.path, {})
            methods[route.method] = route.handler
            if route.method == "GET":
                methods.setdefault("HEAD", route.handler)
        return served

    def _check_preflight_middleware(self) -> None:
        """One CORS per path: an outer one would answer the preflights an inner one is meant to."""
        in_app = [one for one in self.middleware if getattr(one, PREFLIGHT_MIDDLEWARE, False)]
        if len(in_app) > 1:
            raise ValueError(f"the app has {len(in_app)} CORS middleware: give it one")
        for path, middleware in self.router.preflight_middleware().items():
            if in_app:
                raise ValueError(f"route '{path}' has CORS middleware, and so has the app: give CORS to one of them")
            if len(middleware) > 1:
                raise ValueError(f"the routes of '{path}' have {len(middleware)} CORS middleware: give them one")

    # -- per request (called by the server) ------------------------------------

    # What the server needs of the app (the interface ServedApp in server/interfaces.py):
    # the routes without parameters for its first lookup, a way to start any
    # other request's endpoint, and the answer to an exception.

    def static_endpoints(self) -> dict[str, dict[str, Callable[[Request], Awaitable[Any]]]]:
        """Path → method → endpoint of the routes without parameters, as startup chained them: a new table.

        With :meth:`begin` and :meth:`handle_exception`, what a server needs of the
        app: it keeps this table and looks a request up there first (two dict
        lookups), and calls :meth:`begin` for the others.
        """
        return {path: dict(methods) for path, methods in self._static_endpoints.items()}

    def has_static_route(self, path: str) -> bool:
        """Whether a route without parameters has the path ``path`` (its template is its path)."""
        return path in self._static_endpoints

    def begin(self, request: Request) -> Awaitable[Any]:
        """Route ``request`` and start its endpoint; routing errors raise HTTPError."""
        try:
            route, params, allow = self.router.resolve(request.method, request.path)
        except HTTPError as exc:
            if not self._wrapped:
                raise
            request.match = RouteMatch(None, error=exc)
            return self._routing_error_endpoint(request)
        request.path_params = params
        if route is None:
            request.match = RouteMatch(None, allow)
            return self._options_endpoint(request)
        if route.handler is answer_options:  # the path's preflight route
            request.match = RouteMatch(route.path, allow)
        else:
            match = self._matches.get(route.path)
            if match is None:  # one per template, made once
                match = self._matches[route.path] = RouteMatch(route.path)
            request.match = match
        return route.endpoint(request)

    def body_limit(self, method: str, path: str) -> int | None:
        """The ``max_body_size`` of the route for ``method path``, if it has one of its own."""
        return self.router.body_limit(method, path)

    async def handle_exception(self, request: Request, exc: BaseException) -> Response:
        """The response for an exception a handler raised; never raises. The request's background tasks are dropped."""
        if self.background.waiting:
            self.background.discard(request)
        handler = self._find_exception_handler(type(exc))
        if handler is not None:
            try:
                return to_response(await handler(request, exc))
            except Exception as handler_exc:
                if handler_exc is not exc:
                    logger.exception("exception handler %r failed", handler)
                exc = handler_exc
        if isinstance(exc, HTTPError):
            return error_response(exc)
        if isinstance(exc, ClientDisconnected):  # nobody is left to answer
            return error_response(HTTPError("client disconnected", status=400))
        logger.error("unhandled exception in %s %s", request.method, request.path, exc_info=exc)
        return JSONResponse(_INTERNAL_ERROR, status=500)

    def _find_exception_handler(self, exc_type: type[BaseException]) -> ExceptionHandler | None:
        if not self._exception_handlers:
            return None
        for cls in exc_type.__mro__:
            handler = self._exception_handlers.get(cls)
            if handler is not None:
                return handler
        return None


def _name(function: object) -> str:
    """``module.qualname`` of a hook or lifespan, for messages."""
    qualname = getattr(function, "__qualname__", None)
    if qualname is None:
        return repr(function)
    module = getattr(function, "__module__", None)
    return f"{module}.{qualname}" if module else str(qualname)

"""Routes, route groups and the compiled route table.

Static paths resolve with one dict lookup. Dynamic paths are compiled into one
combined regular expression (one alternative per path template, bottle style),
so a request never tests routes one by one on the hot path. Methods are grouped
per path, so a 405 can list every method the path has in ``Allow``.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar, Unpack, cast
from urllib.parse import quote

from .binding import TypedEndpoint
from .convertors import DEFAULT_CONVERTORS, Convertor, route_regex
from .datastructures import _check_header
from .exceptions import HTTPMethodNotAllowed, HTTPNotFound
from .response import _checked_status
from .typed import HandlerSignature, read_signature

if TYPE_CHECKING:
    from .request import Request
    from .response import Response

__all__ = ["Route", "Router", "RouteOptions", "RouteTable", "NoMatchFound", "Handler", "Middleware", "METHODS"]

Handler = Callable[["Request"], Awaitable[Any]]
Middleware = Callable[["Request", Handler], Awaitable["Response"]]
#: The attribute under which a decorator puts middleware on a handler, for each of its routes.
HANDLER_MIDDLEWARE = "__aiorest_middleware__"
#: A route's middleware with this attribute set (CORS) also runs around the App's
#: automatic answer to OPTIONS on the route's path, so that it answers preflights.
PREFLIGHT_MIDDLEWARE = "__aiorest_preflight__"
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


METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})

_NO_PARAMS: Mapping[str, Any] = MappingProxyType({})  # shared by every static route: read-only
_PARAM_RE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)(?::([A-Za-z_][A-Za-z0-9_]*))?\}")


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
    :class:`~aiorest.binding.TypedEndpoint`; the App sets both when it registers
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
    ) -> None:
        method = method.upper()
        if not path.startswith("/"):
            raise ValueError(f"route path {path!r} must start with '/'")
        if not _is_async(handler):
            raise TypeError(
                f"handler {_describe(handler)} for {method} {path} is not an async "
                "function: aiorest awaits every handler, so define it with 'async def'"
            )
        if status is not None:
            status = _checked_status(status)
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
        where = f"route {method} {path}"
        self._given_middleware = _checked_middleware(middleware, where)
        self.middleware = self._given_middleware + _checked_middleware(getattr(handler, HANDLER_MIDDLEWARE, ()), where)
        self.signature: HandlerSignature | None = None
        # an untyped handler is called as it is, until bind() says otherwise
        self.call: Handler = cast(Handler, handler)
        self.endpoint: Handler = self.call

    def bind(self, convertors: Mapping[str, Convertor]) -> None:
        """Read the handler's declarations (see :func:`aiorest.typed.read_signature`) with the app's converters."""
        params = _compile(self.path, convertors).params
        self.signature = read_signature(
            self.handler, self.method, self.path, params, self.status, self.headers, self.strict_content_type
        )
        self.call = TypedEndpoint(self.signature) if self.signature else cast(Handler, self.handler)

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
        )
        options.update(changed)  # type: ignore[typeddict-item]
        return options

    def __repr__(self) -> str:
        return f"Route({self.method!r}, {self.path!r}, {_describe(self.handler)}, name={self.name!r})"


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


def _describe(handler: object) -> str:
    return repr(getattr(handler, "__qualname__", handler))


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


@dataclass(slots=True)
class _PathEntry:
    """Every route of one path template, by method."""

    template: str
    regex: str
    params: list[tuple[str, Convertor]]
    pieces: list[str | tuple[str, Convertor]]
    methods: dict[str, Route] = field(default_factory=dict)
    allow: frozenset[str] = frozenset()
    #: answers OPTIONS when no route does and the routes' middleware handles preflights
    preflight: Route | None = None

    def add(self, route: Route) -> None:
        if route.method in self.methods:
            raise ValueError(f"route '{route.path}' is already registered for {route.method}")
        self.methods[route.method] = route
        allowed = set(self.methods) | {"OPTIONS"}
        if "GET" in allowed:
            allowed.add("HEAD")
        self.allow = frozenset(allowed)

    def convert(self, texts: Iterable[str]) -> dict[str, Any]:
        return {name: conv.convert(text) for (name, conv), text in zip(self.params, texts, strict=True)}


def _compile(template: str, convertors: Mapping[str, Convertor]) -> _PathEntry:
    regex: list[str] = []
    pieces: list[str | tuple[str, Convertor]] = []
    params: list[tuple[str, Convertor]] = []
    pos = 0
    for match in _PARAM_RE.finditer(template):
        literal = template[pos : match.start()]
        if "{" in literal or "}" in literal:
            raise ValueError(f"malformed parameter in route path {template!r}")
        name, conv_name = match.group(1), match.group(2) or "str"
        if any(name == seen for seen, _ in params):
            raise ValueError(f"parameter {name!r} appears twice in route path {template!r}")
        try:
            conv = convertors[conv_name]
        except KeyError:
            raise ValueError(f"unknown converter {conv_name!r} in route path {template!r}") from None
        regex.append(re.escape(literal))
        regex.append(f"({route_regex(conv_name, conv)})")
        pieces.append(literal)
        pieces.append((name, conv))
        params.append((name, conv))
        pos = match.end()
    tail = template[pos:]
    if "{" in tail or "}" in tail:
        raise ValueError(f"malformed parameter in route path {template!r}")
    regex.append(re.escape(tail))
    pieces.append(tail)
    return _PathEntry(template, "".join(regex), params, pieces)


class RouteTable:
    """The compiled routes of an App."""

    def __init__(self, convertors: Mapping[str, Convertor] | None = None) -> None:
        self.convertors: dict[str, Convertor] = dict(DEFAULT_CONVERTORS)
        if convertors:
            self.convertors.update(convertors)
        self._static: dict[str, _PathEntry] = {}
        self._dynamic: list[_PathEntry] = []
        self._by_template: dict[str, _PathEntry] = {}
        self._by_regex: dict[str, list[_PathEntry]] = {}  # templates that match the same paths
        self._names: dict[str, _PathEntry] = {}
        self._explicit_names: set[str] = set()
        self._pattern: re.Pattern[str] | None = None
        self._group_entry: dict[int, _PathEntry] = {}

    def add(self, route: Route) -> None:
        """Compile ``route`` into the table.

        Raises ValueError when the method is already registered for the path, or
        when an explicit name is taken. Without a name, a route is named after its
        handler; such implicit names may repeat (``url_for`` takes the first).
        """
        entry = _compile(route.path, self.convertors)
        if not entry.params:
            entry = self._static.setdefault(route.path, entry)
        else:
            # Same regex and same converters, other names: the later route could never be reached.
            converters = [conv for _, conv in entry.params]
            for twin in self._by_regex.get(entry.regex, ()):
                same_converters = [conv for _, conv in twin.params] == converters
                if twin.template != route.path and same_converters and route.method in twin.methods:
                    raise ValueError(
                        f"route '{route.path}' is already registered for {route.method} as '{twin.template}'"
                    )
            existing = self._by_template.get(route.path)
            if existing is None:
                self._by_regex.setdefault(entry.regex, []).append(entry)
                self._by_template[route.path] = entry
                self._dynamic.append(entry)
                self._pattern = None
            else:
                entry = existing
        entry.add(route)
        name = route.name or getattr(route.handler, "__name__", None)
        if name is None:
            return
        taken = self._names.get(name)
        explicit = route.name is not None
        if taken is not None and taken is not entry and explicit:
            if name in self._explicit_names:
                raise ValueError(f"route name {name!r} is already used by '{taken.template}'")
            taken = None  # an explicit name outranks a handler's name
        if taken is None:
            self._names[name] = entry
        if explicit:
            self._explicit_names.add(name)

    def routes(self) -> list[Route]:
        entries = list(self._static.values()) + self._dynamic
        return [route for entry in entries for route in entry.methods.values()]

    def preflight_middleware(self) -> dict[str, tuple[Middleware, ...]]:
        """Path template → the preflight middleware of its routes (each once), for the paths that have some."""
        found: dict[str, tuple[Middleware, ...]] = {}
        for entry in (*self._static.values(), *self._dynamic):
            middleware: list[Middleware] = []
            for route in entry.methods.values():
                for one in route.middleware:
                    if getattr(one, PREFLIGHT_MIDDLEWARE, False) and not any(one is seen for seen in middleware):
                        middleware.append(one)
            if middleware:
                found[entry.template] = tuple(middleware)
        return found

    def set_preflights(self, make: Callable[[str, tuple[Middleware, ...]], Route]) -> None:
        """Give each path whose routes have preflight middleware the route ``make(template,
        middleware)`` that answers its OPTIONS requests (those no route handles)."""
        found = self.preflight_middleware()
        for entry in (*self._static.values(), *self._dynamic):
            middleware = found.get(entry.template)
            entry.preflight = make(entry.template, middleware) if middleware else None

    def static_routes(self) -> dict[str, dict[str, Route]]:
        """Path → method → route, for the paths without parameters."""
        return {path: dict(entry.methods) for path, entry in self._static.items()}

    def _compile_pattern(self) -> re.Pattern[str]:
        alternatives = []
        group = 1
        self._group_entry = {}
        for entry in self._dynamic:
            alternatives.append(f"({entry.regex})")
            self._group_entry[group] = entry
            group += 1 + len(entry.params)
        self._pattern = re.compile("|".join(alternatives) or "(?!)")
        return self._pattern

    def _match(self, path: str) -> tuple[_PathEntry, dict[str, Any]] | None:
        pattern = self._pattern or self._compile_pattern()
        match = pattern.fullmatch(path)
        if match is None:
            return None
        index = match.lastindex or 0
        entry = self._group_entry[index]
        count = len(entry.params)
        texts = (match.group(index + 1),) if count == 1 else match.group(*range(index + 1, index + 1 + count))
        try:
            return entry, entry.convert(texts)
        except ValueError:
            # A converter refused the text: a later template may still take it.
            return self._scan(path, after=entry)

    def _scan(self, path: str, after: _PathEntry) -> tuple[_PathEntry, dict[str, Any]] | None:
        """Test the templates after ``after`` one by one (the slow path)."""
        later = self._dynamic[self._dynamic.index(after) + 1 :]
        for entry in later:
            match = re.fullmatch(entry.regex, path)
            if match is None:
                continue
            try:
                return entry, entry.convert(match.groups())
            except ValueError:
                continue
        return None

    def resolve(self, method: str, path: str) -> tuple[Route | None, Mapping[str, Any], frozenset[str]]:
        """Find the route for ``method`` and ``path``.

        Returns ``(route, path_params, allow)``; ``route`` is None for an OPTIONS
        request the path has no handler for (answer with ``allow``). Raises
        HTTPNotFound or HTTPMethodNotAllowed.
        """
        entry = self._static.get(path)
        if entry is not None:
            route = entry.methods.get(method)
            if route is not None:
                return route, _NO_PARAMS, entry.allow
            params: Mapping[str, Any] = _NO_PARAMS
        else:
            found = self._match(path)
            if found is None:
                raise HTTPNotFound(f"no route for {path}")
            entry, params = found
            route = entry.methods.get(method)
            if route is not None:
                return route, params, entry.allow
        return self._resolve_other_method(method, path, entry, params)

    def _resolve_other_method(
        self, method: str, path: str, entry: _PathEntry, params: Mapping[str, Any]
    ) -> tuple[Route | None, Mapping[str, Any], frozenset[str]]:
        # Slow path: HEAD, OPTIONS, or another template that also matches this path.
        allow = set(entry.allow)
        get_route = (entry.methods["GET"], params) if "GET" in entry.methods else None
        for other in self._dynamic:
            if other is entry:
                continue
            match = re.fullmatch(other.regex, path)
            if match is None:
                continue
            try:
                other_params = other.convert(match.groups())
            except ValueError:
                continue
            if method in other.methods:
                return other.methods[method], other_params, frozenset(allow | other.allow)
            if get_route is None and "GET" in other.methods:
                get_route = (other.methods["GET"], other_params)
            allow |= other.allow
        if method == "HEAD" and get_route is not None:
            return get_route[0], get_route[1], frozenset(allow)
        if method == "OPTIONS":
            return entry.preflight, params, frozenset(allow)
        raise HTTPMethodNotAllowed(allow, f"method {method} is not allowed for {path}")

    def url_for(self, name: str, /, **params: Any) -> str:
        """The path of the route named ``name``, its parameters filled in."""
        try:
            entry = self._names[name]
        except KeyError:
            raise NoMatchFound(f"no route named {name!r}") from None
        expected = {param for param, _ in entry.params}
        if set(params) != expected:
            raise NoMatchFound(
                f"route {name!r} ('{entry.template}') takes parameters {sorted(expected)}, got {sorted(params)}"
            )
        out = []
        for piece in entry.pieces:
            if isinstance(piece, str):
                out.append(piece)
            else:
                param, conv = piece
                text = conv.to_string(params[param])
                out.append(quote(text, safe="/" if conv.regex == ".*" else ""))
        return "".join(out)

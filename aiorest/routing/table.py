"""The compiled route table.

Static paths resolve with one dict lookup. Dynamic paths are compiled into one
combined regular expression (one alternative per path template, bottle style),
so a request never tests routes one by one on the hot path. Methods are grouped
per path, so a 405 can list every method the path has in ``Allow``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any
from urllib.parse import quote

from ..http.exceptions import HTTPError, HTTPMethodNotAllowed, HTTPNotFound
from .convertors import DEFAULT_CONVERTORS, Convertor
from .paths import PathTemplate, compile_path
from .route import PREFLIGHT_MIDDLEWARE, Middleware, NoMatchFound, Route

__all__ = ["RouteTable"]

_NO_PARAMS: Mapping[str, Any] = MappingProxyType({})  # shared by every static route: read-only


@dataclass(slots=True)
class PathEntry(PathTemplate):
    """Every route of one path template, by method."""

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


class RouteTable:
    """The compiled routes of an App."""

    def __init__(self, convertors: Mapping[str, Convertor] | None = None) -> None:
        self.convertors: dict[str, Convertor] = dict(DEFAULT_CONVERTORS)
        if convertors:
            self.convertors.update(convertors)
        self._static: dict[str, PathEntry] = {}
        self._dynamic: list[PathEntry] = []
        self._by_template: dict[str, PathEntry] = {}
        self._by_regex: dict[str, list[PathEntry]] = {}  # templates that match the same paths
        self._names: dict[str, PathEntry] = {}
        self._explicit_names: set[str] = set()
        self._pattern: re.Pattern[str] | None = None
        self._group_entry: dict[int, PathEntry] = {}
        self._own_body_limits = False  # a route has its own max_body_size: body_limit must look

    def add(self, route: Route) -> None:
        """Compile ``route`` into the table.

        Raises ValueError when the method is already registered for the path, or
        when an explicit name is taken. Without a name, a route is named after its
        handler; such implicit names may repeat (``url_for`` takes the first).
        """
        entry = compile_path(route.path, self.convertors, PathEntry)
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
        if route.max_body_size is not None:
            self._own_body_limits = True
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

    def template(self, path: str) -> PathTemplate:
        """The compiled template of the registered route path ``path`` (its parameters, its OpenAPI form)."""
        entry = self._static.get(path) or self._by_template.get(path)
        if entry is None:
            raise KeyError(f"no route is registered for the path {path!r}")
        return entry

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

    def _match(self, path: str) -> tuple[PathEntry, dict[str, Any]] | None:
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

    def _scan(self, path: str, after: PathEntry) -> tuple[PathEntry, dict[str, Any]] | None:
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

    def body_limit(self, method: str, path: str) -> int | None:
        """The ``max_body_size`` of the route for ``method path``, if it has one of its own;
        no lookup at all while no route has one (the server asks for every request with a body)."""
        if not self._own_body_limits:
            return None
        try:
            route = self.resolve(method, path)[0]
        except HTTPError:
            return None
        return None if route is None else route.max_body_size

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
        self, method: str, path: str, entry: PathEntry, params: Mapping[str, Any]
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

"""Cross-origin resource sharing (CORS, the fetch standard's "CORS protocol") as middleware.

A browser sends ``Origin`` on a cross-origin request and reads the answer only if
``Access-Control-Allow-Origin`` names that origin (or is ``*`` without credentials).
Before a request that is not "simple" it sends a *preflight*: ``OPTIONS`` with
``Access-Control-Request-Method`` (and ``-Headers``), which :class:`CORS` answers
itself, without running the handler.

A CORS middleware on a route or a Router answers the preflights of its path too:
the App runs such middleware (they carry ``__aiorest_preflight__``) around its
automatic answer to ``OPTIONS`` (see ``App.startup``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from ..http.datastructures import _TCHAR, Headers, check_header_value
from ..http.exceptions import HTTPBadRequest, HTTPError, HTTPForbidden
from ..http.response import Response, add_vary

if TYPE_CHECKING:
    from ..http.request import Request
    from ..routing.route import Handler

__all__ = ["CORS"]

#: Client-controlled values are bounded: an origin is a scheme, a host (at most 253
#: characters) and a port; a preflight names at most so many headers.
MAX_ORIGIN = 512
_ANSWERS = 256  # allowed origins whose answer fields a CORS keeps made (any origin, or a regex, allows more)
MAX_REQUEST_HEADERS = 64
MAX_REQUEST_HEADERS_LENGTH = 4096

# A serialised origin (RFC 6454, 6.2): scheme "://" host [":" port], no path, no userinfo.
_ORIGIN = re.compile(r"[a-z][a-z0-9+.-]*://(?:[a-z0-9._~!$&'()*+,;=%-]+|\[[0-9a-f:.]+\])(?::[0-9]{1,5})?", re.I)
# The headers of an actual request's answer: the middleware's, never the handler's.
_ANSWER_NAMES = frozenset(
    {"access-control-allow-origin", "access-control-allow-credentials", "access-control-expose-headers"}
)
# Methods the fetch standard normalises to upper case; others are case-sensitive.
_NORMALISED = frozenset({"DELETE", "GET", "HEAD", "OPTIONS", "POST", "PUT"})
# The preflight's answer depends on these request headers.
_PREFLIGHT_VARY = "Origin, Access-Control-Request-Method, Access-Control-Request-Headers"


class CORS:
    """Middleware that answers cross-origin requests as the fetch standard expects.

    ``allow_origins``: the origins allowed, as a browser sends them
    (``"https://app.example.com"``, ``"http://localhost:8080"``), or ``"*"`` for any.
    ``allow_origin_regex``: origins matching this regular expression (in full) are
    allowed too. ``allow_methods``: the methods a preflight may ask for, or ``"*"``.
    ``allow_headers``: the request headers a preflight may ask for (any case); ``"*"``
    in the list allows any but ``Authorization``, which must be listed itself.
    ``expose_headers``: response headers the page's script may read.
    ``allow_credentials``: the browser may send cookies and HTTP authentication, and
    the page may read the answer; with ``"*"`` the request's origin is echoed (with
    ``Vary: Origin``), never ``*``. ``max_age``: seconds a browser may keep a
    preflight's answer (None: no ``Access-Control-Max-Age``).

    Every value is checked here: a malformed origin (a trailing ``/``, a path) or
    header name raises ValueError.
    """

    #: The App runs this middleware around its automatic answer to OPTIONS when it is
    #: a route's or a Router's, so that it answers the preflights of its path.
    __aiorest_preflight__ = True

    def __init__(
        self,
        allow_origins: Sequence[str] | Literal["*"] = (),
        *,
        allow_origin_regex: str | None = None,
        allow_methods: Sequence[str] | Literal["*"] = ("GET", "HEAD", "POST"),
        allow_headers: Sequence[str] = (),
        expose_headers: Sequence[str] = (),
        allow_credentials: bool = False,
        max_age: int | None = 600,
    ) -> None:
        self.any_origin = allow_origins == "*"
        self.origins = frozenset() if self.any_origin else frozenset(_origins(allow_origins))
        self.origin_regex = re.compile(allow_origin_regex) if allow_origin_regex is not None else None
        self.any_method = allow_methods == "*"
        self.methods = frozenset() if self.any_method else frozenset(_method(m) for m in _strings(allow_methods))
        headers = [_token(name, "allow_headers").lower() for name in _strings(allow_headers) if name != "*"]
        self.any_header = "*" in allow_headers
        self.headers = frozenset(headers)
        if not isinstance(allow_credentials, bool):
            raise TypeError(f"allow_credentials must be a bool, not {type(allow_credentials).__name__}")
        self.credentials = allow_credentials
        if max_age is not None and (type(max_age) is not int or max_age < 0):
            raise ValueError(f"max_age must be an int >= 0 or None, not {max_age!r}")
        # The answer names the origin unless any origin is allowed without credentials.
        self.varies = not (self.any_origin and not allow_credentials)
        # the headers every allowed answer carries, checked once here
        common: dict[str, str] = {}
        if allow_credentials:
            common["Access-Control-Allow-Credentials"] = "true"
        self._actual = dict(common)
        exposed = ", ".join(_token(name, "expose_headers") for name in _strings(expose_headers))
        if exposed:
            self._actual["Access-Control-Expose-Headers"] = exposed
        self._preflight = dict(common)
        if not self.any_method:
            self._preflight["Access-Control-Allow-Methods"] = ", ".join(sorted(self.methods))
        if max_age is not None:
            self._preflight["Access-Control-Max-Age"] = str(max_age)
        for value in (*self._actual.values(), *self._preflight.values()):
            check_header_value(value, "CORS header value")
        # The same as Headers, for the answers to actual requests: appended as they are.
        self._actual_headers = Headers(self._actual)
        # What an answer with no fields of its own gets, made once: Vary alone (no Origin, or one not allowed),
        # and for each allowed origin (at most _ANSWERS of them kept) every field of an allowed answer.
        self._vary_only = Headers({"Vary": "Origin"}) if self.varies else Headers()
        self._answers: dict[str, Headers] = {}

    def allows_origin(self, origin: str) -> bool:
        """Whether a request from ``origin`` (its ``Origin`` header) may be read."""
        if len(origin) > MAX_ORIGIN or _ORIGIN.fullmatch(origin) is None:
            return False  # "null" (sandboxes, file:, redirects) among them: never allowed
        if self.any_origin or origin in self.origins:
            return True
        return self.origin_regex is not None and self.origin_regex.fullmatch(origin) is not None

    async def __call__(self, request: Request, handler: Handler) -> Response:
        # One header at a time: a simple request does not pay for the whole Headers table.
        origin = request.header(b"origin")
        if origin is None:  # not a cross-origin request (or a client that is no browser)
            response: Response = await handler(request)
            headers = response.headers
            if headers:
                return self._vary(response)
            headers.extend(self._vary_only)
            return response
        if request.method == "OPTIONS" and request.header(b"access-control-request-method") is not None:
            return self._answer_preflight(request, origin)
        allowed = self.allows_origin(origin)
        try:
            response = await handler(request)
        except HTTPError as exc:  # its response is built outside the middleware
            if allowed:
                exc.headers.update(self._allowed(origin))
            if self.varies:
                add_vary(exc.headers, "Origin")
            raise
        headers = response.headers
        if not headers:  # the usual answer: none of its own, all of them made already
            headers.extend(self._answer_for(origin) if allowed else self._vary_only)
            return response
        if allowed:
            headers.discard(_ANSWER_NAMES)  # the handler's own CORS headers give way
            headers.add("Access-Control-Allow-Origin", origin if self.varies else "*")
            headers.extend(self._actual_headers)
        return self._vary(response)

    def _answer_preflight(self, request: Request, origin: str) -> Response:
        """204 with what the preflight asked for, or a 400/403 without CORS headers."""
        method = request.headers["Access-Control-Request-Method"]
        if not method or not _TCHAR.issuperset(method):
            raise HTTPBadRequest(f"malformed Access-Control-Request-Method {method[:64]!r}")
        asked = _request_headers(request.headers.getall("Access-Control-Request-Headers"))
        if len(origin) > MAX_ORIGIN:
            raise HTTPBadRequest(f"the Origin header is longer than {MAX_ORIGIN} characters")
        if not self.allows_origin(origin):
            raise HTTPForbidden(f"CORS: origin {origin!r} is not allowed")
        if method.upper() in _NORMALISED:
            method = method.upper()
        if not self.any_method and method not in self.methods:
            raise HTTPForbidden(f"CORS: method {method} is not allowed", details={"allowed": sorted(self.methods)})
        refused = [name for name in asked if not self._allows_header(name)]
        if refused:
            raise HTTPForbidden(f"CORS: request headers {', '.join(refused)} are not allowed", details=refused)
        headers = {"Access-Control-Allow-Origin": origin if self.varies else "*", **self._preflight}
        headers["Vary"] = _PREFLIGHT_VARY
        if self.any_method:
            headers["Access-Control-Allow-Methods"] = method
        if asked:
            headers["Access-Control-Allow-Headers"] = ", ".join(asked)
        return Response(status=204, headers=headers)

    def _allows_header(self, name: str) -> bool:
        return name in self.headers or (self.any_header and name != "authorization")

    def _answer_for(self, origin: str) -> Headers:
        """Every field of an allowed answer to ``origin`` that has none of its own."""
        answer = self._answers.get(origin)
        if answer is None:
            answer = Headers(self._allowed(origin))
            answer.extend(self._vary_only)
            if len(self._answers) < _ANSWERS:
                self._answers[origin] = answer
        return answer

    def _allowed(self, origin: str) -> dict[str, str]:
        """The headers of an allowed actual request's answer."""
        return {"Access-Control-Allow-Origin": origin if self.varies else "*", **self._actual}

    def _vary(self, response: Response) -> Response:
        # A cache must not give this answer without CORS headers to a cross-origin request.
        if self.varies:
            add_vary(response.headers, "Origin")
        return response

    def __repr__(self) -> str:
        origins = "*" if self.any_origin else sorted(self.origins)
        return f"CORS(allow_origins={origins!r}, allow_credentials={self.credentials})"


def _strings(values: Sequence[str] | str) -> Sequence[str]:
    if isinstance(values, str) or not all(isinstance(value, str) for value in values):
        raise TypeError(f"expected a list of str, not {values!r}")
    return values


def _origins(origins: Sequence[str]) -> list[str]:
    checked = []
    for origin in _strings(origins):
        if _ORIGIN.fullmatch(origin) is None:
            hint = " (no trailing '/' nor path: an origin is scheme://host[:port])" if "/" in origin[8:] else ""
            raise ValueError(f"allow_origins: {origin!r} is not an origin{hint}")
        scheme, _, host = origin.partition("://")
        checked.append(f"{scheme.lower()}://{host.lower()}")  # browsers send them in lower case
    return checked


def _token(name: str, what: str) -> str:
    if not name or not _TCHAR.issuperset(name):
        raise ValueError(f"{what}: {name!r} is not a header name")
    return name


def _method(method: str) -> str:
    _token(method, "allow_methods")
    return method.upper() if method.upper() in _NORMALISED else method


def _request_headers(values: list[str]) -> list[str]:
    """The names in ``Access-Control-Request-Headers``, lower case; 400 if malformed or too many."""
    if sum(len(value) for value in values) > MAX_REQUEST_HEADERS_LENGTH:
        raise HTTPBadRequest(f"Access-Control-Request-Headers is longer than {MAX_REQUEST_HEADERS_LENGTH} characters")
    names = [name.strip().lower() for value in values for name in value.split(",") if name.strip()]
    if len(names) > MAX_REQUEST_HEADERS:
        raise HTTPBadRequest(f"Access-Control-Request-Headers names more than {MAX_REQUEST_HEADERS} headers")
    for name in names:
        if not _TCHAR.issuperset(name):
            raise HTTPBadRequest(f"malformed Access-Control-Request-Headers: {name[:64]!r}")
    return list(dict.fromkeys(names))

"""The request handed to handlers.

Headers, query and cookies stay as the parser delivered them until a handler
asks: a handler that never touches them does not pay for decoding them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any
from urllib.parse import parse_qsl

from .background import RequestTasks
from .body import IncomingBody
from .cookies import parse_cookie
from .datastructures import Headers, MultiDict, State, header_key, raw_header, raw_header_values
from .forwarded import Forwarded, TrustedProxies, resolve_forwarded, valid_host
from .interfaces import AppInterface, BodySource, RouteMatch, SessionData
from .reading import RequestBody
from .requestid import RequestId, format_request_id

__all__ = ["Request", "RouteMatch", "AppInterface", "BodySource", "SessionData"]


@functools.lru_cache(maxsize=256)  # a line at most the head's size limit: a few MB at worst
def _cookie_line(line: bytes) -> dict[str, str]:
    """A ``Cookie`` line parsed, shared by the requests that send it: copied before it is handed out."""
    return parse_cookie(line.decode("latin-1"))


class Request(RequestBody):
    """One HTTP request: its head, converted path parameters and a streamed body."""

    # Rarely set attributes live on the class: creating a request sets eight, not twenty-five (0.1 µs a request).
    path_params: Mapping[str, Any] = MappingProxyType({})
    keep_alive = True
    #: The request's id as the server keeps it (see :attr:`id`, its text), set before the handler runs: the
    #: number of this process's counter (an int), or the ``X-Request-ID`` bytes a trusted proxy sent.
    raw_id: RequestId = b"-"
    #: The W3C trace id (32 hex digits) of the request's span, when tracing is on (:doc:`tracing`); else None.
    trace_id: str | None = None
    #: What routing found (set by the app); None on the server's static fast path.
    match: RouteMatch | None = None
    #: The route's own ``max_body_size``, when it has one (set by the server from the head); None: the server's.
    body_limit: int | None = None
    _headers: Headers | None = None
    _query: MultiDict[str] | None = None
    _cookies: dict[str, str] | None = None
    _state: State | None = None
    # The class's values describe the server's common request, which it makes without calling __init__
    # (see _h1/reader.py): no body, HTTP/1.1 kept alive, no Expect. __init__ sets both for every other request.
    _incoming: IncomingBody | None = None  # the body to come (body.py); None: none
    _plain = True  # whether the server may answer it the short way (driving.py)
    _forwarded: Forwarded | None = None
    # set by SessionMiddleware (attach_session): opens the session on first access
    _session_opener: Callable[[Request], SessionData] | None = None
    _session: SessionData | None = None

    def __init__(
        self,
        method: str,
        path: str,
        raw_path: bytes,
        query_string: str,
        http_version: str,
        raw_headers: list[tuple[bytes, bytes]],
        app: AppInterface,
        protocol: BodySource | None = None,
        *,
        keep_alive: bool = True,
        expect_continue: bool = False,
    ) -> None:
        """A request as the server makes it from a head; its body comes through ``protocol``.

        ``keep_alive``: whether the connection may stay open after it; ``expect_continue``:
        the client sent ``Expect: 100-continue`` and waits for ``100 Continue`` before its body.
        """
        # HeadReader.on_headers_complete sets these same eight itself (a test checks it).
        self.method = method
        self.path = path
        self.raw_path = raw_path
        self.query_string = query_string
        self.http_version = http_version
        self.app = app
        #: The header lines as the parser gave them: ``(name, value)`` bytes, names as the client wrote them.
        self.raw_headers = raw_headers
        #: The connection the request came on (its peer, its transport, the source of its body); None once it is gone.
        self.protocol = protocol
        self._incoming = IncomingBody(expect_continue)
        self._plain = keep_alive and http_version == "1.1" and not expect_continue and method != "HEAD"
        if not keep_alive:
            self.keep_alive = False

    # -- head ---------------------------------------------------------------

    @property
    def headers(self) -> Headers:
        """Request headers, case-insensitive and multi-valued."""
        if self._headers is None:
            self._headers = Headers.from_raw(self.raw_headers)
        return self._headers

    def header(self, name: str | bytes) -> str | None:
        """The first value of header ``name`` (any case, ``"User-Agent"`` or ``b"user-agent"``); None when absent.

        One pass over the header lines as the parser gave them, without building
        :attr:`headers`: what middleware uses to read a header or two.
        """
        value = raw_header(self.raw_headers, header_key(name))
        return None if value is None else value.decode("latin-1")

    def header_values(self, name: str | bytes) -> list[str]:
        """Every value of header ``name`` (any case), in order; ``[]`` when absent. Like :meth:`header`."""
        return [value.decode("latin-1") for value in raw_header_values(self.raw_headers, header_key(name))]

    @property
    def query(self) -> MultiDict[str]:
        """Query parameters, percent-decoded, repeated keys kept (``getall``)."""
        if self._query is None:
            self._query = MultiDict(parse_qsl(self.query_string, keep_blank_values=True))
        return self._query

    @property
    def cookies(self) -> dict[str, str]:
        """Cookies sent in ``Cookie`` headers."""
        if self._cookies is None:
            lines = raw_header_values(self.raw_headers, b"cookie")  # no Headers table made for them
            if len(lines) == 1:  # the usual request: a client sends the same line again and again
                self._cookies = dict(_cookie_line(lines[0]))
                return self._cookies
            cookies: dict[str, str] = {}
            for header in lines:
                for key, value in _cookie_line(header).items():
                    cookies.setdefault(key, value)
            self._cookies = cookies
        return self._cookies

    @property
    def state(self) -> State:
        """Per-request state for middleware and handlers to share."""
        if self._state is None:
            self._state = State()
        return self._state

    @property
    def session(self) -> SessionData:
        """The session (see :doc:`sessions`): a mapping of JSON values kept across requests.

        Needs :class:`SessionMiddleware` around the route; a cookie store decodes
        its cookie on first access, so a handler that never looks pays nothing.
        """
        session = self._session
        if session is None:
            opener = self._session_opener
            if opener is None:
                raise RuntimeError(
                    "request.session needs SessionMiddleware around this route: add SessionMiddleware("
                    "CookieSessionStore(secrets=[...])) to App(middleware=[...]), to a Router's or to the route's"
                    " middleware=[...]"
                )
            session = self._session = opener(self)
        return session

    def attach_session(self, opener: Callable[[Request], SessionData]) -> bool:
        """Let :attr:`session` open the session with ``opener(request)`` on first access.

        For session middleware: False, and nothing changes, when another one
        (an outer one) already attached a session to this request.
        """
        if self._session_opener is not None:
            return False
        self._session_opener = opener
        return True

    def open_session(self, session: SessionData) -> None:
        """Set the session that :attr:`session` gives, already loaded (a middleware's eager store)."""
        self._session = session

    @property
    def opened_session(self) -> SessionData | None:
        """The session, if anything opened it; None if no one looked (nothing to save)."""
        return self._session

    @property
    def last_event_id(self) -> str | None:
        """The ``Last-Event-ID`` an event stream's client sends when it reconnects (UTF-8), None if none:
        the ``id`` of the last :class:`ServerSentEvent` it received (see :doc:`sse`)."""
        value = raw_header(self.raw_headers, b"last-event-id")
        return None if value is None else value.decode("utf-8", "replace")

    @property
    def client(self) -> tuple[str, int] | None:
        """The client's ``(address, port)``: the peer's, or the one a trusted proxy forwarded.

        From a peer listed in ``forwarded_allow_ips``, the client ``X-Forwarded-For`` or ``Forwarded`` names
        (port 0 when not given); else the socket's peer. None for a unix socket's peer, and once the connection is gone.
        """
        protocol = self.protocol
        if protocol is None:
            return None
        if protocol.trusted_proxies is not None:
            client = self._forwarded_by(protocol.trusted_proxies).client
            if client is not None:
                return client
        peer = protocol.peername
        if not isinstance(peer, tuple):  # a unix socket's peer name is '' or a path
            return None
        return peer[0], peer[1]  # IPv6 gives (host, port, flowinfo, scope_id)

    @property
    def scheme(self) -> str:
        """``"http"``, or ``"https"`` when a trusted proxy says the client used it
        (``X-Forwarded-Proto`` or ``Forwarded: proto=``)."""
        protocol = self.protocol
        if protocol is not None and protocol.trusted_proxies is not None:
            return self._forwarded_by(protocol.trusted_proxies).scheme or "http"
        return "http"

    @property
    def host(self) -> str:
        """The host the client asked for, ``name[:port]``: from a trusted proxy
        (``X-Forwarded-Host`` or ``Forwarded: host=``), else the ``Host`` header,
        else the address the connection arrived on. Only a valid host is taken."""
        protocol = self.protocol
        if protocol is not None and protocol.trusted_proxies is not None:
            host = self._forwarded_by(protocol.trusted_proxies).host
            if host is not None:
                return host
        host = valid_host(self.headers.get("host", ""))
        if host is not None:
            return host
        local = protocol.transport.get_extra_info("sockname") if protocol and protocol.transport else None
        if isinstance(local, tuple):
            return f"[{local[0]}]:{local[1]}" if ":" in local[0] else f"{local[0]}:{local[1]}"
        return "localhost"  # a unix socket

    @property
    def url(self) -> str:
        """The absolute URL of the request: ``scheme://host/path?query``, as the client asked for it."""
        target = self.raw_path.decode("latin-1")
        if self.query_string:
            target = f"{target}?{self.query_string}"
        return f"{self.scheme}://{self.host}{target}"

    @property
    def id(self) -> str:
        """The request's id, sent back in ``X-Request-ID`` and on every log record written
        while it is handled (``aiorest.request_id()``): the one a trusted proxy sent, or a new one."""
        return format_request_id(self.raw_id)

    @property
    def background(self) -> RequestTasks:
        """Calls to run once the response is out: ``request.background.add(func, *args)`` (:doc:`background`)."""
        return self.app.background.for_request(self)

    def _forwarded_by(self, proxies: TrustedProxies) -> Forwarded:
        if self._forwarded is None:
            self._forwarded = resolve_forwarded(self.raw_headers, proxies)
        return self._forwarded

    @property
    def route_template(self) -> str | None:
        """The path template of the route that matched (``"/notes/{note_id:int}"``); None if none did.

        A bounded label for logs and metrics, unlike the raw path.
        """
        template = None if self.match is None else self.match.template
        if template is None and self.app.has_static_route(self.path):
            return self.path  # a route without parameters: its template is its path
        return template

    def url_for(self, name: str, /, *, _external: bool = False, **params: Any) -> str:
        """The path of a named route (see ``App.url_for``); with ``_external=True`` an absolute
        URL, on the scheme and host of this request (:attr:`scheme`, :attr:`host`)."""
        path = self.app.url_for(name, **params)
        if _external:
            return f"{self.scheme}://{self.host}{path}"
        return path

    def __repr__(self) -> str:
        return f"<Request {self.method} {self.path}>"

"""What a request needs of the objects around it, as interfaces: the app (``request.app``),
the connection it came on (its body's source), routing's result, the session.

Declared here, below the request, so that the request depends on nothing above it:
the app, the server and the session middleware provide them.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import MutableMapping
from typing import Any, NamedTuple, Protocol

from .background import BackgroundTasks
from .datastructures import State
from .exceptions import HTTPError
from .forwarded import TrustedProxies
from .jsoncodec import JSONCodec
from .limits import Limits
from .uploads import Uploads

__all__ = ["AppInterface", "BodySource", "RouteMatch", "SessionData"]


class AppInterface(Protocol):
    """The app as ``request.app`` shows it to a handler: an :class:`App`.

    Typed by what a request needs of it, so that the request does not depend on
    the app's module (the app sits above it).
    """

    state: State
    json: JSONCodec
    limits: Limits | None  # App(limits=...), when given
    uploads: Uploads  # the limits of forms, where their files spill
    background: BackgroundTasks  # the process's background tasks (docs/background.rst)

    def url_for(self, name: str, /, **params: Any) -> str: ...

    def has_static_route(self, path: str) -> bool:
        """Whether a route without parameters has the path ``path``."""
        ...

    def body_limit(self, method: str, path: str) -> int | None:
        """The route's own ``max_body_size`` for ``method path``, if it has one (None: the server's)."""
        ...


class SessionData(MutableMapping[str, Any]):
    """What :attr:`aiorest.Request.session` gives: the base of the session middleware's
    :class:`~aiorest.middleware.sessions.Session`, here so that the request needs nothing above it."""

    id: str

    @abstractmethod
    def rotate(self) -> None:
        """A new id, the data kept (at login)."""

    @abstractmethod
    def invalidate(self) -> None:
        """The data dropped and the cookie expired (at logout)."""


class BodySource(Protocol):
    """What the connection gives a request: the peer, and a way to pull body bytes."""

    peername: Any
    transport: Any
    trusted_proxies: TrustedProxies | None  # the server's, when the peer is one of them

    def body_consumed(self, size: int) -> None:
        """A handler took ``size`` bytes out of the request's buffer (flow control)."""

    def buffer_whole_body(self) -> bool:
        """Read the body arriving whole before a handler takes any (``body_buffer`` no longer stops reading);
        False, and nothing changes, for a body its route lets grow past what the server buffers whole."""

    def send_continue(self) -> None:
        """Send ``100 Continue`` to a client that asked for it."""


class RouteMatch(NamedTuple):
    """What routing found for a request (:attr:`aiorest.Request.match`), set by the app before the
    request goes through middleware: the matched route's path template, the methods its
    path allows (for an ``OPTIONS`` answer), or the routing error (404, 405) to raise."""

    template: str | None
    allow: frozenset[str] = frozenset()
    error: HTTPError | None = None

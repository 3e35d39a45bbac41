"""Authorization, and the middleware that asks who sent a request: what they may do.

Two small pluggable policies, put on routes by the :class:`Auth` middleware:

* an *identity policy* answers "who is this?" (:mod:`.identities`:
  :class:`~aiorest.security.BearerTokenIdentity` reads ``Authorization: Bearer <token>``
  and asks the app's lookup);
* an *authorization policy* answers "may they do this?"
  (:class:`PermissionsPolicy` reads the identity's set of permissions).

:func:`login_required` and :func:`requires` go under the route decorator and
refuse with 401 or 403. Nothing of this costs a request that does not pass
through :class:`Auth`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from ..http.exceptions import HTTPForbidden, HTTPUnauthorized
from ..routing.metadata import mark_secured, raises
from ..routing.route import HANDLER_MIDDLEWARE

if TYPE_CHECKING:
    from ..http.request import Request
    from ..http.response import Response
    from ..routing.route import Handler
    from .identities import IdentityPolicy

__all__ = [
    "Auth",
    "AuthorizationPolicy",
    "HasPermissions",
    "PermissionsPolicy",
    "checks_login",
    "identity",
    "login_required",
    "permits",
    "remember_identity",
    "requires",
    "unauthorized",
]

_H = TypeVar("_H", bound=Callable[..., Any])

# The key of the request's state under which Auth leaves its per-request context.
_STATE_KEY = "aiorest.auth"


# -- policies ---------------------------------------------------------------------------


class AuthorizationPolicy(Protocol):
    """Says whether an identity may do something, named by a permission string."""

    async def permits(self, request: Request, identity: Any, permission: str) -> bool: ...


@runtime_checkable
class HasPermissions(Protocol):
    """An identity that carries its permissions, as :class:`PermissionsPolicy` reads them."""

    @property
    def permissions(self) -> AbstractSet[str]: ...


class PermissionsPolicy:
    """Permits what is in the identity's ``permissions`` set; nothing to any other identity."""

    async def permits(self, request: Request, identity: Any, permission: str) -> bool:
        return isinstance(identity, HasPermissions) and permission in identity.permissions


# -- the middleware and the accessors ---------------------------------------------------


class _Context:
    """What Auth leaves on one request: its policies, and the identity once asked for.

    It holds no reference to the request, so that it makes no cycle with it.
    """

    __slots__ = ("auth", "resolved", "value")

    def __init__(self, auth: Auth) -> None:
        self.auth = auth
        self.resolved = False
        self.value: Any | None = None

    async def identity(self, request: Request) -> Any | None:
        if not self.resolved:
            self.value = await self.auth.identity.identify(request)
            self.resolved = True
        return self.value

    def unauthorized(self, request: Request, message: str = "authentication required") -> HTTPUnauthorized:
        error = HTTPUnauthorized(message)
        challenge = self.auth.identity.challenge(request)
        if challenge is not None:
            error.headers["WWW-Authenticate"] = challenge
        return error


class Auth:
    """Middleware that makes the request's identity available to what runs inside it.

    Put it on the app, a :class:`~aiorest.Router` or a route. It does no work
    by itself: the identity policy runs the first time :func:`identity`,
    :func:`permits`, :func:`login_required` or :func:`requires` asks, and only
    once a request. ``authorization`` defaults to :class:`PermissionsPolicy`.
    """

    def __init__(self, identity: IdentityPolicy, authorization: AuthorizationPolicy | None = None) -> None:
        self.identity = identity
        self.authorization: AuthorizationPolicy = authorization if authorization is not None else PermissionsPolicy()

    def openapi_security_schemes(self) -> dict[str, dict[str, Any]]:
        """What the OpenAPI document lists as the security of the routes that need a login here:
        the identity policy's ``security_schemes()``, when it has that method."""
        describe = getattr(self.identity, "security_schemes", None)
        return dict(describe()) if describe is not None else {}

    async def __call__(self, request: Request, handler: Handler) -> Response:
        request.state[_STATE_KEY] = _Context(self)
        response: Response = await handler(request)
        return response


def _context(request: Request) -> _Context:
    context = request.state.get(_STATE_KEY)
    if context is None:
        raise RuntimeError(
            f"{request.method} {request.path}: no Auth middleware on this route; "
            "add Auth(...) to the app, its Router or the route"
        )
    assert isinstance(context, _Context)
    return context


def unauthorized(request: Request, message: str = "authentication required") -> HTTPUnauthorized:
    """A 401 to raise, with the ``WWW-Authenticate`` challenge of the identity policy around the route.

    What :func:`login_required` raises; a login route raises it for wrong
    credentials (``unauthorized(request, "wrong username or password")``), so
    that its 401 tells the client the same ways in as every other.
    """
    return _context(request).unauthorized(request, message)


async def identity(request: Request) -> Any | None:
    """The request's identity, or None when anonymous (RuntimeError without :class:`Auth`)."""
    return await _context(request).identity(request)


async def permits(request: Request, permission: str) -> bool:
    """Whether the request's identity has ``permission``; False when anonymous."""
    context = _context(request)
    who = await context.identity(request)
    return who is not None and await context.auth.authorization.permits(request, who, permission)


def _with_middleware(handler: _H, middleware: Callable[[Request, Handler], Awaitable[Response]]) -> _H:
    mark_secured(handler)
    setattr(handler, HANDLER_MIDDLEWARE, [*getattr(handler, HANDLER_MIDDLEWARE, ()), middleware])
    return handler


async def _login_required(request: Request, handler: Handler) -> Response:
    context = _context(request)
    if await context.identity(request) is None:
        raise context.unauthorized(request)
    response: Response = await handler(request)
    return response


def login_required(handler: _H) -> _H:
    """Answer 401 unless the request has an identity. Goes under the route decorator.

    The 401 carries the identity policy's ``WWW-Authenticate`` challenge. The
    handler is returned as it is, with a middleware attached
    (``__aiorest_middleware__``), 401 listed in the OpenAPI document and
    the identity policy's security schemes as the operation's ``security``.
    """
    return _with_middleware(raises(HTTPUnauthorized)(handler), _login_required)


def checks_login(handler: _H) -> _H:
    """A route whose handler checks the login itself. Goes under the route decorator.

    The route is documented as :func:`login_required`'s are (401, the identity
    policy's security schemes), but nothing looks the identity up before the
    handler runs: the handler finds it in its own statement, the credentials
    joined to its query (one round trip instead of two), records it with
    :func:`remember_identity`, and raises :func:`unauthorized` when they do not
    hold, or falls back to :func:`identity` for the requests it does not cover.
    A handler that does neither serves anonymous requests: use it only where
    every path checks.
    """
    mark_secured(handler)
    return raises(HTTPUnauthorized)(handler)


def remember_identity(request: Request, who: Any) -> None:
    """Make ``who`` the request's identity (a :func:`checks_login` handler found it in its own statement):
    :func:`identity` then gives it without asking the identity policy."""
    context = _context(request)
    context.value = who
    context.resolved = True


def requires(*permissions: str) -> Callable[[_H], _H]:
    """Answer 401 when anonymous, 403 unless every permission is granted. Goes under the route decorator."""
    if not permissions or not all(isinstance(p, str) and p for p in permissions):
        raise TypeError(f"requires() takes one or more permission names, not {permissions!r}")

    async def _requires(request: Request, handler: Handler) -> Response:
        context = _context(request)
        who = await context.identity(request)
        if who is None:
            raise context.unauthorized(request)
        for permission in permissions:
            if not await context.auth.authorization.permits(request, who, permission):
                raise HTTPForbidden("not permitted", details={"permission": permission})
        response: Response = await handler(request)
        return response

    def declare(handler: _H) -> _H:
        return _with_middleware(raises(HTTPUnauthorized, HTTPForbidden)(handler), _requires)

    return declare

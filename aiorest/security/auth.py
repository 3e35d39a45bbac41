"""Authentication and authorization: who sent a request, and what they may do.

Two small pluggable policies, put on routes by the :class:`Auth` middleware:

* an *identity policy* answers "who is this?" (:class:`BearerTokenIdentity`
  reads ``Authorization: Bearer <token>`` and asks the app's lookup);
* an *authorization policy* answers "may they do this?"
  (:class:`PermissionsPolicy` reads the identity's set of permissions).

:func:`login_required` and :func:`requires` go under the route decorator and
refuse with 401 or 403. Passwords (argon2id, off the event loop: ``passwords``)
and login rate limiting (``ratelimit``) are imported from here too. Nothing of
this costs a request that does not pass through :class:`Auth`.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Awaitable, Callable
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from ..http.exceptions import HTTPForbidden, HTTPUnauthorized
from ..routing.metadata import mark_secured, raises
from ..routing.route import HANDLER_MIDDLEWARE
from .limitstores import Hit, LimitStore, LimitStoreUnavailable, PostgresLimitStore, RedisLimitStore
from .passwords import Passwords, hash_password, needs_rehash, verify_password
from .ratelimit import LoginAttempt, LoginRateLimiter, RateLimit

if TYPE_CHECKING:
    from ..http.request import Request
    from ..http.response import Response
    from ..routing.route import Handler

__all__ = [
    "AnyIdentity",
    "Auth",
    "AuthorizationPolicy",
    "BearerTokenIdentity",
    "HasPermissions",
    "Hit",
    "IdentityPolicy",
    "LimitStore",
    "LimitStoreUnavailable",
    "LoginAttempt",
    "LoginRateLimiter",
    "Passwords",
    "PermissionsPolicy",
    "PostgresLimitStore",
    "RateLimit",
    "RedisLimitStore",
    "SessionIdentity",
    "bearer_token",
    "hash_password",
    "identity",
    "login_required",
    "needs_rehash",
    "permits",
    "requires",
    "token_hash",
    "tokens_equal",
    "unauthorized",
    "verify_password",
]

_H = TypeVar("_H", bound=Callable[..., Any])

# The key of the request's state under which Auth leaves its per-request context.
_STATE_KEY = "aiorest.auth"


# -- policies ---------------------------------------------------------------------------


class IdentityPolicy(Protocol):
    """Says who sent a request.

    ``identify`` returns the app's identity object (a user, an API client) or
    None for an anonymous request; it must not raise for a malformed credential,
    only answer None. ``challenge`` is the ``WWW-Authenticate`` value of a 401
    for that request, or None to send none.
    """

    async def identify(self, request: Request) -> Any | None: ...

    def challenge(self, request: Request) -> str | None: ...


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


# RFC 6750 section 2.1: credentials = "Bearer" 1*SP b64token
#                       b64token = 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="
# The scheme is case-insensitive (RFC 9110 section 11.1).
_BEARER_RE = re.compile(r"[Bb][Ee][Aa][Rr][Ee][Rr] +([A-Za-z0-9\-._~+/]+=*)")
_REALM_RE = re.compile(r"[\x20\x21\x23-\x5b\x5d-\x7e]*")  # a quoted-string's text without '"' or '\'


class BearerTokenIdentity:
    """Identifies a request by ``Authorization: Bearer <token>`` (RFC 6750).

    ``lookup(token)`` is the app's: it returns an awaitable of the identity, or
    of None for a token it does not know. Store a hash of each token (see
    :func:`token_hash`) and look up by it, so a leaked table gives no usable
    token and the lookup compares no secret byte by byte.

    The header is parsed strictly and bounded: a missing header, another
    scheme, a token longer than ``max_token_length`` or with characters
    outside RFC 6750's ``b64token``, or more than one ``Authorization`` field
    all mean "not authenticated"; ``lookup`` is not called for them.
    """

    def __init__(
        self,
        lookup: Callable[[str], Awaitable[Any | None]],
        *,
        realm: str = "api",
        max_token_length: int = 512,
    ) -> None:
        if not _REALM_RE.fullmatch(realm):
            raise ValueError(f"realm {realm!r} must be printable ASCII without '\"' or '\\'")
        if max_token_length < 1:
            raise ValueError(f"max_token_length must be at least 1, not {max_token_length}")
        self.lookup = lookup
        self.realm = realm
        self.max_token_length = max_token_length

    def token(self, request: Request) -> str | None:
        """The request's bearer token when well formed, else None (see :func:`bearer_token`)."""
        return bearer_token(request, self.max_token_length)

    async def identify(self, request: Request) -> Any | None:
        token = self.token(request)
        if token is None:
            return None
        return await self.lookup(token)

    def security_schemes(self) -> dict[str, dict[str, Any]]:
        """The OpenAPI security scheme it reads: ``{"bearerAuth": {"type": "http", "scheme": "bearer"}}``."""
        return {"bearerAuth": {"type": "http", "scheme": "bearer"}}

    def challenge(self, request: Request) -> str:
        # RFC 6750 section 3: an error code only when a bearer token was sent; none when the
        # request had no credentials or those of another scheme
        sent = any(
            field.strip(" \t")[:7].rstrip(" ").lower() == "bearer" for field in request.headers.getall("Authorization")
        )
        if not sent:
            return f'Bearer realm="{self.realm}"'
        return f'Bearer realm="{self.realm}", error="invalid_token"'


class SessionIdentity:
    """Identifies a request by what its login put in the session (``request.session``).

    The login handler rotates the session (a new id, against session fixation)
    and stores the user's id under ``key``; logout invalidates the session.
    ``load(user_id)`` is the app's: an awaitable of the identity, or of None for
    an id it no longer knows (a deleted user): not authenticated. A session
    middleware must wrap the routes (see :doc:`sessions`); without one,
    ``request.session`` raises and the request ends as a 500.

    A cookie has no registered ``WWW-Authenticate`` scheme, yet a 401 must carry
    one (RFC 9110 section 15.5.2): the challenge is ``Session realm="..."``, which
    no browser acts on (``Basic`` would open a login dialog).

    ``cookie_name`` is only what the OpenAPI document names (the session
    middleware's ``cookie_name``).
    """

    def __init__(
        self,
        load: Callable[[Any], Awaitable[Any | None]],
        *,
        key: str = "user_id",
        realm: str = "app",
        cookie_name: str = "session",
    ) -> None:
        if not _REALM_RE.fullmatch(realm):
            raise ValueError(f"realm {realm!r} must be printable ASCII without '\"' or '\\'")
        self.load = load
        self.key = key
        self.realm = realm
        self.cookie_name = cookie_name

    def security_schemes(self) -> dict[str, dict[str, Any]]:
        """The OpenAPI security scheme it reads: the session cookie, ``{"sessionCookie": {"type": "apiKey", ...}}``."""
        return {"sessionCookie": {"type": "apiKey", "in": "cookie", "name": self.cookie_name}}

    async def identify(self, request: Request) -> Any | None:
        user_id = request.session.get(self.key)
        if user_id is None:
            return None
        return await self.load(user_id)

    def challenge(self, request: Request) -> str:
        return f'Session realm="{self.realm}"'


class AnyIdentity:
    """The first of several identity policies that identifies the request: a session for
    browsers and a bearer token for API clients, say. A 401 carries every policy's challenge."""

    def __init__(self, *policies: IdentityPolicy) -> None:
        if not policies:
            raise ValueError("AnyIdentity needs at least one identity policy")
        self.policies = policies

    async def identify(self, request: Request) -> Any | None:
        for policy in self.policies:
            found = await policy.identify(request)
            if found is not None:
                return found
        return None

    def security_schemes(self) -> dict[str, dict[str, Any]]:
        """The OpenAPI security schemes of its policies that describe theirs: any one of them will do."""
        schemes: dict[str, dict[str, Any]] = {}
        for policy in self.policies:
            describe = getattr(policy, "security_schemes", None)
            if describe is not None:
                schemes.update(describe())
        return schemes

    def challenge(self, request: Request) -> str | None:
        challenges = [c for c in (policy.challenge(request) for policy in self.policies) if c is not None]
        return ", ".join(challenges) or None


def bearer_token(request: Request, max_length: int = 512) -> str | None:
    """The request's ``Authorization: Bearer`` token, or None unless there is exactly one
    such field, well formed (RFC 6750 ``b64token``) and at most ``max_length`` long.

    What :class:`BearerTokenIdentity` reads; a route that revokes the token it
    was called with reads it too.
    """
    fields = request.headers.getall("Authorization")
    if len(fields) != 1:
        return None
    value = fields[0]
    # the bound first: "Bearer " and the token, before any regex looks at it
    if len(value) > max_length + 7:
        return None
    match = _BEARER_RE.fullmatch(value.strip(" \t"))
    return match.group(1) if match else None


def token_hash(token: str) -> str:
    """The SHA-256 of a token, in hex: what to store, and look a presented token up by."""
    return hashlib.sha256(token.encode()).hexdigest()


def tokens_equal(a: str | bytes, b: str | bytes) -> bool:
    """Compare two secrets in time that does not depend on where they differ."""
    return hmac.compare_digest(a.encode() if isinstance(a, str) else a, b.encode() if isinstance(b, str) else b)


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

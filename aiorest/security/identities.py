"""Identity policies: who sent a request, read from a bearer token or from the session.

Each is an :class:`IdentityPolicy` the :class:`~aiorest.security.Auth` middleware asks
(``security/auth.py``); :func:`bearer_token`, :func:`token_hash` and :func:`tokens_equal`
are what an app needs around them (a login route, a token table).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..http.request import Request

__all__ = [
    "AnyIdentity",
    "BearerTokenIdentity",
    "IdentityPolicy",
    "SessionIdentity",
    "bearer_token",
    "token_hash",
    "tokens_equal",
]


class IdentityPolicy(Protocol):
    """Says who sent a request.

    ``identify`` returns the app's identity object (a user, an API client) or
    None for an anonymous request; it must not raise for a malformed credential,
    only answer None. ``challenge`` is the ``WWW-Authenticate`` value of a 401
    for that request, or None to send none.
    """

    async def identify(self, request: Request) -> Any | None: ...

    def challenge(self, request: Request) -> str | None: ...


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

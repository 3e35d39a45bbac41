"""Users of the notes: register, log in and out, and tokens for API clients.

A browser logs in with ``POST /login`` and gets a session cookie (the session
lives in PostgreSQL, in aiorest's ``aiorest_sessions`` table, or in Redis:
``SESSION_STORE``, see ``app.session_store_from_env``); an API client
trades the same credentials for a bearer token with ``POST /tokens``. Either
identifies the caller of ``/me`` and of the notes (``auth``).

Passwords are hashed with argon2id (argon2-cffi's default parameters, through
:mod:`aiorest.security`), off the event loop. Tokens are 32 random bytes; only their
SHA-256 is stored, so a leaked table gives no usable token. Logging in (by
session or token) is rate-limited per account and per client address, before
any hash is checked (in each worker's memory, or in a store all of them share:
``RATE_LIMIT_STORE``, see ``app.limit_store_from_env``); an unknown username costs the same hash as a wrong password.
Registering is rate-limited per client address, and a taken name is refused
before its password is hashed. Registrations hash in a lane of the hashing pool
of their own, so that a flood of them never makes a login wait or fail.
"""

from __future__ import annotations

import datetime
import secrets
from typing import Annotated, Any, Literal

from msgspec import Meta, Struct

from aiorest import (
    App,
    HTTPConflict,
    HTTPServiceUnavailable,
    HTTPTooManyRequests,
    HTTPUnauthorized,
    Request,
    Router,
)
from aiorest.db import Database
from aiorest.security import (
    AnyIdentity,
    Auth,
    BearerTokenIdentity,
    LimitStore,
    LoginRateLimiter,
    Passwords,
    RateLimit,
    SessionIdentity,
    bearer_token,
    identity,
    login_required,
    token_hash,
    unauthorized,
)
from aiorest.typed import raises

from . import queries

router = Router()


Username = Annotated[str, Meta(pattern=r"^[a-z0-9_.-]{3,32}$", description="3 to 32 of a-z, 0-9, '_', '.', '-'")]
# A password is bounded: argon2 reads all of it, and a megabyte of password is a cheap attack.
Password = Annotated[str, Meta(min_length=8, max_length=1024)]


class NewUser(Struct, forbid_unknown_fields=True):
    """A registration: the username and the password (8 to 1024 characters)."""

    username: Username
    password: Password


class Credentials(Struct, forbid_unknown_fields=True):
    """A login's username and password."""

    username: Annotated[str, Meta(max_length=64)]
    password: Annotated[str, Meta(max_length=1024)]


class User(Struct, frozen=True):
    """A user, as the API shows them, and the identity of their requests."""

    id: int
    username: str


class Token(Struct):
    """A bearer token for ``Authorization: Bearer <token>``; shown once, never stored."""

    token: str
    token_type: Literal["Bearer"]
    expires_at: datetime.datetime


def auth(database: Database) -> Auth:
    """The identity of a request: its session's user, else its bearer token's."""

    async def user_by_id(user_id: Any) -> User | None:
        if not isinstance(user_id, int):
            return None
        row = await database.fetchone("SELECT id, username FROM users WHERE id = %s", (user_id,))
        return None if row is None else User(**row)

    async def user_by_token(token: str) -> User | None:
        row = await database.fetchone(
            queries.USER_BY_TOKEN,
            (token_hash(token),),
        )
        return None if row is None else User(**row)

    return Auth(AnyIdentity(SessionIdentity(user_by_id), BearerTokenIdentity(user_by_token)))


def _db(request: Request) -> Database:
    db: Database = request.app.state.db
    return db


def setup(app: App, store: LimitStore | None = None) -> None:
    """The limits: logins per account 5 and per client address 20 attempts a minute, right
    or wrong; registrations 10 a minute per address; password hashing in :class:`Passwords`'
    lanes (2 at once, a registration 1 of them; 4 calls of one address at most in each).

    The counts live in each process's bounded memory, or in ``store``, shared by every
    worker and host. A store that cannot answer fails the logins closed (503: a login limit
    that lets attempts through uncounted gives unlimited guesses while it is down) and the
    registrations open (their cost is bounded without the limit: a taken name costs no hash,
    and hashes wait in a bounded lane of their own).
    """
    app.state.login_limiter = LoginRateLimiter(store=store)
    app.state.registration_limiter = RateLimit(
        10, 60.0, message="too many registrations", store=store, name="registration", on_store_failure="open"
    )
    app.state.passwords = Passwords()


def _address(request: Request) -> str:
    """The client's address; a request without one (a unix socket, no trusted proxy) counts as one client."""
    client = request.client
    return client[0] if client else "unknown"


async def _authenticate(request: Request, credentials: Credentials) -> User:
    """The user the credentials name, or 401; 429 when over the rate limit (checked before any hash).

    A 503 (the hashing lane, the address's share of it or the database was
    full: no password was checked) is taken back from the account's count: it
    is no failed login. The address's count keeps it.
    """
    limiter: LoginRateLimiter = request.app.state.login_limiter
    passwords: Passwords = request.app.state.passwords
    address = _address(request)
    async with limiter.acheck(credentials.username, address):
        row = await _db(request).fetchone(queries.USER_FOR_LOGIN, (credentials.username,))
        # an unknown user costs a hash all the same (verify(None, ...)), so the time tells nothing
        stored = row["password_hash"] if row else None
        matches = await passwords.verify(stored, credentials.password, client=address)
    if not matches or row is None:
        raise unauthorized(request, "wrong username or password")  # the challenge of Auth's policies
    await limiter.areset(credentials.username)
    return User(row["id"], row["username"])


@router.post("/users", status=201)
@raises(HTTPConflict, HTTPTooManyRequests, HTTPServiceUnavailable)
async def register(request: Request, new: NewUser) -> User:
    """Register a user (this does not log in): 409 when the username is taken, 429 past
    10 registrations a minute from the client's address."""
    limiter: RateLimit = request.app.state.registration_limiter
    address = _address(request)
    await limiter.ahit(address)
    db = _db(request)
    if await db.fetchval("SELECT 1 FROM users WHERE username = %s", (new.username,)):
        raise HTTPConflict("that username is taken")  # before the hash: a taken name costs no CPU
    passwords: Passwords = request.app.state.passwords
    password_hash = await passwords.hash(new.password, client=address)
    row = await db.fetchone(
        queries.INSERT_USER,
        (new.username, password_hash),
    )
    if row is None:
        raise HTTPConflict("that username is taken")
    return User(**row)


@router.post("/login")
@raises(HTTPUnauthorized, HTTPTooManyRequests, HTTPServiceUnavailable)
async def login(request: Request, credentials: Credentials) -> User:
    """Log in: a new session cookie (the session id changes at login, against fixation)."""
    user = await _authenticate(request, credentials)
    session = request.session
    session.rotate()
    session["user_id"] = user.id
    return user


@router.post("/logout", status=204)
async def logout(request: Request) -> None:
    """Log out: the session is deleted and its cookie cleared. Never fails."""
    request.session.invalidate()


@router.get("/me")
@login_required
async def me(request: Request) -> User:
    """The user the request's session or bearer token names."""
    user: User = await identity(request)
    return user


# no-store, as OAuth's token answers (RFC 6749, 5.1): no cache, and no idempotency store, keeps a token.
@router.post("/tokens", status=201, headers={"Cache-Control": "no-store"})
@raises(HTTPUnauthorized, HTTPTooManyRequests, HTTPServiceUnavailable)
async def create_token(request: Request, credentials: Credentials) -> Token:
    """A bearer token for an API client, valid 30 days; the same credentials and limits as ``/login``."""
    user = await _authenticate(request, credentials)
    token = secrets.token_urlsafe(32)
    expires_at = await _db(request).fetchval(
        queries.INSERT_TOKEN,
        (token_hash(token), user.id),
    )
    return Token(token, "Bearer", expires_at)


@router.delete("/tokens/current", status=204)
@login_required
async def revoke_token(request: Request) -> None:
    """Revoke the bearer token this request carries (401 without one: a session is not enough)."""
    token = bearer_token(request)
    deleted = 0
    if token is not None:
        deleted = await _db(request).execute(queries.DELETE_TOKEN, (token_hash(token),))
    if not deleted:
        error = HTTPUnauthorized("send the bearer token to revoke")
        error.headers["WWW-Authenticate"] = 'Bearer realm="api"'  # a session will not do here
        raise error

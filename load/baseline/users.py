"""Users, sessions and tokens of the threaded baselines, as example_app/users.py has them.

Sessions are rows of aiorest's own table (aiorest_sessions, as aiorest.middleware.sessions.PostgresSessionStore
keeps them: under the SHA-256 of the id), so a session made by one server is good on another.
"""

from __future__ import annotations

import functools
import re
import secrets
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import argon2

from aiorest.http import HTTPError
from aiorest.middleware.sessions import stored_id
from aiorest.security import LoginRateLimiter, token_hash
from example_app import queries

from .common import ApiError, Pool, dumps, invalid

SESSION_COOKIE = "session"
SESSION_MAX_AGE = 14 * 24 * 3600  # aiorest's SessionMiddleware default
# A 401's challenges: aiorest's AnyIdentity(SessionIdentity(realm="app"), BearerTokenIdentity(realm="api")).
ANONYMOUS_CHALLENGE = 'Session realm="app", Bearer realm="api"'
INVALID_TOKEN_CHALLENGE = ANONYMOUS_CHALLENGE + ', error="invalid_token"'
# The cookies aiorest's SessionMiddleware sets over http (aiorest.http.cookies.format_set_cookie's order).
_SESSION_ATTRIBUTES = "Path=/; HttpOnly; SameSite=Lax"
EXPIRED_SESSION_COOKIE = f"{SESSION_COOKIE}=; Max-Age=0; Expires=Thu, 01 Jan 1970 00:00:00 GMT; {_SESSION_ATTRIBUTES}"

_MAX_COOKIE_HEADER = 8192  # more than this is not a browser's: no session, and no parsing of it
_MAX_TOKEN = 512
_SESSION_ID_RE = re.compile(r"[A-Za-z0-9_-]{43}")  # secrets.token_urlsafe(32), as aiorest's stores check
# RFC 6750 section 2.1: credentials = "Bearer" 1*SP b64token (aiorest.security.BearerTokenIdentity).
_BEARER_RE = re.compile(r"[Bb][Ee][Aa][Rr][Ee][Rr] +([A-Za-z0-9\-._~+/]+=*)")
_USERNAME_RE = re.compile(r"[a-z0-9_.-]{3,32}")

_hasher = argon2.PasswordHasher()  # argon2id with argon2-cffi's defaults, as aiorest.security.Passwords
_limiter = LoginRateLimiter()  # per account 5 / 60 s, per address 20 / 60 s, in bounded memory
_lock = threading.Lock()  # the limiter is not thread-safe


@dataclass(frozen=True, slots=True)
class User:
    id: int
    username: str

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "username": self.username}


@dataclass(frozen=True, slots=True)
class Credentials:
    """What a request presents: its session cookie's id, if well formed, and its ``Authorization`` fields."""

    session_id: str | None
    authorization: tuple[str, ...]

    @classmethod
    def from_headers(cls, cookie_fields: Sequence[str], authorization_fields: Sequence[str]) -> Credentials:
        return cls(_session_id(cookie_fields), tuple(authorization_fields))

    @property
    def bearer_token(self) -> str | None:
        """The bearer token when there is one ``Authorization`` field, well formed and ≤ 512 characters."""
        if len(self.authorization) != 1 or len(self.authorization[0]) > _MAX_TOKEN + 7:
            return None
        match = _BEARER_RE.fullmatch(self.authorization[0].strip(" \t"))
        return match.group(1) if match else None

    def challenge(self) -> str:
        """RFC 6750 section 3: ``error="invalid_token"`` only when a bearer token was sent."""
        sent = any(field.strip(" \t")[:7].rstrip(" ").lower() == "bearer" for field in self.authorization)
        return INVALID_TOKEN_CHALLENGE if sent else ANONYMOUS_CHALLENGE


def _session_id(cookie_fields: Sequence[str]) -> str | None:
    """The first ``session`` cookie's value if it can be a session id; garbage is no session."""
    if sum(len(field) for field in cookie_fields) > _MAX_COOKIE_HEADER:
        return None
    for field in cookie_fields:
        for chunk in field.split(";"):
            name, sep, value = chunk.partition("=")
            if sep and name.strip() == SESSION_COOKIE:
                value = value.strip()
                if len(value) >= 2 and value[0] == value[-1] == '"':
                    value = value[1:-1]
                return value if _SESSION_ID_RE.fullmatch(value) else None
    return None


def session_cookie(session_id: str) -> str:
    return f"{SESSION_COOKIE}={session_id}; Max-Age={SESSION_MAX_AGE}; {_SESSION_ATTRIBUTES}"


def unauthorized(credentials: Credentials) -> ApiError:
    return ApiError(401, "authentication required", headers={"WWW-Authenticate": credentials.challenge()})


def authenticate(pool: Pool, credentials: Credentials) -> User:
    """The user of a live session, else of a live bearer token; else 401."""
    with pool.cursor() as cur:
        row = None
        if credentials.session_id is not None:
            # CASE, not a bare cast: a user_id that is not a number must not fail the query
            cur.execute(
                "SELECT u.id, u.username FROM aiorest_sessions s JOIN users u ON u.id = CASE"
                " WHEN jsonb_typeof(s.data -> 'user_id') = 'number' THEN (s.data ->> 'user_id')::numeric END"
                " WHERE s.id = %s AND s.expires_at > now()",
                (stored_id(credentials.session_id),),
            )
            row = cur.fetchone()
        token = credentials.bearer_token
        if row is None and token is not None:
            cur.execute(queries.USER_BY_TOKEN, (token_hash(token),))
            row = cur.fetchone()
    if row is None:
        raise unauthorized(credentials)
    return User(*row)


def _account_fields(data: Any, *, registering: bool) -> tuple[str, str]:
    """The username and password of a /users, /login or /tokens body, or 422 with an error per field."""
    if not isinstance(data, dict):
        raise invalid("body", {"": "must be a JSON object"})
    errors: dict[str, str] = {}
    for name in data:
        if name not in ("username", "password"):
            errors.setdefault("", f"Object contains unknown field `{name}`")
    username, password = data.get("username"), data.get("password")
    for name, value in (("username", username), ("password", password)):
        if value is None:
            errors[name] = "required"
        elif not isinstance(value, str):
            errors[name] = "must be a string"
    if isinstance(username, str):
        if registering and not _USERNAME_RE.fullmatch(username):
            errors["username"] = "must be 3 to 32 characters of a-z, 0-9, '_', '.' and '-'"
        elif len(username) > 64:
            errors["username"] = "must be at most 64 characters"
    if isinstance(password, str):
        if len(password) > 1024:
            errors["password"] = "must be at most 1024 characters"
        elif registering and len(password) < 8:
            errors["password"] = "must be at least 8 characters"
    if errors:
        raise invalid("body", errors)
    assert isinstance(username, str) and isinstance(password, str)
    return username, password


def register(pool: Pool, data: Any) -> User:
    """A new user (POST /users); 409 if the username is taken. It does not log in."""
    username, password = _account_fields(data, registering=True)
    password_hash = _hasher.hash(password)  # before the connection is taken: it is ~50 ms of CPU
    with pool.cursor() as cur:
        cur.execute(queries.INSERT_USER, (username, password_hash))
        row = cur.fetchone()
    if row is None:
        raise ApiError(409, "that username is taken")
    return User(*row)


@functools.cache
def _dummy_hash() -> str:
    """Verified for an unknown user, so that the answer takes as long as for a known one (made once)."""
    return _hasher.hash("not a password")


def _verify(stored: str | None, password: str) -> bool:
    try:
        return bool(_hasher.verify(stored or _dummy_hash(), password)) and stored is not None
    except (argon2.exceptions.VerificationError, argon2.exceptions.InvalidHashError):
        return False


def _check_password(pool: Pool, data: Any, address: str | None) -> User:
    """The user a /login or /tokens body names, if the password is right: 422, 429 or 401 otherwise.

    Every attempt counts against the rate limits before the password is checked;
    a right one resets the account's count (not the address's).
    """
    username, password = _account_fields(data, registering=False)
    try:
        with _lock:
            _limiter.check(username, address)
    except HTTPError as exc:  # 429 over a limit, or 503 while the limiter's table is full of live counts
        raise ApiError(exc.status, exc.message, headers={"Retry-After": exc.headers["Retry-After"]}) from None
    with pool.cursor() as cur:
        cur.execute(queries.USER_FOR_LOGIN, (username,))
        row = cur.fetchone()
    # The hash is checked with no connection held, and for an unknown user too.
    if not _verify(None if row is None else row[2], password) or row is None:
        raise ApiError(401, "wrong username or password", headers={"WWW-Authenticate": ANONYMOUS_CHALLENGE})
    with _lock:
        _limiter.reset(username)
    return User(row[0], username)


def login(pool: Pool, data: Any, address: str | None, old_session_id: str | None) -> tuple[User, str]:
    """POST /login: the user and the ``Set-Cookie`` of a new session; the request's old session is deleted."""
    user = _check_password(pool, data, address)
    session_id = secrets.token_urlsafe(32)
    with pool.cursor() as cur:
        if old_session_id is not None:  # rotation: an id planted before the login never becomes logged in
            cur.execute("DELETE FROM aiorest_sessions WHERE id = %s", (stored_id(old_session_id),))
        cur.execute(
            "INSERT INTO aiorest_sessions (id, data, expires_at)"
            " VALUES (%s, %s::jsonb, now() + make_interval(secs => %s))",
            (stored_id(session_id), dumps({"user_id": user.id}), SESSION_MAX_AGE),
        )
    return user, session_cookie(session_id)


def logout(pool: Pool, session_id: str | None) -> str | None:
    """POST /logout: delete the session; the ``Set-Cookie`` expiring it if it was live, else None."""
    if session_id is None:
        return None
    with pool.cursor() as cur:
        cur.execute("DELETE FROM aiorest_sessions WHERE id = %s RETURNING expires_at > now()", (stored_id(session_id),))
        row = cur.fetchone()
    return EXPIRED_SESSION_COOKIE if row is not None and row[0] else None


def create_token(pool: Pool, data: Any, address: str | None) -> dict[str, Any]:
    """POST /tokens: a new bearer token for 30 days; only its SHA-256 is stored."""
    user = _check_password(pool, data, address)
    token = secrets.token_urlsafe(32)
    with pool.cursor() as cur:
        cur.execute(queries.INSERT_TOKEN, (token_hash(token), user.id))
        row = cur.fetchone()
    assert row is not None
    return {"token": token, "token_type": "Bearer", "expires_at": row[0].isoformat()}


def revoke_token(pool: Pool, credentials: Credentials) -> None:
    """DELETE /tokens/current: the request's own bearer token, which must be live.

    Anonymous: 401 as any route needing a login. Logged in by a session alone (or
    with a dead token beside it): 401 asking for the token, as example_app does.
    """
    authenticate(pool, credentials)
    token = credentials.bearer_token
    deleted = 0
    if token is not None:
        with pool.cursor() as cur:
            cur.execute(queries.DELETE_TOKEN, (token_hash(token),))
            deleted = cur.rowcount
    if not deleted:
        raise ApiError(401, "send the bearer token to revoke", headers={"WWW-Authenticate": 'Bearer realm="api"'})

"""What both threaded baselines share: errors, JSON, the blocking pool, users, the notes and the TechEmpower logic.

flask_app and stdlib_app only adapt HTTP to these functions, so they answer
alike, and alike to example_app (example_app/notes.py, example_app/techempower.py):
the same statuses, JSON shapes and error details, and the same SQL: the statements
are example_app's own (example_app/queries.py). Sessions are
rows of aiorest's own table (aiorest_sessions, as aiorest.sessions.PostgresStore
keeps them: under the SHA-256 of the id), so a session made by one server is good on another.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import queue
import random
import re
import secrets
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from html import escape
from http import HTTPStatus
from typing import Any, Literal
from urllib.parse import quote

import argon2
import psycopg2
import psycopg2.errors
import psycopg2.extensions

from aiorest.auth import LoginRateLimiter, token_hash
from aiorest.exceptions import HTTPError
from aiorest.sessions import stored_id
from example_app import queries
from example_app.queries import MAX_ID, MAX_LIMIT

JSON_TYPE = "application/json"
TEXT_TYPE = "text/plain; charset=utf-8"
HTML_TYPE = "text/html; charset=utf-8"
MAX_BODY_SIZE = 1024 * 1024  # aiorest's Limits.max_body_size
NOTES_PATH = "/notes"

# -- command line --------------------------------------------------------------------


def add_server_arguments(parser: argparse.ArgumentParser, *, port: int) -> None:
    """The options both baselines take: where to listen, the pool size, the listen backlog."""
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=port)
    parser.add_argument("--pool", type=int, default=32, help="database connections, all opened at start (default 32)")
    # The load tool starts aiorest with a backlog of 16,384: the same here, so that a burst of
    # connections waits in the queue for every target alike instead of being dropped for one.
    parser.add_argument("--backlog", type=int, default=16384, help="listen backlog (default 16384)")


def database_url() -> str:
    url = os.environ.get("DATABASE_URL")
    if not url:
        raise SystemExit("set DATABASE_URL=postgresql://... (the database example_app's migrations were applied to)")
    return url


# -- errors and JSON ---------------------------------------------------------------


class ApiError(Exception):
    """An error answered as aiorest answers one: ``{"error": {"status", "message", "details"}}``."""

    def __init__(
        self, status: int, message: str | None = None, *, details: Any = None, headers: Mapping[str, str] | None = None
    ) -> None:
        self.status = status
        self.message = message or HTTPStatus(status).phrase
        self.details = details
        self.headers = dict(headers or {})
        super().__init__(self.message)

    def to_dict(self) -> dict[str, Any]:
        return {"error": {"status": self.status, "message": self.message, "details": self.details}}


def invalid(where: str, problems: dict[str, str]) -> ApiError:
    """A 422 in the shape of aiorest's typed handlers: every problem with its location (``body.title``)."""
    details = [
        {"location": f"{where}.{name}" if name else where, "message": message} for name, message in problems.items()
    ]
    return ApiError(422, "the request is not valid", details=details)


def not_found(path: str) -> ApiError:
    return ApiError(404, f"no route for {path}")


def method_not_allowed(method: str, path: str, allowed: set[str]) -> ApiError:
    """405 with every method of the path in ``Allow``, sorted, as aiorest's router lists them."""
    return ApiError(405, f"method {method} is not allowed for {path}", headers={"Allow": ", ".join(sorted(allowed))})


# aiorest's codec (ujson, compact, non-ASCII kept) writes the same bytes for this API's data.
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def dumps(obj: Any) -> str:
    return _ENCODER.encode(obj)


def parse_json_body(content_type: str | None, body: bytes) -> Any:
    """The request body as JSON, with the 415 and 400 answers of aiorest's typed handlers.

    A body with no Content-Type is refused as another type is: a browser sends
    either cross-site without a CORS preflight.
    """
    media_type = (content_type or "").partition(";")[0].strip().lower()
    if media_type != JSON_TYPE and not media_type.endswith("+json") and (media_type or body):
        got = media_type or "no Content-Type"
        problem = {"location": "header.content-type", "message": f"expected application/json, got {got}"}
        raise ApiError(415, f"expected a JSON body (application/json), got {got}", details=[problem])
    if not body:
        raise _bad_body("request body is empty; expected JSON")
    try:
        return json.loads(body.decode("utf-8"))
    except ValueError as exc:  # UnicodeDecodeError is a ValueError
        raise _bad_body(f"request body is not valid JSON: {exc}") from None


def _bad_body(message: str) -> ApiError:
    return ApiError(400, message, details=[{"location": "body", "message": message}])


# -- the blocking pool -------------------------------------------------------------

Connection = psycopg2.extensions.connection
Cursor = psycopg2.extensions.cursor

_IDLE = psycopg2.extensions.TRANSACTION_STATUS_IDLE
_DISCONNECTS = (psycopg2.OperationalError, psycopg2.InterfaceError)
_RETRY = {"Retry-After": "1"}


class Pool:
    """``size`` psycopg2 connections, all opened at start, handed to threads first come first served.

    psycopg2's ThreadedConnectionPool closes connections above ``minconn`` and
    raises when empty instead of waiting, so under load it would connect per
    request or fail. Here a thread waits up to ``acquire_timeout`` seconds for a
    connection, then gets 503, as with aiorest.db.Database. queue.Queue wakes
    the longest waiter first, though a thread arriving at that moment may take
    the connection before it: near first come first served, like aiorest's.
    """

    def __init__(self, dsn: str, size: int, *, acquire_timeout: float = 5.0, statement_timeout: float = 30.0) -> None:
        self._dsn = dsn
        self._statement_timeout_ms = int(statement_timeout * 1000)
        self._acquire_timeout = acquire_timeout
        # None is a slot whose connection died: it is reopened by the next thread that takes it.
        self._free: queue.Queue[Connection | None] = queue.Queue()
        self._closed = False
        try:
            for _ in range(size):
                self._free.put(self._connect())
        except BaseException:
            self.close()
            raise

    def _connect(self) -> Connection:
        conn = psycopg2.connect(
            self._dsn,
            connect_timeout=5,
            application_name="baseline",
            options=f"-c statement_timeout={self._statement_timeout_ms}",
        )
        conn.autocommit = True  # as aiorest's connections: a statement is its own transaction
        return conn

    @contextmanager
    def cursor(self) -> Iterator[Cursor]:
        """A cursor on a connection held for the block; database failures become 503s."""
        conn = self._acquire()
        try:
            with conn.cursor() as cur:
                yield cur
        except psycopg2.errors.QueryCanceled as exc:  # before _DISCONNECTS: it is an OperationalError
            raise ApiError(503, "database statement timed out", headers=_RETRY) from exc
        except _DISCONNECTS as exc:
            raise ApiError(503, "database unavailable", headers=_RETRY) from exc
        finally:
            self._release(conn)

    def _acquire(self) -> Connection:
        if self._closed:
            raise ApiError(503, "the database pool is closed", headers=_RETRY)
        try:
            conn = self._free.get(timeout=self._acquire_timeout)
        except queue.Empty:
            raise ApiError(503, "database busy: no connection free in time", headers=_RETRY) from None
        if conn is not None and not conn.closed:
            return conn
        try:
            return self._connect()
        except _DISCONNECTS as exc:
            self._free.put(None)
            raise ApiError(503, "database unavailable", headers=_RETRY) from exc

    def _release(self, conn: Connection) -> None:
        if self._closed or conn.closed or conn.get_transaction_status() != _IDLE:
            conn.close()
            if not self._closed:
                self._free.put(None)
            return
        self._free.put(conn)

    def close(self) -> None:
        """Close the free connections; those in use close when released."""
        self._closed = True
        while True:
            try:
                conn = self._free.get_nowait()
            except queue.Empty:
                return
            if conn is not None:
                conn.close()


# -- users, sessions and tokens (example_app's users; shared contract of issue 21) -------------

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
# RFC 6750 section 2.1: credentials = "Bearer" 1*SP b64token (aiorest.auth.BearerTokenIdentity).
_BEARER_RE = re.compile(r"[Bb][Ee][Aa][Rr][Ee][Rr] +([A-Za-z0-9\-._~+/]+=*)")
_USERNAME_RE = re.compile(r"[a-z0-9_.-]{3,32}")

_hasher = argon2.PasswordHasher()  # argon2id with argon2-cffi's defaults, as aiorest.auth.Passwords
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


# -- notes (example_app/notes.py) -----------------------------------------------------

_FIELDS: dict[str, type[Any]] = {"title": str, "body": str, "done": bool}
_READ_ONLY = ("version", "id", "created_at", "updated_at")


def note_location(note: Mapping[str, Any]) -> str:
    return f"{NOTES_PATH}/{note['id']}"


def note_etag(note: Mapping[str, Any]) -> str:
    return f'"{note["version"]}"'


def _as_note(cur: Cursor, row: Sequence[Any]) -> dict[str, Any]:
    """A row of the note's columns as JSON wants it; ``row`` may be the last columns of the cursor's."""
    assert cur.description is not None
    names = [column.name for column in cur.description[len(cur.description) - len(row) :]]
    note = dict(zip(names, row, strict=True))
    note["created_at"] = note["created_at"].isoformat()
    note["updated_at"] = note["updated_at"].isoformat()
    return note


def _fetch_note(cur: Cursor) -> dict[str, Any] | None:
    row = cur.fetchone()
    return None if row is None else _as_note(cur, row)


def validate_note(data: Any, *, partial: bool) -> dict[str, Any]:
    """The note fields of a request body, or 422 with an error per field."""
    if not isinstance(data, dict):
        raise invalid("body", {"": "must be a JSON object"})
    errors: dict[str, str] = {}
    fields: dict[str, Any] = {}
    for name, kind in _FIELDS.items():
        if name not in data:
            if name == "title" and not partial:
                errors[name] = "required"
            continue
        value = data[name]
        if not isinstance(value, kind):
            errors[name] = f"must be a {'string' if kind is str else 'boolean'}"
        elif name == "title" and not 1 <= len(value.strip()) <= 200:
            errors[name] = "must be 1 to 200 characters"
        elif name == "body" and len(value) > 10000:
            errors[name] = "must be at most 10000 characters"
        else:
            fields[name] = value.strip() if name == "title" else value
    for name in data:
        if name not in _FIELDS and name not in _READ_ONLY:
            errors.setdefault("", f"Object contains unknown field `{name}`")  # located at the body, as msgspec does
    if errors:
        raise invalid("body", errors)
    return fields


def expected_versions(if_match: str | None, data: Any) -> list[int] | Literal["*"] | None:
    """The versions a write may apply to: ``If-Match`` first, else the body's ``version``.

    None: none named. ``"*"``: any version. A list (maybe empty): the listed
    strong ETags' versions; a weak ETag never matches If-Match.
    """
    if if_match is not None:
        if if_match.strip() == "*":
            return "*"
        versions = []
        for tag in if_match.split(","):
            tag = tag.strip()
            if len(tag) < 2 or tag[0] != '"' or tag[-1] != '"':
                if not tag.startswith('W/"'):
                    raise ApiError(400, "If-Match must list ETags, e.g. '\"3\"', or be *")
                continue
            digits = tag[1:-1]
            if digits.isascii() and digits.isdigit() and len(digits) < 19:
                versions.append(int(digits))
        return versions
    version = data.get("version") if isinstance(data, dict) else None
    if version is None:
        return None
    if not isinstance(version, int) or isinstance(version, bool):
        raise invalid("body", {"version": "must be an integer"})
    return [version]


def _int_param(query: Mapping[str, str], name: str, default: int) -> int:
    text = query.get(name)
    if text is None or text == "":
        return default
    if not (text.removeprefix("-").isascii() and text.removeprefix("-").isdigit()):
        raise invalid("query", {name: "must be an integer"})
    try:
        value = int(text)
    except ValueError:  # more digits than int() converts
        raise invalid("query", {name: "out of range"}) from None
    if not (1 if name == "limit" else 0) <= value <= MAX_ID:
        raise invalid("query", {name: "out of range"})
    return value


def list_notes(pool: Pool, owner_id: int, query: Mapping[str, str]) -> dict[str, Any]:
    """The owner's notes by id, ``limit`` (≤ 100) at a time after the ``after`` cursor; filters ``done`` and ``q``."""
    limit = min(_int_param(query, "limit", 20), MAX_LIMIT)
    after = _int_param(query, "after", 0)
    done = query.get("done")
    if done not in (None, "true", "false"):
        raise invalid("query", {"done": "must be true or false"})
    text = query.get("q")
    with pool.cursor() as cur:
        cur.execute(*queries.notes_page(owner_id, after, limit, None if done is None else done == "true", text))
        notes = [_as_note(cur, row) for row in cur.fetchall()]
    more = len(notes) > limit
    notes = notes[:limit]
    next_url = None
    if more:
        next_query = f"after={notes[-1]['id']}&limit={limit}"
        if done is not None:
            next_query += f"&done={done}"
        if text:
            next_query += f"&q={quote(text)}"
        next_url = f"{NOTES_PATH}?{next_query}"
    return {"items": notes, "next": next_url}


def create_note(pool: Pool, owner_id: int, data: Any) -> dict[str, Any]:
    fields = validate_note(data, partial=False)
    with pool.cursor() as cur:
        cur.execute(queries.INSERT_NOTE, (owner_id, fields["title"], fields.get("body", ""), fields.get("done", False)))
        note = _fetch_note(cur)
    assert note is not None
    return note


def get_note(pool: Pool, owner_id: int, note_id: int) -> dict[str, Any]:
    """The note, if the owner's: another's is missing, so that ids reveal nothing."""
    with pool.cursor() as cur:
        cur.execute(queries.SELECT_NOTE, (note_id, owner_id))
        note = _fetch_note(cur)
    if note is None:
        raise ApiError(404, "no such note")
    return note


def update_note(
    pool: Pool, owner_id: int, note_id: int, data: Any, if_match: str | None, *, partial: bool
) -> dict[str, Any]:
    """PUT (``partial=False``) or PATCH: 412 on a stale version, 428 without one."""
    fields = validate_note(data, partial=partial)
    expected = expected_versions(if_match, data)
    if expected is None:
        raise ApiError(428, "send If-Match with the note's ETag, or its version in the body")
    if not fields:
        raise invalid("body", {"": "no field to change"})
    with pool.cursor() as cur:
        return _write_if_expected(cur, owner_id, note_id, expected, queries.update_note(list(fields)), fields.values())


def delete_note(pool: Pool, owner_id: int, note_id: int, if_match: str | None) -> None:
    expected = expected_versions(if_match, None)
    with pool.cursor() as cur:
        _write_if_expected(cur, owner_id, note_id, "*" if expected is None else expected, queries.DELETE_NOTE, ())


def _write_if_expected(
    cur: Cursor,
    owner_id: int,
    note_id: int,
    expected: list[int] | Literal["*"],
    write: str,
    params: Iterable[Any],
) -> dict[str, Any]:
    """The note as ``write`` left it, if its version was expected: 404 if the owner has none, else 412."""
    cur.execute(*queries.write_if_expected(note_id, owner_id, expected, write, tuple(params)))
    row = cur.fetchone()
    if row is None:
        raise ApiError(404, "no such note")
    found, *written = row
    if written[0] is None:
        raise ApiError(412, "the note changed since you read it", details={"version": found})
    return _as_note(cur, written)


# -- TechEmpower (example_app/techempower.py, shared/TFB.md) ------------------------------

FORTUNES_HEAD = (
    "<!DOCTYPE html><html><head><title>Fortunes</title></head><body><table><tr><th>id</th><th>message</th></tr>"
)
FORTUNES_TAIL = "</table></body></html>"
HELLO = "Hello, World!"


def query_count(text: str | None) -> int:
    """``queries``: missing, empty, 0 or not a number → 1; above 500 → 500."""
    text = "1" if text is None else text
    if not (text.isascii() and text.isdigit()):  # int() would take "1_0", " 5" and "٥"
        return 1
    digits = text.lstrip("0")
    if len(digits) > 3:
        return 500
    return min(max(int(digits or "0"), 1), 500)


def _random_id() -> int:
    return random.randint(1, 10000)


def _select_world(cur: Cursor) -> dict[str, int]:
    cur.execute(queries.SELECT_WORLD, (_random_id(),))
    row = cur.fetchone()
    assert row is not None
    return {"id": row[0], "randomNumber": row[1]}


def single_world(pool: Pool) -> dict[str, int]:
    with pool.cursor() as cur:
        return _select_world(cur)


def worlds(pool: Pool, count: int) -> list[dict[str, int]]:
    """``count`` random rows, a SELECT each (TFB forbids ``WHERE id IN``)."""
    with pool.cursor() as cur:
        return [_select_world(cur) for _ in range(count)]


def update_worlds(pool: Pool, count: int) -> list[dict[str, int]]:
    """``count`` random rows with new numbers, persisted by one bulk UPDATE."""
    with pool.cursor() as cur:
        result = []
        new_numbers: dict[int, int] = {}  # a repeated id gets one new number
        for _ in range(count):
            world = _select_world(cur)
            number = new_numbers.setdefault(world["id"], _random_id())
            result.append({"id": world["id"], "randomNumber": number})
        cur.execute(*queries.update_worlds(new_numbers))
    return result


def fortunes_page(pool: Pool) -> str:
    """Every fortune plus one added now, sorted by message here (TFB forbids ORDER BY), escaped."""
    with pool.cursor() as cur:
        cur.execute(queries.SELECT_FORTUNES)
        rows: list[tuple[int, str]] = cur.fetchall()
    rows.append((0, "Additional fortune added at request time."))
    rows.sort(key=lambda row: row[1])
    cells = "".join(f"<tr><td>{id_}</td><td>{escape(message)}</td></tr>" for id_, message in rows)
    return FORTUNES_HEAD + cells + FORTUNES_TAIL

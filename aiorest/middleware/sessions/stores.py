"""Where sessions live: the :class:`SessionStore` interface and its three kinds.

:class:`CookieSessionStore` keeps the data in the cookie itself, signed;
:class:`RedisSessionStore` and :class:`PostgresSessionStore` keep it on the server, and the
cookie holds only a random id (its hash, :func:`stored_id`, is the key).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import logging
import re
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..._support.bursts import BurstLog, failing
from ..._support.redis import RedisClient
from ..._support.sweeps import Sweep
from ...http.exceptions import HTTPServiceUnavailable
from .session import Session

if TYPE_CHECKING:
    from ...db.database import Database

logger = logging.getLogger("aiorest.middleware.sessions")

__all__ = [
    "SessionStore",
    "CookieSessionStore",
    "RedisSessionStore",
    "PostgresSessionStore",
    "stored_id",
    "COOKIE_LIMIT",
]

# Browsers keep a cookie of up to 4096 bytes, name and value (RFC 6265, 6.1 asks for
# at least that much). A longer one is dropped silently, by the browser: refuse to send it.
COOKIE_LIMIT = 4096
_MIN_SECRET = 32  # bytes: a key shorter than the HMAC's 256-bit output weakens it
_CLOCK_SKEW = 60  # seconds a cookie's issue time may be ahead of this server's clock
_ID_RE = re.compile(r"^[A-Za-z0-9_-]{43}$")  # secrets.token_urlsafe(32)
_VERIFIED = 512  # cookie values a CookieSessionStore remembers as verified (each at most COOKIE_LIMIT bytes, twice)
_decode_json = json.JSONDecoder().decode  # json.loads on a str, less its checks of the argument


def stored_id(session_id: str) -> str:
    """What a server-side store keys a session by: the SHA-256 of its id, in hex.

    The id in the cookie is never stored: a leaked table or dump names no
    usable session, and the lookup compares a hash the client cannot steer
    byte by byte, not the secret itself (no timing to learn it from).
    """
    return hashlib.sha256(session_id.encode()).hexdigest()


class SessionStore:
    """Where sessions live. Subclasses implement :meth:`load`, :meth:`save` and :meth:`delete`.

    ``lazy`` stores need no I/O to load: ``request.session`` decodes the cookie on
    first access. Other stores are loaded by the middleware before the handler,
    when the request has a session cookie (and only then).
    """

    lazy = False

    def load_now(self, value: str, max_age: int) -> Session | None:
        """The session a cookie value names, loaded without I/O (``lazy`` stores only)."""
        raise NotImplementedError

    async def load(self, value: str, max_age: int) -> Session | None:
        """The session a cookie value names; None if it is invalid, expired or gone."""
        return self.load_now(value, max_age)

    async def save(self, session: Session, max_age: int) -> str:
        """Write a modified, non-empty session; return the cookie value that names it."""
        raise NotImplementedError

    async def delete(self, session_id: str) -> None:
        """Forget a session id (after ``rotate()`` or ``invalidate()``, or when emptied)."""


# -- the data in the cookie ---------------------------------------------------------


def _b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


_SCALARS = (str, int, float, bool, type(None))


def _contents(text: str) -> tuple[int, str, dict[str, Any] | str] | None:
    """A verified cookie's issue time, session id and data: the data itself when its values are JSON scalars or
    lists of them (a shallow copy is then a whole one), else its JSON text to parse on each load; None if the
    JSON is not a session's."""
    try:
        content = _decode_json(text)
    except ValueError:
        return None
    if not isinstance(content, dict):
        return None
    issued, session_id, data = content.get("t"), content.get("i"), content.get("d")
    if not isinstance(issued, int) or not isinstance(session_id, str) or not isinstance(data, dict):
        return None
    for item in data.values():
        if not (type(item) in _SCALARS or (type(item) is list and all(type(x) in _SCALARS for x in item))):
            return issued, session_id, text
    return issued, session_id, data


class CookieSessionStore(SessionStore):
    """Keeps the session in the cookie: ``payload.signature``, both URL-safe base64.

    The payload is JSON ``{"t": issued, "i": id, "d": data}``, signed with
    HMAC-SHA256 by the first of ``secrets``; any of them verifies, so a new secret
    goes first and the old one stays until the cookies it signed have expired.
    The issue time is inside the signed payload: a client cannot extend its expiry.
    The data is readable by the client (signed, not encrypted): keep no secrets in it.
    """

    lazy = True

    def __init__(self, secrets: Sequence[str | bytes]) -> None:
        if isinstance(secrets, (str, bytes)) or not secrets:
            raise ValueError("CookieSessionStore needs a list of secrets, the signing one first")
        keys = [secret.encode() if isinstance(secret, str) else bytes(secret) for secret in secrets]
        for index, key in enumerate(keys):
            if len(key) < _MIN_SECRET:
                raise ValueError(
                    f"secret {index} is {len(key)} bytes; a session secret needs at least {_MIN_SECRET}"
                    " random bytes, such as secrets.token_urlsafe(32) gives"
                )
        self._keys = keys
        # Cookie values whose signature checked out -> their payload's JSON: a client sends the same cookie
        # request after request, and its next ones skip the HMAC and base64. Only a value this store's keys
        # signed gets in; the expiry is checked on every load; the oldest goes past _VERIFIED.
        self._verified: dict[str, tuple[int, str, dict[str, Any] | str]] = {}

    def _sign(self, key: bytes, payload: str) -> bytes:
        return hmac.new(key, b"aiorest.session:" + payload.encode("ascii"), hashlib.sha256).digest()

    def load_now(self, value: str, max_age: int) -> Session | None:
        verified = self._verified
        known = verified.get(value)
        if known is None:
            text = self._verify(value)
            known = None if text is None else _contents(text)
            if known is None:
                return None
            if len(verified) >= _VERIFIED:
                del verified[next(iter(verified))]
            verified[value] = known
        issued, session_id, data = known
        now = time.time()
        if not issued - _CLOCK_SKEW <= now < issued + max_age:
            return None
        if isinstance(data, str):  # a value nested deeper than a list: parsed afresh, as no copy is made of it
            return Session(_decode_json(data)["d"], session_id)  # its shape was checked when it came in
        # JSON scalars, and lists of them: this request's own copy
        return Session({key: item[:] if type(item) is list else item for key, item in data.items()}, session_id)

    def _verify(self, value: str) -> str | None:
        """The JSON a cookie value carries, if one of the keys signed it; None if not (or not base64)."""
        if len(value) > COOKIE_LIMIT:
            return None
        payload, dot, signature = value.rpartition(".")
        if not dot:
            return None
        try:
            mac = _b64decode(signature)
            for key in self._keys:
                if hmac.compare_digest(mac, self._sign(key, payload)):
                    return _b64decode(payload).decode()
        except (binascii.Error, ValueError):  # bad base64, non-ASCII, not UTF-8
            return None
        return None

    async def save(self, session: Session, max_age: int) -> str:
        content = {"t": int(time.time()), "i": session.id, "d": dict(session)}
        payload = _b64encode(json.dumps(content, separators=(",", ":")).encode())
        return f"{payload}.{_b64encode(self._sign(self._keys[0], payload))}"


# -- the data in Redis -----------------------------------------------------------


class RedisSessionStore(SessionStore):
    """Keeps each session in a Redis hash (at ``prefix + stored_id(id)``), one field per key; the cookie holds its id.

    ``redis`` is a URL (``redis://127.0.0.1:6379/0``) or a ``redis.asyncio.Redis``
    client (aiorest's ``sessions-redis`` extra). A session lives at
    ``prefix + id`` and expires ``ttl`` seconds (by default the middleware's
    ``max_age``) after its last change. Only the keys a request changed are
    written (``HSET``/``HDEL`` in one ``MULTI``), so two requests of one session
    at once keep each other's keys.

    A Redis that refuses the connection, drops it or takes more than ``timeout``
    seconds (for a client the store makes from a URL; give your own client its
    own timeouts) fails the request with 503 and ``Retry-After``, and a warning
    in the log; it never hangs it.
    """

    def __init__(
        self, redis: Any, *, prefix: str = "aiorest:session:", ttl: int | None = None, timeout: float = 2.0
    ) -> None:
        if ttl is not None and (not isinstance(ttl, int) or isinstance(ttl, bool) or ttl <= 0):
            raise ValueError(f"ttl must be a positive number of seconds, not {ttl!r}")
        client = RedisClient(redis, timeout=timeout, user="RedisSessionStore")
        # what a Redis that is down, restarting or too slow raises: the request gets a 503, not a 500
        self._unavailable = client.unavailable
        self._client = client
        self.redis = client.client
        self.prefix = prefix
        self.ttl = ttl

    async def close(self) -> None:
        """Close the client, if the store made it from a URL (``app.on_shutdown``)."""
        await self._client.close()

    async def ping(self) -> None:
        """Return when Redis answers, raise when it cannot (see :meth:`SessionMiddleware.readiness_checks`)."""
        await self._client.ping()

    async def load(self, value: str, max_age: int) -> Session | None:
        if not _ID_RE.match(value):  # not one of our ids: no round trip for it
            return None
        try:
            fields = await self.redis.hgetall(self.prefix + stored_id(value))
        except self._unavailable as exc:
            raise _store_unavailable(exc) from None
        if not fields:  # expired, deleted or never ours: a new id, not the one the client chose
            return None
        data: dict[str, Any] = {}
        for field, raw in fields.items():
            try:
                data[field.decode() if isinstance(field, bytes) else field] = json.loads(raw)
            except ValueError:  # not written by us: leave it out
                continue
        return Session(data, value)

    async def save(self, session: Session, max_age: int) -> str:
        key = self.prefix + stored_id(session.id)
        async with self.redis.pipeline(transaction=True) as pipe:
            if session.fresh:  # a new id: the whole session, over anything there
                pipe.delete(key)
                changed = {field: json.dumps(value) for field, value in session.items()}
            else:
                set_keys, deleted = session.changes()
                changed = {field: json.dumps(session[field]) for field in set_keys}
                if deleted:
                    pipe.hdel(key, *deleted)
            if changed:
                pipe.hset(key, mapping=changed)
            pipe.expire(key, self.ttl or max_age)
            try:
                await pipe.execute()
            except self._unavailable as exc:
                raise _store_unavailable(exc) from None
        return session.id

    async def delete(self, session_id: str) -> None:
        try:
            await self.redis.delete(self.prefix + stored_id(session_id))
        except self._unavailable as exc:
            raise _store_unavailable(exc) from None


# A store that is down warns once every 10 seconds, with a count, not once a request.
_warn_unavailable = BurstLog(
    logger,
    failing("session store unavailable", "requests"),
    every=10.0,
)


def _store_unavailable(exc: BaseException) -> HTTPServiceUnavailable:
    _warn_unavailable.note(f"{type(exc).__name__}: {exc}")
    return HTTPServiceUnavailable("the session store is unavailable", retry_after=1)


# -- the data in PostgreSQL -------------------------------------------------------

# A row's keys are merged, not replaced: the keys this request deleted go (jsonb -),
# the keys it set are laid over the rest (jsonb ||), in one statement, so that two
# requests of one session at once keep each other's keys.
_UPSERT = """
INSERT INTO aiorest_sessions AS s (id, data, expires_at)
VALUES (%s, %s::jsonb, now() + make_interval(secs => %s))
ON CONFLICT (id) DO UPDATE SET
    data = CASE WHEN %s THEN EXCLUDED.data ELSE (s.data - %s::text[]) || EXCLUDED.data END,
    expires_at = EXCLUDED.expires_at
"""
_PURGE = """
DELETE FROM aiorest_sessions WHERE id IN (
    SELECT id FROM aiorest_sessions WHERE expires_at < now() LIMIT %s
)
"""


class PostgresSessionStore(SessionStore):
    """Keeps each session in a row of ``aiorest_sessions``, its keys a jsonb object.

    The table is made by a migration aiorest ships: ``aiorest migrate --dir
    aiorest:sessions``. The cookie holds the session's random id; the row's
    ``id`` is its hash (:func:`~aiorest.middleware.sessions.stored_id`). A request
    writes only the keys it changed, merged into the row in one statement.
    Expired rows are deleted, ``purge_batch`` at a time, at most every
    ``purge_every`` seconds, by whichever request saves a session then.
    """

    def __init__(
        self, database: Database, *, ttl: int | None = None, purge_every: float = 300.0, purge_batch: int = 1000
    ) -> None:
        if ttl is not None and (not isinstance(ttl, int) or isinstance(ttl, bool) or ttl <= 0):
            raise ValueError(f"ttl must be a positive number of seconds, not {ttl!r}")
        self.database = database
        self.ttl = ttl
        self.purge_batch = purge_batch
        self._purge = Sweep("expired sessions", purge_every)

    async def ping(self) -> None:
        """Return when the database answers, raise when it cannot (readiness)."""
        await self.database.ping()

    async def load(self, value: str, max_age: int) -> Session | None:
        if not _ID_RE.match(value):
            return None
        data = await self.database.fetchval(
            "SELECT data FROM aiorest_sessions WHERE id = %s AND expires_at > now()", (stored_id(value),)
        )
        if not isinstance(data, dict):  # no such session, or expired
            return None
        return Session(data, value)

    @property
    def purge_every(self) -> float:
        """Seconds between two purges of expired sessions (per process)."""
        return self._purge.every

    @purge_every.setter
    def purge_every(self, seconds: float) -> None:
        self._purge.every = seconds

    async def save(self, session: Session, max_age: int) -> str:
        set_keys, deleted = session.changes()
        changed = dict(session) if session.fresh else {field: session[field] for field in set_keys}
        await self.database.execute(
            _UPSERT,
            (stored_id(session.id), json.dumps(changed), self.ttl or max_age, session.fresh, sorted(deleted)),
        )
        await self._purge(self.purge_expired)  # the session is saved whatever becomes of the purge
        return session.id

    async def delete(self, session_id: str) -> None:
        await self.database.execute("DELETE FROM aiorest_sessions WHERE id = %s", (stored_id(session_id),))

    async def purge_expired(self) -> int:
        """Delete up to ``purge_batch`` expired sessions; returns how many."""
        return await self.database.execute(_PURGE, (self.purge_batch,))

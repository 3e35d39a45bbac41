"""Where :class:`~aiorest.middleware.idempotency.Idempotency` keeps its keys: in memory, in Redis, in PostgreSQL.

A store answers :meth:`IdempotencyStore.begin` with a :class:`Claim` (the key is
new and now this request's, or it is in flight elsewhere, or it finished and here
is its answer) and takes the answer in :meth:`IdempotencyStore.finish`.
Documented in :doc:`idempotency`.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ..._support.redis import RedisClient
from ..._support.sweeps import Sweep
from ...http.exceptions import HTTPServiceUnavailable

if TYPE_CHECKING:
    from ...db.database import Database, Transaction

__all__ = [
    "Claim",
    "IdempotencyStore",
    "MemoryIdempotencyStore",
    "PostgresIdempotencyStore",
    "RedisIdempotencyStore",
    "Stored",
]


@dataclass(frozen=True, slots=True)
class Stored:
    """A finished request's answer: status, the headers kept, body (empty when it was over the bound)."""

    fingerprint: str
    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes


@dataclass(slots=True)
class Claim:
    """What :meth:`~aiorest.IdempotencyStore.begin` found.

    ``started``: the key is this request's; call :meth:`~aiorest.IdempotencyStore.finish`.
    ``in_flight``: another request with the key runs (``fingerprint`` is that request's
    when the store knows it). ``done``: ``stored`` is the answer to replay.
    """

    outcome: Literal["started", "in_flight", "done"]
    fingerprint: str | None = None
    stored: Stored | None = None
    token: Any = field(default=None, repr=False)  # the store's own: whose lease, which transaction


class IdempotencyStore:
    """Keeps keys and answers. ``key`` is already scoped and hashed; ``fingerprint`` the request's (a SHA-256).

    Both methods raise :class:`~aiorest.HTTPServiceUnavailable` (503) when the store
    cannot answer: without the store nothing can tell a repeat from a first request.
    """

    #: Whether a handler's writes through the store's database commit with the key (PostgreSQL).
    transactional = False

    async def begin(self, key: str, fingerprint: str, lease: float) -> Claim:
        """Claim ``key`` for ``lease`` seconds unless it is held or done."""
        raise NotImplementedError

    async def finish(self, key: str, claim: Claim, stored: Stored | None, ttl: float) -> None:
        """Keep ``stored`` for ``ttl`` seconds, or with None let the key go (the request failed)."""
        raise NotImplementedError

    async def release(self, key: str, claim: Claim) -> None:
        """Let ``key`` go after a request that succeeded but whose answer may not be kept.

        Its writes stand (PostgreSQL commits them); the key is free, and a retry runs again.
        Here, as :meth:`finish` with None: the stores that cannot roll back have nothing to commit.
        """
        await self.finish(key, claim, None, 0.0)

    async def close(self) -> None:
        """Release what the store holds (``app.on_shutdown``)."""


class MemoryIdempotencyStore(IdempotencyStore):
    """Keys in this process's memory: for one process only; at most ``max_entries`` (then 503)."""

    def __init__(self, *, max_entries: int = 10_000) -> None:
        self.max_entries = max_entries
        # key -> (expires at, monotonic; fingerprint; lease token or None when done; stored)
        self._entries: dict[str, tuple[float, str, str | None, Stored | None]] = {}

    async def begin(self, key: str, fingerprint: str, lease: float) -> Claim:
        now = time.monotonic()
        entry = self._entries.get(key)
        if entry is not None and entry[0] > now:
            if entry[3] is not None:
                return Claim("done", entry[1], entry[3])
            return Claim("in_flight", entry[1])
        if key not in self._entries and len(self._entries) >= self.max_entries:
            for old in [k for k, kept in self._entries.items() if kept[0] <= now]:
                del self._entries[old]
            if len(self._entries) >= self.max_entries:
                raise HTTPServiceUnavailable("too many idempotency keys kept; retry later", retry_after=1)
        token = secrets.token_hex(8)
        self._entries[key] = (now + lease, fingerprint, token, None)
        return Claim("started", fingerprint, token=token)

    async def finish(self, key: str, claim: Claim, stored: Stored | None, ttl: float) -> None:
        entry = self._entries.get(key)
        if entry is None or entry[2] != claim.token:  # the lease ran out and another took the key
            return
        if stored is None:
            del self._entries[key]
        else:
            self._entries[key] = (time.monotonic() + ttl, stored.fingerprint, None, stored)


# -- Redis ---------------------------------------------------------------------------------------

# KEYS[1]: the key's hash {s: "f" in flight | "d" done, fp, tok, st, h, b}. In flight it expires
# with its lease, so that a request that died with the key frees it; done, with its ttl.
_BEGIN = """
local kept = redis.call('HMGET', KEYS[1], 's', 'fp', 'st', 'h', 'b')
if not kept[1] then
  redis.call('HSET', KEYS[1], 's', 'f', 'fp', ARGV[1], 'tok', ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {0}
end
if kept[1] == 'd' then
  return {2, kept[2], kept[3], kept[4], kept[5]}
end
return {1, kept[2]}
"""
_FINISH = """
if redis.call('HGET', KEYS[1], 'tok') ~= ARGV[1] then
  return 0
end
if ARGV[2] == '' then
  redis.call('DEL', KEYS[1])
  return 1
end
redis.call('HSET', KEYS[1], 's', 'd', 'st', ARGV[2], 'h', ARGV[3], 'b', ARGV[4])
redis.call('HDEL', KEYS[1], 'tok')
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
"""


class RedisIdempotencyStore(IdempotencyStore):
    """Keys in Redis, at ``prefix`` + key: a claim and a finish are one script each, atomic.

    ``redis`` is a URL or a ``redis.asyncio.Redis`` client; one made from a URL
    gives up after ``timeout`` seconds. Give the Redis ``maxmemory-policy
    noeviction`` and persistence (AOF) if a restart must not forget answers.
    """

    def __init__(self, redis: Any, *, prefix: str = "aiorest:idem:", timeout: float = 2.0) -> None:
        self._client = RedisClient(redis, timeout=timeout, user="RedisIdempotencyStore")
        self.redis = self._client.client
        self.prefix = prefix
        self._begin = self.redis.register_script(_BEGIN)
        self._finish = self.redis.register_script(_FINISH)

    async def begin(self, key: str, fingerprint: str, lease: float) -> Claim:
        token = secrets.token_hex(8)
        try:
            found = await self._begin(keys=[self.prefix + key], args=[fingerprint, token, _ms(lease)])
        except self._client.unavailable as exc:
            raise HTTPServiceUnavailable(f"the idempotency store is unavailable: {type(exc).__name__}") from None
        if found[0] == 0:
            return Claim("started", fingerprint, token=token)
        kept = _text(found[1])
        if found[0] == 1:
            return Claim("in_flight", kept)
        headers = tuple((name, value) for name, value in json.loads(found[3]))
        return Claim("done", kept, Stored(kept, int(found[2]), headers, bytes(found[4])))

    async def finish(self, key: str, claim: Claim, stored: Stored | None, ttl: float) -> None:
        args: list[Any] = [claim.token, "", "", b"", 0]
        if stored is not None:
            args = [claim.token, stored.status, json.dumps(stored.headers), stored.body, _ms(ttl)]
        try:
            await self._finish(keys=[self.prefix + key], args=args)
        except self._client.unavailable as exc:
            raise HTTPServiceUnavailable(f"the idempotency store is unavailable: {type(exc).__name__}") from None

    async def ping(self) -> None:
        """Return when Redis answers, raise when it cannot (readiness: ``app.readiness``)."""
        await self._client.ping()

    async def close(self) -> None:
        await self._client.close()


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# -- PostgreSQL ----------------------------------------------------------------------------------

_LOCK_CLASS = 0x6964_656D  # "idem": the first half of the advisory lock's two keys
# The idle timeout first: set_config returns the text set, never NULL, so the lock is always asked.
_LOCK_SQL = (
    "SELECT set_config('idle_in_transaction_session_timeout', %s, true) IS NOT NULL"
    " AND pg_try_advisory_xact_lock(%s, %s)"
)
_FIND_SQL = "SELECT fingerprint, status, headers, body FROM aiorest_idempotency WHERE key = %s AND expires_at > now()"
# Each kept answer also deletes up to this many expired ones, in its own statement: keys are
# swept as fast as they are kept, so at any steady rate as fast as they expire (twice over,
# to catch up after a burst). SKIP LOCKED: two requests never wait on each other's sweep.
_SWEPT_PER_KEPT = 2
_KEEP_SQL = f"""
WITH swept AS (
    DELETE FROM aiorest_idempotency WHERE key IN (
        SELECT key FROM aiorest_idempotency WHERE expires_at <= now() AND key <> %s
        LIMIT {_SWEPT_PER_KEPT} FOR UPDATE SKIP LOCKED
    )
)
INSERT INTO aiorest_idempotency (key, fingerprint, status, headers, body, expires_at)
VALUES (%s, %s, %s, %s, %s, now() + make_interval(secs => %s))
ON CONFLICT (key) DO UPDATE SET fingerprint = EXCLUDED.fingerprint, status = EXCLUDED.status,
    headers = EXCLUDED.headers, body = EXCLUDED.body, expires_at = EXCLUDED.expires_at
"""
_SWEEP_SQL = """
DELETE FROM aiorest_idempotency WHERE key IN (
    SELECT key FROM aiorest_idempotency WHERE expires_at <= now() LIMIT %s
)
"""


class PostgresIdempotencyStore(IdempotencyStore):
    """Keys in the table ``aiorest_idempotency``, in the request's own transaction.

    ``begin`` opens a transaction on ``database`` and takes a transaction-level
    advisory lock named by the key (held elsewhere: the key is in flight), then
    looks for the key's answer. The handler runs inside that transaction: every
    query it makes through ``database`` joins it (aiorest's transactions follow
    the task), so its writes and the key's answer, written by ``finish``, commit
    together or not at all. A crash before the commit leaves neither: a retry runs
    the handler again, on a database that never saw the first. Nothing is ever
    left in flight, and ``lease`` does not apply. Each answer kept deletes two expired
    rows in the same statement, so keys are swept as fast as they are kept (and so as
    they expire); besides, ``sweep_batch`` expired rows are deleted at most every
    ``sweep_every`` seconds per process, after a commit, for the keys left when writes
    slow down. That sweep failing is logged, and the answer committed before it stands.

    A transaction whose client falls silent — its host cut off from the database —
    would keep its lock, its row locks and, behind PgBouncer in transaction mode, a
    server connection until the client is back. PostgreSQL ends it after
    ``idle_timeout`` seconds without a statement (``idle_in_transaction_session_timeout``,
    set for this transaction only): it is rolled back, the key is free, and the
    request, if its process lives, fails with 503.

    The table is made by ``aiorest migrate --dir aiorest:idempotency``.
    """

    transactional = True

    def __init__(
        self, database: Database, *, idle_timeout: float = 5.0, sweep_every: float = 60.0, sweep_batch: int = 1000
    ) -> None:
        if not idle_timeout > 0:
            raise ValueError(f"idle_timeout is a positive number of seconds, not {idle_timeout!r}")
        self.database = database
        self.idle_timeout = idle_timeout
        self.sweep_batch = sweep_batch
        self._sweep = Sweep("expired idempotency keys", sweep_every)

    async def ping(self) -> None:
        """Return when the database answers, raise when it cannot (readiness: ``app.readiness``)."""
        await self.database.ping()

    async def begin(self, key: str, fingerprint: str, lease: float) -> Claim:
        opened: AbstractAsyncContextManager[Transaction] = self.database.transaction()
        tx = await opened.__aenter__()
        try:
            # Two statements, in this order: a SELECT taken with the lock in one statement reads a
            # snapshot from before the lock, which can miss the answer its holder just committed.
            lock = int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "big", signed=True)
            idle = f"{max(1, round(self.idle_timeout * 1000))}ms"
            locked = await tx.fetchval(_LOCK_SQL, (idle, _LOCK_CLASS, lock))
            if not locked:
                await opened.__aexit__(None, None, None)
                return Claim("in_flight")
            row = await tx.fetchone(_FIND_SQL, (key,))
        except BaseException as exc:
            await opened.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        if row is not None:
            await opened.__aexit__(None, None, None)
            headers = tuple((name, value) for name, value in row["headers"])
            return Claim(
                "done", row["fingerprint"], Stored(row["fingerprint"], row["status"], headers, bytes(row["body"]))
            )
        return Claim("started", fingerprint, token=(opened, tx))

    async def finish(self, key: str, claim: Claim, stored: Stored | None, ttl: float) -> None:
        opened, tx = claim.token
        if stored is None:
            error = RuntimeError("the request failed: its writes and its key are rolled back")
            try:
                await opened.__aexit__(RuntimeError, error, None)
            except RuntimeError as exc:
                if exc is not error:
                    raise
            return
        try:
            await tx.execute(
                _KEEP_SQL,
                (key, key, stored.fingerprint, stored.status, json.dumps(stored.headers), stored.body, ttl),
            )
        except BaseException as exc:
            await opened.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        await opened.__aexit__(None, None, None)
        # After the commit: the answer is kept whatever becomes of the sweep.
        await self._sweep(lambda: self.database.execute(_SWEEP_SQL, (self.sweep_batch,)))

    async def release(self, key: str, claim: Claim) -> None:
        opened, _ = claim.token
        await opened.__aexit__(None, None, None)  # the handler's writes commit; no answer is kept

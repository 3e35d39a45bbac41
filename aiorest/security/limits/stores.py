"""Where a :class:`~aiorest.security.RateLimit` keeps its counts when they must hold across processes and hosts.

One small interface, :class:`LimitStore`, and two stores behind it:
:class:`RedisLimitStore` (one script a check, keys that expire) and
:class:`PostgresLimitStore` (one statement a check, rows that are swept). A
limit without a store counts in its own process's memory (:mod:`.ratelimit`).
Documented in :doc:`auth`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from ..._support.redis import RedisClient
from ..._support.sweeps import Sweep
from ...http.exceptions import HTTPServiceUnavailable

if TYPE_CHECKING:
    from ...db.database import Database

__all__ = ["Hit", "LimitStore", "LimitStoreUnavailable", "PostgresLimitStore", "RedisLimitStore"]


class Hit(NamedTuple):
    """What :meth:`LimitStore.hit` did: counted the hit (``receipt`` takes it back), or not.

    Not counted: ``full`` when the key was new and the store could not make
    room for it (the limit holds ``max_entries`` keys and hits at once took
    the room it made), else the key had had its ``limit``. ``wait`` is the
    seconds until that window (when full: the oldest) ends.
    """

    counted: bool
    full: bool = False
    wait: float = 0.0
    receipt: object = None


class LimitStoreUnavailable(Exception):
    """The store could not be asked (down, too slow, out of memory); the message says why."""


class LimitStore:
    """Keeps the counts of rate limits, each named (``"login:account"``), by key, in fixed windows.

    A window starts at a key's first hit and lasts ``window`` seconds, on the
    store's clock (one clock for every process). Every method raises
    :class:`LimitStoreUnavailable` when the store cannot answer.
    """

    async def hit(self, name: str, key: str, limit: int, window: float, max_entries: int) -> Hit:
        """Count one hit unless the key has had ``limit`` in its window. A new key when the limit
        holds ``max_entries`` keys makes room: the key whose window ends first is forgotten."""
        raise NotImplementedError

    async def refund(self, name: str, key: str, receipt: object) -> None:
        """Take back the hit ``receipt`` came with, if the key's window is still that one;
        a key whose count that takes back to nothing is forgotten (it holds no room)."""
        raise NotImplementedError

    async def reset(self, name: str, key: str) -> None:
        """Forget the key's count."""
        raise NotImplementedError

    async def close(self) -> None:
        """Release what the store holds (``app.on_shutdown``)."""

    async def ping(self) -> None:
        """Return when the store answers, raise when it cannot: a readiness check, for
        ``app.readiness.add("limit store", store.ping)``. The base has nothing to ask."""


# -- Redis ---------------------------------------------------------------------------------------

# KEYS[1]: the key's hash {c: count, e: window end in ms}; KEYS[2]: the limit's live keys, scored by
# their window's end, which bounds them as max_entries does in memory: a new key past it forgets the
# key whose window ends first. The time is Redis's, so every process counts in the same windows;
# Redis 7 replicates the script's effects, not the script.
_HIT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local limit, window, max = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local kept = redis.call('HMGET', KEYS[1], 'c', 'e')
local count, ends = tonumber(kept[1]) or 0, tonumber(kept[2])
if not ends or ends <= now then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  if redis.call('ZSCORE', KEYS[2], KEYS[1]) == false and redis.call('ZCARD', KEYS[2]) >= max then
    local oldest = redis.call('ZPOPMIN', KEYS[2])
    redis.call('DEL', oldest[1])
  end
  count, ends = 0, now + window
  redis.call('ZADD', KEYS[2], ends, KEYS[1])
  redis.call('PEXPIRE', KEYS[2], window)
  redis.call('HSET', KEYS[1], 'c', 0, 'e', ends)
  redis.call('PEXPIREAT', KEYS[1], ends)
end
if count >= limit then
  return {1, ends - now}
end
redis.call('HINCRBY', KEYS[1], 'c', 1)
return {0, ends}
"""
_REFUND = """
local kept = redis.call('HMGET', KEYS[1], 'c', 'e')
if kept[2] == ARGV[1] and tonumber(kept[1]) > 0 then
  if redis.call('HINCRBY', KEYS[1], 'c', -1) == 0 then
    redis.call('DEL', KEYS[1])
    redis.call('ZREM', KEYS[2], KEYS[1])
  end
end
return 0
"""


class RedisLimitStore(LimitStore):
    """Counts in Redis: a check is one script (``EVALSHA``), one round trip, atomic.

    A key's count is a hash at ``prefix + name + ":" + key`` that expires when
    its window ends; a sorted set per limit (``prefix + name``) holds its keys
    in their window, to make room for a new key when ``max_entries`` are, as
    the in-memory count does. ``redis`` is a URL or a ``redis.asyncio.Redis``
    client (the one a :class:`~aiorest.RedisSessionStore` uses will do); a client
    made from a URL gives up after ``timeout`` seconds. Give the Redis
    ``maxmemory-policy noeviction``: an evicted count is a fresh one.
    """

    def __init__(self, redis: Any, *, prefix: str = "aiorest:limit:", timeout: float = 2.0) -> None:
        self._client = RedisClient(redis, timeout=timeout, user="RedisLimitStore")
        self.redis = self._client.client
        self.prefix = prefix
        self._hit = self.redis.register_script(_HIT)
        self._refund = self.redis.register_script(_REFUND)

    async def hit(self, name: str, key: str, limit: int, window: float, max_entries: int) -> Hit:
        where = f"{self.prefix}{name}"
        try:
            outcome, value = await self._hit(
                keys=[f"{where}:{key}", where], args=[limit, max(1, round(window * 1000)), max_entries]
            )
        except self._client.unavailable as exc:
            raise LimitStoreUnavailable(f"Redis: {type(exc).__name__}: {exc}") from None
        if outcome == 0:
            return Hit(True, receipt=str(value))
        return Hit(False, full=outcome == 2, wait=int(value) / 1000)

    async def refund(self, name: str, key: str, receipt: object) -> None:
        where = f"{self.prefix}{name}"
        try:
            await self._refund(keys=[f"{where}:{key}", where], args=[receipt])
        except self._client.unavailable as exc:
            raise LimitStoreUnavailable(f"Redis: {type(exc).__name__}: {exc}") from None

    async def reset(self, name: str, key: str) -> None:
        where = f"{self.prefix}{name}"
        try:
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.delete(f"{where}:{key}")
                pipe.zrem(where, f"{where}:{key}")
                await pipe.execute()
        except self._client.unavailable as exc:
            raise LimitStoreUnavailable(f"Redis: {type(exc).__name__}: {exc}") from None

    async def ping(self) -> None:
        await self._client.ping()

    async def close(self) -> None:
        await self._client.close()


# -- PostgreSQL ----------------------------------------------------------------------------------

# One statement: a new key gets a row (unless the limit holds max_entries rows in their window), a row
# whose window ended starts a new one, and a row below the limit counts one more. ``refused`` says
# whether this hit was over the limit (SET sees the row as it was). No row back: the limit was full,
# and _EVICT_SQL makes room (rare: the check everyone makes stays one statement).
_HIT_SQL = """
INSERT INTO aiorest_rate_limits AS r (name, key, hits, ends_at)
SELECT %s, %s, 1, now() + make_interval(secs => %s)
WHERE EXISTS (SELECT FROM aiorest_rate_limits WHERE name = %s AND key = %s)
   OR (SELECT count(*) FROM (
           SELECT FROM aiorest_rate_limits WHERE name = %s AND ends_at > now() LIMIT %s
       ) AS live) < %s
ON CONFLICT (name, key) DO UPDATE SET
    refused = r.ends_at > now() AND r.hits >= %s,
    hits = CASE WHEN r.ends_at <= now() THEN 1 WHEN r.hits < %s THEN r.hits + 1 ELSE r.hits END,
    ends_at = CASE WHEN r.ends_at <= now() THEN EXCLUDED.ends_at ELSE r.ends_at END
RETURNING refused, extract(epoch FROM ends_at - now())::float8 AS wait, ends_at
"""
# The row whose window ends first; SKIP LOCKED: processes making room at once forget one row each.
_EVICT_SQL = """
DELETE FROM aiorest_rate_limits WHERE name = %s AND key = (
    SELECT key FROM aiorest_rate_limits WHERE name = %s AND ends_at > now()
    ORDER BY ends_at LIMIT 1 FOR UPDATE SKIP LOCKED
)
"""
_OLDEST_SQL = """
SELECT extract(epoch FROM min(ends_at) - now())::float8 FROM aiorest_rate_limits WHERE name = %s AND ends_at > now()
"""
_SWEEP_SQL = """
DELETE FROM aiorest_rate_limits WHERE name = %s AND key IN (
    SELECT key FROM aiorest_rate_limits WHERE name = %s AND ends_at <= now() LIMIT %s
)
"""


class PostgresLimitStore(LimitStore):
    """Counts in the table ``aiorest_rate_limits``: a check is one statement (an upsert), atomic.

    The table is made by a migration aiorest ships: ``aiorest migrate --dir
    aiorest:ratelimits``. A row is a key's count and the end of its window;
    a row whose window ended is reused by the key's next hit, and deleted,
    ``sweep_batch`` at a time and at most every ``sweep_every`` seconds per
    limit, by whichever check comes then. A new key while the limit holds
    ``max_entries`` rows in their window deletes the row whose window ends
    first, and is counted (two new keys at once may both get in: the bound is
    within the number of processes; a new key that three tries found full
    again, while other processes took the room, gets 503). Knowing that takes
    a count of the limit's rows in their window, so a key's first check costs
    more the more keys the limit holds (the next ones find the key's row and
    skip it).
    The table is ``UNLOGGED``: no WAL flush a check, and a crash or a failover
    starts every count afresh.
    """

    def __init__(self, database: Database, *, sweep_every: float = 60.0, sweep_batch: int = 1000) -> None:
        self.database = database
        self.sweep_every = sweep_every
        self.sweep_batch = sweep_batch
        self._sweeps: dict[str, Sweep] = {}  # one a limit (its name): as many as the code makes limits

    async def ping(self) -> None:
        await self.database.ping()

    async def hit(self, name: str, key: str, limit: int, window: float, max_entries: int) -> Hit:
        try:
            for _ in range(3):
                row = await self.database.fetchone(
                    _HIT_SQL, (name, key, window, name, key, name, max_entries, max_entries, limit, limit)
                )
                if row is not None:
                    break
                await self.database.execute(_EVICT_SQL, (name, name))
            else:
                wait = await self.database.fetchval(_OLDEST_SQL, (name,))
                return Hit(False, full=True, wait=wait or 1.0)
        except HTTPServiceUnavailable as exc:  # the database's 503s: down, too slow, pool full
            raise LimitStoreUnavailable(f"PostgreSQL: {exc.message}") from None
        sweep = self._sweeps.get(name)
        if sweep is None:
            sweep = self._sweeps[name] = Sweep(f"the rate limit {name!r}'s ended windows", self.sweep_every)
        # The hit is counted: a sweep that fails does not make it a 503.
        await sweep(lambda: self.database.execute(_SWEEP_SQL, (name, name, self.sweep_batch)))
        if row["refused"]:
            return Hit(False, wait=row["wait"])
        return Hit(True, receipt=row["ends_at"])

    async def refund(self, name: str, key: str, receipt: object) -> None:
        where = "WHERE name = %s AND key = %s AND ends_at = %s"
        try:
            left = await self.database.fetchval(
                f"UPDATE aiorest_rate_limits SET hits = hits - 1 {where} AND hits > 0 RETURNING hits",
                (name, key, receipt),
            )
            if left == 0:  # deleted only if no hit came in between (the row is read again, locked)
                await self.database.execute(
                    f"DELETE FROM aiorest_rate_limits {where} AND hits = 0", (name, key, receipt)
                )
        except HTTPServiceUnavailable as exc:
            raise LimitStoreUnavailable(f"PostgreSQL: {exc.message}") from None

    async def reset(self, name: str, key: str) -> None:
        try:
            await self.database.execute("DELETE FROM aiorest_rate_limits WHERE name = %s AND key = %s", (name, key))
        except HTTPServiceUnavailable as exc:
            raise LimitStoreUnavailable(f"PostgreSQL: {exc.message}") from None

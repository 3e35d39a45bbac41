"""Rate limits in a shared store (aiorest/security/limits/stores.py): Redis and PostgreSQL, and the
same counts, refunds, resets and bounds as in memory; a store that is down fails closed or open."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

from aiorest import HTTPServiceUnavailable, HTTPTooManyRequests
from aiorest.db import Database, migrate
from aiorest.security import LimitStore, LoginRateLimiter, PostgresLimitStore, RateLimit, RedisLimitStore
from harness.fixtures import RedisServer


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


@pytest.fixture
async def redis_limits(redis_server: RedisServer) -> AsyncIterator[RedisLimitStore]:
    store = RedisLimitStore(redis_server.url, prefix=f"test:{uuid.uuid4().hex}:")
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture
async def pg_limits(database_url: str) -> AsyncIterator[PostgresLimitStore]:
    database = Database(database_url, min_size=1, max_size=4)
    await database.open()
    try:
        assert [m.version for m in await migrate(database, "aiorest:ratelimits")] == [-1001]
        yield PostgresLimitStore(database)
    finally:
        await database.close()


@pytest.fixture(params=["redis", "postgres"])
def store(request: pytest.FixtureRequest) -> LimitStore:
    store: LimitStore = request.getfixturevalue(f"{'redis' if request.param == 'redis' else 'pg'}_limits")
    return store


async def test_counts_to_the_limit_then_429_until_the_window_ends(store: LimitStore) -> None:
    limit = RateLimit(3, 60, store=store, name="t", message="slow down")
    for _ in range(3):
        await limit.ahit("ada")
    with pytest.raises(HTTPTooManyRequests) as refused:
        await limit.ahit("ada")
    assert refused.value.message == "slow down" and 58 <= int(refused.value.headers["Retry-After"]) <= 60
    await limit.ahit("bob")  # another key
    other = RateLimit(3, 60, store=store, name="other")
    await other.ahit("ada")  # another limit's key of the same name


async def test_a_new_window_starts_once_the_old_one_ends(store: LimitStore) -> None:
    limit = RateLimit(1, 0.3, store=store, name="t")
    await limit.ahit("ada")
    with pytest.raises(HTTPTooManyRequests) as refused:
        await limit.ahit("ada")
    assert refused.value.headers["Retry-After"] == "1"
    await asyncio.sleep(0.4)
    await limit.ahit("ada")


async def test_refund_and_reset(store: LimitStore) -> None:
    limit = RateLimit(2, 60, store=store, name="t")
    await limit.ahit("ada")
    receipt = await limit.ahit("ada")
    await limit.arefund("ada", receipt)
    await limit.ahit("ada")
    with pytest.raises(HTTPTooManyRequests):
        await limit.ahit("ada")
    await limit.areset("ada")
    await limit.ahit("ada")
    await limit.ahit("ada")
    with pytest.raises(HTTPTooManyRequests):
        await limit.ahit("ada")


async def test_a_refund_of_an_ended_window_leaves_the_new_one_alone(store: LimitStore) -> None:
    limit = RateLimit(1, 0.3, store=store, name="t")
    old = await limit.ahit("ada")
    await asyncio.sleep(0.4)
    await limit.ahit("ada")  # a new window, full
    await limit.arefund("ada", old)
    with pytest.raises(HTTPTooManyRequests):
        await limit.ahit("ada")


async def test_a_full_limit_forgets_the_oldest_key_for_a_new_one(store: LimitStore) -> None:
    limit = RateLimit(1, 60, store=store, name="t", max_entries=3)
    for key in ("a", "b", "c"):
        await limit.ahit(key)
        await asyncio.sleep(0.01)  # windows that end apart, on the store's clock
    await limit.ahit("d")  # was 503 until the oldest window ended
    for key in ("b", "c", "d"):
        with pytest.raises(HTTPTooManyRequests):
            await limit.ahit(key)  # still counted
    await limit.ahit("a")  # forgotten to make room: a fresh count (and "b" is forgotten now)
    await limit.ahit("b")


async def test_long_keys_are_kept_by_their_hash(store: LimitStore) -> None:
    limit = RateLimit(1, 60, store=store, name="t")
    name = "x" * 10_000
    await limit.ahit(name)
    await limit.ahit(name + "y")
    with pytest.raises(HTTPTooManyRequests):
        await limit.ahit(name)


async def test_hits_at_once_count_exactly(store: LimitStore) -> None:
    limit = RateLimit(5, 60, store=store, name="t")

    async def attempt() -> int:
        try:
            await limit.ahit("ada")
        except HTTPTooManyRequests:
            return 429
        return 200

    statuses = await asyncio.gather(*(attempt() for _ in range(30)))
    assert statuses.count(200) == 5


async def test_the_login_limiter_in_a_store(store: LimitStore) -> None:
    limiter = LoginRateLimiter(per_account=(2, 60), per_address=(3, 60), store=store, name=uuid.uuid4().hex)
    async with limiter.acheck("ada", "10.0.0.1"):
        pass
    for _ in range(2):  # 503s: nothing was checked, taken back from the account, not the address
        with pytest.raises(HTTPServiceUnavailable):
            async with limiter.acheck("ada", "10.0.0.1"):
                raise HTTPServiceUnavailable("the hashing pool is full", retry_after=1)
    with pytest.raises(HTTPTooManyRequests):
        await limiter.acheck("cy", "10.0.0.1")  # the address's fourth
    await limiter.acheck("ada", "10.0.0.2")
    with pytest.raises(HTTPTooManyRequests):
        await limiter.acheck("ada", "10.0.0.3")
    await limiter.areset("ada")
    await limiter.acheck("ada", "10.0.0.2")
    await limiter.acheck("bob", "10.0.0.2")  # the address's third
    with pytest.raises(HTTPTooManyRequests):
        await limiter.acheck("cy", "10.0.0.2")


def test_the_memory_methods_name_the_async_ones_with_a_store(redis_limits: RedisLimitStore) -> None:
    limiter = LoginRateLimiter(store=redis_limits)
    for call in (lambda: limiter.check("ada", None), lambda: limiter.reset("ada")):
        with pytest.raises(TypeError, match=r"counts in a shared store: use its a-methods \(await limit\.ahit"):
            call()
    assert len(limiter.accounts) == 0
    with pytest.raises(ValueError, match="needs a name"):
        RateLimit(1, 60, store=redis_limits)
    with pytest.raises(ValueError, match="on_store_failure"):
        RateLimit(1, 60, store=redis_limits, name="x", on_store_failure="maybe")  # type: ignore[arg-type]


async def test_without_a_store_the_async_methods_count_in_memory() -> None:
    limiter = LoginRateLimiter(per_account=(1, 60))
    async with limiter.acheck("ada", "10.0.0.1"):
        pass
    with pytest.raises(HTTPTooManyRequests):
        await limiter.acheck("ada", "10.0.0.1")
    assert len(limiter.accounts) == 1
    await limiter.areset("ada")
    await limiter.acheck("ada", "10.0.0.1")


# -- a store that is down ------------------------------------------------------------------------


async def test_a_redis_that_stops_fails_closed_or_open_and_counts_again_when_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with RedisServer() as redis:
        store = RedisLimitStore(redis.url, timeout=0.5)
        closed = RateLimit(1, 60, store=store, name="closed", message="too many login attempts")
        opened = RateLimit(1, 60, store=store, name="open", on_store_failure="open")
        try:
            receipt = await closed.ahit("ada")
            redis.stop()
            with caplog.at_level(logging.WARNING, logger="aiorest.security"):
                with pytest.raises(HTTPServiceUnavailable) as down:
                    await closed.ahit("ada")
                assert down.value.headers["Retry-After"] == "1"
                assert down.value.message == "too many login attempts: the limit cannot be checked now"
                assert await opened.ahit("ada") is None  # through, uncounted
                assert await opened.ahit("ada") is None
                await closed.arefund("ada", receipt)  # lost, never raised
                await closed.areset("ada")
            assert "rate limit store unavailable: Redis: ConnectionError" in caplog.text
            redis.start()  # a new, empty Redis on the same port
            await closed.ahit("ada")
            with pytest.raises(HTTPTooManyRequests):
                await closed.ahit("ada")
        finally:
            await store.close()


async def test_a_postgresql_that_cannot_be_reached_fails_closed_or_open() -> None:
    database = Database("postgresql://postgres@127.0.0.1:1/none", min_size=0, max_size=1, acquire_timeout=1)
    await database.open()
    try:
        store = PostgresLimitStore(database)
        with pytest.raises(HTTPServiceUnavailable) as down:
            await RateLimit(1, 60, store=store, name="closed").ahit("ada")
        assert down.value.headers["Retry-After"] == "1"
        assert await RateLimit(1, 60, store=store, name="open", on_store_failure="open").ahit("ada") is None
    finally:
        await database.close()


async def test_redis_keys_expire_with_their_window(redis_limits: RedisLimitStore) -> None:
    limit = RateLimit(3, 30, store=redis_limits, name="t")
    await limit.ahit("ada")
    count, live = f"{redis_limits.prefix}t:ada", f"{redis_limits.prefix}t"
    fields = await redis_limits.redis.hgetall(count)
    assert set(fields) == {b"c", b"e"} and fields[b"c"] == b"1"  # the count, and its window's end in ms
    for key in (count, live):
        assert 29_000 < await redis_limits.redis.pttl(key) <= 30_000
    assert await redis_limits.redis.zrange(live, 0, -1) == [count.encode()]


async def test_postgresql_rows_of_ended_windows_are_swept(pg_limits: PostgresLimitStore) -> None:
    pg_limits.sweep_every = 0.0
    limit = RateLimit(3, 0.2, store=pg_limits, name="t")
    for key in ("a", "b", "c"):
        await limit.ahit(key)
    await asyncio.sleep(0.3)
    await limit.ahit("d")  # sweeps the three ended windows
    rows = await pg_limits.database.fetchall("SELECT key FROM aiorest_rate_limits WHERE name = 't'")
    assert [row["key"] for row in rows] == ["d"]

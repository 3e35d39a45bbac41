"""LISTEN/NOTIFY fan-out (db/listening.py), with both drivers: one connection for every subscriber,
a slow subscriber dropped with its queue bounded, listening again after the backend was terminated."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import psycopg2
import pytest

from aiorest.db import Database, DatabaseUnavailable, Notification, NotificationGap, SubscriberTooSlow
from tests.db.test_db import kill_backends

pytestmark = pytest.mark.parametrize("driver", ["psycopg2", "aiopg"])


@pytest.fixture
async def db(database_url: str, driver: str) -> AsyncIterator[Database]:
    database = Database(database_url, min_size=1, max_size=2, driver=driver, application_name=f"listen-{driver}")
    await database.open()
    yield database
    await database.close()


def listen_backends(url: str, name: str) -> list[tuple[str, str]]:
    """(state, last query) of the backends named ``name``."""
    admin = psycopg2.connect(url)
    try:
        with admin.cursor() as cursor:
            cursor.execute("SELECT state, query FROM pg_stat_activity WHERE application_name = %s", (name,))
            return cursor.fetchall()
    finally:
        admin.close()


async def notify(db: Database, channel: str, *payloads: str) -> None:
    for payload in payloads:
        await db.fetchval("SELECT pg_notify(%s, %s)", (channel, payload))


async def receive(subscription: AsyncIterator[object], count: int) -> list[object]:
    return [await asyncio.wait_for(anext(subscription), 10) for _ in range(count)]


async def test_one_connection_feeds_every_subscriber(db: Database, database_url: str, driver: str) -> None:
    async with db.listen("Notes") as other:  # a channel's case is kept, as pg_notify names it
        subscriptions = [db.listen("notes") for _ in range(50)]
        for subscription in subscriptions:
            await subscription.__aenter__()
        await notify(db, "notes", "one", "two")
        await notify(db, "Notes", "other")
        for subscription in subscriptions:
            received = await receive(subscription, 2)
            assert [(n.channel, n.payload) for n in received] == [("notes", "one"), ("notes", "two")]  # type: ignore[attr-defined]
        (only,) = await receive(other, 1)
        assert isinstance(only, Notification) and only.payload == "other" and only.pid > 0
        backends = listen_backends(database_url, f"listen-{driver}-listen")
        assert len(backends) == 1  # 51 subscribers, one connection
        for subscription in subscriptions:
            await subscription.__aexit__(None, None, None)
        # The last subscriber of "notes" left: UNLISTEN, on the same connection.
        assert listen_backends(database_url, f"listen-{driver}-listen") == [("idle", 'UNLISTEN "notes"')]


async def test_a_slow_subscriber_is_dropped_and_the_others_go_on(db: Database) -> None:
    async with db.listen("busy", queue_size=4) as slow, db.listen("busy", queue_size=64) as fast:
        await notify(db, "busy", *(str(n) for n in range(10)))
        received = await receive(fast, 10)
        assert [n.payload for n in received] == [str(n) for n in range(10)]  # type: ignore[attr-defined]
        with pytest.raises(SubscriberTooSlow, match="fell 4 notifications behind"):
            await anext(slow)  # at once: what it had not read was discarded with it
        await notify(db, "busy", "after")
        assert [n.payload for n in await receive(fast, 1)] == ["after"]  # type: ignore[attr-defined]


async def test_it_listens_again_after_the_backend_was_terminated(db: Database, database_url: str, driver: str) -> None:
    await listens_again(db, database_url, f"listen-{driver}-listen")


async def listens_again(db: Database, database_url: str, name: str) -> None:
    async with db.listen("events") as subscription:
        await notify(db, "events", "before")
        assert [n.payload for n in await receive(subscription, 1)] == ["before"]  # type: ignore[attr-defined]
        kill_backends(database_url, name)
        (gap,) = await receive(subscription, 1)  # once listening again: resync now
        assert isinstance(gap, NotificationGap) and gap.channel == "events"
        await notify(db, "events", "after")
        assert [n.payload for n in await receive(subscription, 1)] == ["after"]  # type: ignore[attr-defined]
        assert len(listen_backends(database_url, name)) == 1


async def test_subscribing_without_postgresql_is_a_503(driver: str) -> None:
    db = Database("postgresql://postgres@127.0.0.1:1/none?connect_timeout=2", driver=driver)
    with pytest.raises(DatabaseUnavailable):
        async with db.listen("anything"):
            pass
    with pytest.raises(ValueError, match="at most 63 bytes"):
        db.listen("x" * 64)
    await db.close()
    unopened = Database(driver=driver)  # its DSN would be $DATABASE_URL's, read when it opens
    with pytest.raises(ValueError, match="or the Database opened first"):
        async with unopened.listen("anything"):
            pass


async def test_closing_the_database_ends_the_subscriptions(database_url: str, driver: str) -> None:
    db = Database(database_url, min_size=0, driver=driver)
    await db.open()
    async with db.listen("closing") as subscription:
        waiting = asyncio.ensure_future(anext(subscription))
        await db.close()
        with pytest.raises(StopAsyncIteration):
            await asyncio.wait_for(waiting, 10)
    with pytest.raises(DatabaseUnavailable, match="closed"):
        async with db.listen("closing"):
            pass
    await db.open()  # open again: subscriptions are taken again
    try:
        async with db.listen("closing") as subscription:
            await notify(db, "closing", "reopened")
            assert [n.payload for n in await receive(subscription, 1)] == ["reopened"]  # type: ignore[attr-defined]
    finally:
        await db.close()


def test_it_listens_again_on_uvloop(database_url: str, driver: str) -> None:
    uvloop = pytest.importorskip("uvloop")

    async def scenario() -> None:
        db = Database(database_url, min_size=1, driver=driver, application_name=f"uv-{driver}")
        await db.open()
        try:
            await listens_again(db, database_url, f"uv-{driver}-listen")
        finally:
            await db.close()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(scenario())


async def test_a_subscription_is_used_inside_its_block_once(db: Database) -> None:
    subscription = db.listen("once")
    with pytest.raises(RuntimeError, match="inside its block"):
        await anext(subscription)
    async with subscription:
        with pytest.raises(RuntimeError, match="entered already"):
            await subscription.__aenter__()


async def test_from_aiopg_listens_on_a_connection_of_its_own(database_url: str, driver: str) -> None:
    if driver != "aiopg":
        pytest.skip("Database.from_aiopg() is aiopg's")
    import aiopg

    async with aiopg.create_pool(database_url, minsize=1, maxsize=2) as pool:
        db = Database.from_aiopg(pool)
        await db.open()
        try:
            with pytest.raises(ValueError, match="needs listen_dsn="):
                async with db.listen("lent"):
                    pass
        finally:
            await db.close()
        db = Database.from_aiopg(pool, listen_dsn=database_url)
        await db.open()
        try:
            async with db.listen("lent") as subscription:
                await notify(db, "lent", "through the app's pool")
                assert [n.payload for n in await receive(subscription, 1)] == ["through the app's pool"]  # type: ignore[attr-defined]
                assert pool.size - pool.freesize == 0  # the LISTEN holds none of the app's connections
        finally:
            await db.close()

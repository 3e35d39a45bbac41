"""aiorest.db against a real PostgreSQL: helpers, transactions, errors as HTTP answers, the pool."""

from __future__ import annotations

import asyncio
import gc
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg2
import pytest

from aiorest import App, Request
from aiorest.db import (
    ConstraintViolation,
    Database,
    DatabaseUnavailable,
    PoolTimeout,
    StatementTimeout,
    UniqueViolation,
)


@asynccontextmanager
async def opened(database_url: str, **options: Any) -> AsyncIterator[Database]:
    """A pool of one connection (unless ``options`` say otherwise), closed on the way out."""
    db = Database(database_url, **{"min_size": 1, "max_size": 1, **options})
    await db.open()
    try:
        yield db
    finally:
        await db.close()


@pytest.fixture
async def db(database_url):
    database = Database(database_url, min_size=1, max_size=4, acquire_timeout=0.5, statement_timeout=1)
    await database.open()
    await database.execute("CREATE TABLE items (id int PRIMARY KEY, qty int NOT NULL CHECK (qty >= 0))")
    yield database
    await database.close()


async def test_row_helpers(db):
    assert await db.execute("INSERT INTO items VALUES (%s, %s), (%s, %s)", (1, 5, 2, 7)) == 2
    assert await db.fetchone("SELECT * FROM items WHERE id = %s", (1,)) == {"id": 1, "qty": 5}
    assert await db.fetchone("SELECT * FROM items WHERE id = %s", (99,)) is None
    assert await db.fetchall("SELECT id FROM items ORDER BY id") == [{"id": 1}, {"id": 2}]
    assert await db.fetchrows("SELECT id, qty FROM items WHERE id > %s ORDER BY id", (0,)) == [(1, 5), (2, 7)]
    assert await db.fetchval("SELECT sum(qty) FROM items") == 12
    assert await db.fetchval("SELECT 'a%%' || %s", ("b",)) == "a%b"
    assert await db.fetchval("SELECT %(x)s::int * 2", {"x": 21}) == 42  # named: not prepared


async def test_statements_are_prepared_once_per_connection(db):
    for _ in range(3):
        await db.fetchval("SELECT count(*) FROM items WHERE qty > %s", (0,))
    prepared = await db.fetchall("SELECT statement FROM pg_prepared_statements")
    assert [row["statement"] for row in prepared].count(
        "PREPARE aiorest_0 AS SELECT count(*) FROM items WHERE qty > $1"
    ) <= 1
    assert any("qty > $1" in row["statement"] for row in prepared) or db.size > 1


async def test_prepare_setting_off_for_poolers(database_url):
    async with opened(database_url, prepare=False) as db:
        await db.fetchval("SELECT %s::int", (1,))
        assert await db.fetchval("SELECT count(*) FROM pg_prepared_statements") == 0


async def test_transaction_commits_and_rolls_back_with_savepoints(db):
    async with db.transaction() as tx:
        await tx.execute("INSERT INTO items VALUES (1, 1)")
        with pytest.raises(RuntimeError):
            async with db.transaction():
                await db.execute("INSERT INTO items VALUES (2, 2)")  # uses the transaction's connection
                raise RuntimeError("undo the savepoint only")
        async with tx.transaction() as nested:
            await nested.execute("INSERT INTO items VALUES (3, 3)")
    assert await db.fetchall("SELECT id FROM items ORDER BY id") == [{"id": 1}, {"id": 3}]
    with pytest.raises(RuntimeError):
        async with db.transaction():
            await db.execute("INSERT INTO items VALUES (4, 4)")
            raise RuntimeError("undo all")
    assert await db.fetchval("SELECT count(*) FROM items") == 2
    assert db.idle == db.size  # every connection came back, idle


async def test_begin_goes_with_the_first_statement_and_a_transaction_without_one_sends_nothing(db):
    async with db.transaction():
        started = await db.fetchval("SELECT now()")  # "BEGIN; SELECT now()": already in the transaction
        await asyncio.sleep(0.02)
        assert await db.fetchval("SELECT now()") == started  # now() is the transaction's start
    async with db.transaction():
        pass  # no statement: no BEGIN and no COMMIT went
    with pytest.raises(UniqueViolation):
        async with db.transaction():
            await db.execute("INSERT INTO items VALUES (5, 5), (5, 5)")  # the first statement fails
    async with db.transaction():
        with pytest.raises(IndexError):  # psycopg2 refuses it before it is sent: nothing began
            await db.fetchval("SELECT %s, %s", (1,))
        await db.execute("INSERT INTO items VALUES (6, 6)")  # begins now, and commits
        with pytest.raises(RuntimeError):
            async with db.transaction():  # a savepoint inside
                await db.execute("INSERT INTO items VALUES (7, 7)")
                raise RuntimeError("undo the savepoint")
    assert await db.fetchall("SELECT id FROM items ORDER BY id") == [{"id": 6}]
    assert db.idle == db.size  # every connection came back, idle (not in a transaction)


async def test_errors_map_to_http_statuses(db):
    await db.execute("INSERT INTO items VALUES (1, 1)")
    with pytest.raises(UniqueViolation) as unique:
        await db.execute("INSERT INTO items VALUES (1, 1)")
    # What PostgreSQL said stays on the exception, for the app; the answer names no constraint.
    assert unique.value.status == 409 and unique.value.details is None
    assert unique.value.constraint == "items_pkey" and unique.value.sqlstate == "23505"
    with pytest.raises(ConstraintViolation) as check:
        await db.execute("INSERT INTO items VALUES (2, -1)")
    assert check.value.status == 422 and check.value.constraint == "items_qty_check"
    assert "items" not in repr(check.value.details)
    with pytest.raises(ConstraintViolation):
        await db.execute("INSERT INTO items (id) VALUES (3)")  # not null
    with pytest.raises(StatementTimeout) as timeout:
        await db.fetchval("SELECT pg_sleep(3)")
    assert timeout.value.status == 503
    with pytest.raises(psycopg2.errors.UndefinedTable):  # a bug in the SQL stays a 500
        await db.fetchval("SELECT * FROM missing")
    assert await db.fetchval("SELECT 1") == 1  # the connection survived all of it


async def test_pool_exhausted_past_acquire_timeout_is_503_with_retry_after(db):
    async def hold() -> None:
        async with db.connection() as conn:
            await conn.fetchval("SELECT pg_sleep(0.8)")

    waits = db.waits
    holders = [asyncio.create_task(hold()) for _ in range(db.max_size)]
    await asyncio.sleep(0.1)
    assert db.in_use == db.max_size and db.waiting == 0
    query = asyncio.create_task(db.fetchval("SELECT 1"))
    await asyncio.sleep(0.01)
    assert db.waiting == 1 and db.waits == waits + 1
    with pytest.raises(PoolTimeout) as exhausted:
        await query
    assert exhausted.value.status == 503 and exhausted.value.headers["Retry-After"] == "1"
    assert db.waiting == 0
    await asyncio.gather(*holders)
    assert db.size <= db.max_size


async def test_waiters_are_served_first_come_first_served(database_url):
    order: list[int] = []

    async def query(db: Database, i: int) -> None:
        async with db.connection() as conn:
            order.append(i)
            await conn.fetchval("SELECT pg_sleep(0.01)")

    async with opened(database_url, acquire_timeout=5) as db:
        tasks = []
        for i in range(10):
            tasks.append(asyncio.create_task(query(db, i)))
            await asyncio.sleep(0.001)  # arrive in order
        await asyncio.gather(*tasks)
        assert order == list(range(10))


async def test_cancelled_query_does_not_leak_its_connection(db):
    for _ in range(db.max_size + 2):
        task = asyncio.create_task(db.fetchval("SELECT pg_sleep(0.5)"))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert await db.fetchval("SELECT 1") == 1
    assert db.size <= db.max_size


async def test_cancelled_waiter_does_not_leak_a_connection(database_url):
    async with opened(database_url, acquire_timeout=5) as db:
        holder = asyncio.create_task(db.fetchval("SELECT pg_sleep(0.2)"))
        await asyncio.sleep(0.05)
        waiters = [asyncio.create_task(db.fetchval("SELECT 1")) for _ in range(5)]
        await asyncio.sleep(0.01)
        for waiter in waiters[:4]:
            waiter.cancel()
        await holder
        assert await waiters[4] == 1
        assert db.size == 1 and db.idle == 1


async def test_waiters_that_give_up_do_not_pile_up(database_url):
    # Waiters that time out stay queued (taking each out would scan the queue);
    # a sweep keeps them to about half the queue, and the pool serves on.
    # The one connection is held until the four rounds are over, however slow the host.
    async with opened(database_url, acquire_timeout=0.05) as db:
        held, done = asyncio.Event(), asyncio.Event()

        async def hold() -> None:
            async with db.connection():
                held.set()
                await done.wait()

        holder = asyncio.create_task(hold())
        await held.wait()
        for _ in range(4):
            results = await asyncio.gather(*(db.fetchval("SELECT 1") for _ in range(100)), return_exceptions=True)
            assert all(isinstance(result, PoolTimeout) for result in results)
        assert len(db.pool._waiters) <= 130  # 400 gave up
        done.set()
        await holder
        assert await db.fetchval("SELECT 2") == 2
        assert db.size == 1


async def test_killed_backends_give_503_then_recover(database_url):
    app = App()
    db = Database(database_url, min_size=4, max_size=4, application_name="aiorest-kill-test")
    db.setup(app)

    @app.get("/one")
    async def one(request: Request) -> dict[str, int]:
        return {"one": await db.fetchval("SELECT 1")}

    @app.post("/slow-write")
    async def slow_write(request: Request) -> dict[str, int]:
        return {"rows": await db.execute("DO $$ BEGIN PERFORM pg_sleep(2); END $$")}

    from aiorest.testing import TestClient

    async with TestClient(app) as client:

        async def in_flight() -> tuple[int, dict]:
            async with client.post("/slow-write") as response:
                return response.status, await response.json()

        request = asyncio.create_task(in_flight())
        await asyncio.sleep(0.3)
        await asyncio.to_thread(kill_backends, database_url, "aiorest-kill-test")
        status, body = await request
        assert status == 503 and body["error"]["status"] == 503  # in flight at the kill: 503, no traceback
        for _ in range(10):  # later requests succeed with no manual step
            async with client.get("/one") as response:
                assert response.status == 200
                assert await response.json() == {"one": 1}
        # killed again while idle, with reads arriving before the pool could notice: a read that
        # finds its connection dead before sending is retried once, on a fresh connection (the
        # loop is blocked until the backends are gone: a read sent to a backend still ending
        # may have run there, and gets 503)
        kill_backends(database_url, "aiorest-kill-test")
        statuses = []
        for _ in range(8):
            async with client.get("/one") as response:
                statuses.append(response.status)
        assert statuses == [200] * 8


async def test_unreachable_database_is_503():
    db = Database("postgresql://postgres@127.0.0.1:1/postgres?connect_timeout=1", min_size=0, max_size=2)
    await db.open()
    try:
        with pytest.raises(DatabaseUnavailable) as unavailable:
            await db.fetchval("SELECT 1")
        assert unavailable.value.status == 503
        assert db.size == 0
    finally:
        await db.close()


async def test_open_without_a_dsn_says_what_to_do(monkeypatch):
    monkeypatch.delenv("DATABASE_URL", raising=False)
    with pytest.raises(RuntimeError, match="DATABASE_URL"):
        await Database().open()


async def test_lost_idle_connections_are_replaced_and_logged_once_per_burst(database_url, caplog):
    # Idle connections are watched: their loss is seen without a request, the
    # pool refills to min_size by itself, and one line counts the burst; a
    # second burst within the quiet interval is counted, not logged at once.
    db = Database(database_url, min_size=4, max_size=4, application_name="aiorest-lost-idle")
    await db.open()
    try:
        assert await asyncio.to_thread(kill_backends, database_url, "aiorest-lost-idle") == 4
        async with asyncio.timeout(5):
            while not (db.size == db.idle == 4 and len(lost_lines(caplog)) == 1):
                await asyncio.sleep(0.02)
        assert re.fullmatch(r"lost 4 connections to PostgreSQL: .+; reconnecting", lost_lines(caplog)[0])
        assert await asyncio.to_thread(kill_backends, database_url, "aiorest-lost-idle") == 4
        async with asyncio.timeout(5):
            while db.size != 4 or db.idle != 4 or await db.fetchval("SELECT 1") != 1:
                await asyncio.sleep(0.02)
        await asyncio.sleep(0.6)
        assert len(lost_lines(caplog)) == 1
    finally:
        await db.close()
    gc.collect()  # a future dropped with an exception nobody retrieved is logged now
    lines = lost_lines(caplog)
    assert len(lines) == 2 and re.fullmatch(r"lost 4 connections to PostgreSQL: [^;]+", lines[1])
    assert not [record for record in caplog.records if record.levelno >= 30 and record.name != "aiorest.db"]


def lost_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.name == "aiorest.db"]


async def test_two_statements_at_once_on_a_transaction_say_so_and_the_first_completes(db):
    # Tasks started inside a transaction inherit it, so both statements go to its
    # one connection: the second is refused, and the first still gets its answer.
    async with asyncio.timeout(5):
        async with db.transaction():
            first, second = await asyncio.gather(
                db.fetchval("SELECT %s::int FROM pg_sleep(0.1)", (1,)),
                db.fetchval("SELECT %s::int FROM pg_sleep(0.1)", (2,)),
                return_exceptions=True,
            )
            assert first == 1
            assert isinstance(second, RuntimeError) and "one statement at a time" in str(second)
            assert await db.fetchval("SELECT 3") == 3
    assert db.idle == db.size


async def test_pool_refills_after_an_open_that_failed_earlier(database_url, caplog):
    # A failed open() cancels the reconnection it started before that task ran a
    # step; the pool must still reconnect later, once opened.
    db = Database("postgresql://postgres@127.0.0.1:1/postgres?connect_timeout=1", min_size=2, max_size=2)
    with pytest.raises(psycopg2.OperationalError):
        await db.open()
    db.pool.dsn = database_url
    db.pool.application_name = "aiorest-reopened"
    await db.open()
    try:
        assert await asyncio.to_thread(kill_backends, database_url, "aiorest-reopened") == 2
        async with asyncio.timeout(3):
            while not (lost_lines(caplog) and db.size == db.idle == 2):  # the losses are seen, and replaced
                await asyncio.sleep(0.02)
        assert await db.fetchval("SELECT 1") == 1
    finally:
        await db.close()


def kill_backends(url: str, application_name: str) -> int:
    """``pg_terminate_backend`` every connection named ``application_name``, and wait until they exited; how many."""
    admin = psycopg2.connect(url)
    admin.autocommit = True
    try:
        with admin.cursor() as cursor:
            cursor.execute(
                "SELECT array_agg(pid) FROM pg_stat_activity WHERE application_name = %s", (application_name,)
            )
            pids = cursor.fetchone()[0]
            assert pids, f"no connection named {application_name}"
            cursor.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s) AS pid", (pids,))
            for _ in range(500):
                cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", (pids,))
                if cursor.fetchone()[0] == 0:
                    # A backend leaves pg_stat_activity in its exit callbacks, a moment before
                    # its process ends and the kernel closes its socket: let the sockets close,
                    # else a read can still be sent to a backend on its way out (seen in CI).
                    time.sleep(0.2)
                    return len(pids)
                time.sleep(0.01)
        raise AssertionError(f"the backends of {application_name} outlived pg_terminate_backend by 5 s")
    finally:
        admin.close()


async def test_a_read_on_a_connection_that_died_idle_is_retried(database_url):
    async with opened(database_url, application_name="aiorest-died-idle") as db:
        assert await db.fetchval("SELECT 1") == 1
        # Blocking the loop on purpose: the pool cannot notice the loss before the next read.
        kill_backends(database_url, "aiorest-died-idle")
        assert await db.fetchval("SELECT 2") == 2  # on a new connection


async def test_a_read_in_flight_when_its_connection_dies_is_not_retried(database_url):
    # The server may have run it: nextval must not advance twice.
    async with opened(database_url, application_name="aiorest-died-busy") as db:
        await db.execute("CREATE SEQUENCE s")

        async def kill_soon() -> None:
            await asyncio.sleep(0.3)
            await asyncio.to_thread(kill_backends, database_url, "aiorest-died-busy")

        killer = asyncio.create_task(kill_soon())
        with pytest.raises(DatabaseUnavailable) as unavailable:
            await db.fetchval("SELECT nextval('s'), pg_sleep(1)")
        await killer
        assert unavailable.value.status == 503
        assert await db.fetchrows("SELECT last_value, is_called FROM s") == [(1, True)]  # advanced once


async def test_prepared_statements_are_capped_per_connection(database_url):
    # Every distinct text was prepared and kept for the connection's lifetime.
    async with opened(database_url) as db:
        for i in range(300):
            assert await db.fetchval(f"SELECT %s::int + {i}", (1,)) == 1 + i
        assert await db.fetchval("SELECT count(*) FROM pg_prepared_statements") == 256
        assert await db.fetchval("SELECT %s::int + 7", (1,)) == 8  # prepared before the cap: still works

"""aiorest.db's pool across workers and under stress: sizing per host, the capacity check, the
warnings that say why requests got 503, and a task cancelled in the middle of a statement."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg2
import pytest

from aiorest import App, Server
from aiorest.db import Database, DatabaseUnavailable, PoolTimeout


def server_limits(url: str) -> tuple[int, int]:
    """PostgreSQL's max_connections, and the connections it reserves (superuser and PG16's reserved)."""
    with psycopg2.connect(url) as connection, connection.cursor() as cursor:
        cursor.execute(
            "SELECT current_setting('max_connections')::int, current_setting('superuser_reserved_connections')::int"
            " + coalesce(current_setting('reserved_connections', true), '0')::int"
        )
        limits: tuple[int, int] = cursor.fetchone()
    connection.close()
    return limits


def backend_state(url: str, pid: int) -> tuple[str, str]:
    """The state and last query of backend ``pid``, seen from another session."""
    connection = psycopg2.connect(url)
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT state, query FROM pg_stat_activity WHERE pid = %s", (pid,))
            state: tuple[str, str] = cursor.fetchone()
            return state
    finally:
        connection.close()


def with_user(url: str, user: str) -> str:
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, f"{user}@{host}", parts.path, parts.query, parts.fragment))


def db_lines(caplog: pytest.LogCaptureFixture, start: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "aiorest.db" and r.getMessage().startswith(start)]


# -- sizing across workers --------------------------------------------------------------


async def test_max_total_is_shared_out_between_the_server_s_workers_when_the_pool_opens(database_url):
    app = App()
    db = Database(database_url, min_size=4, max_total=10)  # made before the workers are known, as an app is
    db.setup(app)
    assert (db.max_size, db.min_size) == (10, 4)
    server = Server(app, port=0, workers=4)  # what each of `aiorest run --workers 4`'s workers makes
    await server.start()
    try:
        assert (db.workers, db.max_size, db.min_size) == (4, 2, 2)  # 10 // 4; min_size capped to the share
        assert db.size == 2
    finally:
        await server.stop()


async def test_a_database_given_its_workers_keeps_them_and_alone_it_has_one(database_url):
    app = App()
    db = Database(database_url, min_size=1, max_total=10, workers=2)
    db.setup(app)
    server = Server(app, port=0, workers=4)
    await server.start()
    try:
        assert (db.workers, db.max_size) == (2, 5)
    finally:
        await server.stop()
    alone = Database(database_url, min_size=1, max_total=10)
    await alone.open()
    try:
        assert (alone.workers, alone.max_size) == (1, 10)
    finally:
        await alone.close()


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"max_size": 4, "max_total": 8}, "not both"),
        ({"max_total": 0}, "max_total >= 1"),
        ({"min_size": 5, "max_size": 4}, "min_size <= max_size"),
        ({"pooler": "statement"}, "pooler must be"),
        ({"pooler": "transaction", "prepare": True}, "never saw the PREPARE"),
    ],
)
def test_contradictory_sizes_and_settings_are_refused(options: dict[str, Any], error: str):
    with pytest.raises(ValueError, match=error):
        Database("postgresql://unused", **options)


async def test_a_total_smaller_than_the_workers_or_a_bad_worker_count_is_refused(database_url):
    with pytest.raises(RuntimeError, match="max_total 3 cannot be shared between 4 workers"):
        await Database(database_url, max_total=3, workers=4).open()
    with pytest.raises(ValueError, match="workers must be at least 1, got 0"):
        Database(database_url, workers=0)


async def test_a_pool_the_server_cannot_give_refuses_to_open_and_names_the_numbers(database_url):
    max_connections, reserved = await asyncio.to_thread(server_limits, database_url)
    available = max_connections - reserved
    per_worker = available // 4 + 1  # 4 workers of this just do not fit
    db = Database(database_url, min_size=1, max_size=per_worker, workers=4)
    with pytest.raises(RuntimeError) as refused:
        await db.open()
    assert str(refused.value).startswith(
        f"database pool too large: pool max {per_worker} × 4 workers = {per_worker * 4}"
        f" connections exceeds PostgreSQL's max_connections {max_connections} − {reserved} reserved = {available};"
    )
    assert db.size == 0  # what it had opened is closed again
    fits = Database(database_url, min_size=1, max_total=available, workers=4)  # the whole, shared out: fits
    await fits.open()
    try:
        assert fits.max_size == available // 4
    finally:
        await fits.close()
    behind_a_pooler = Database(database_url, min_size=1, max_size=per_worker, pooler="session")  # not checked
    await behind_a_pooler.open()
    await behind_a_pooler.close()


# -- why requests got 503 -----------------------------------------------------------------


async def test_an_exhausted_pool_says_so_once_per_burst(database_url, caplog):
    db = Database(database_url, min_size=1, max_size=1, acquire_timeout=0.05)
    await db.open()
    try:
        holder = asyncio.create_task(db.fetchval("SELECT pg_sleep(0.4)"))
        await asyncio.sleep(0.05)
        results = await asyncio.gather(*(db.fetchval("SELECT 1") for _ in range(7)), return_exceptions=True)
        assert all(isinstance(result, PoolTimeout) for result in results)
        assert db_lines(caplog, "database pool exhausted") == []  # counted first, then said once
        await holder
        await asyncio.sleep(0.55)
        assert db_lines(caplog, "database pool exhausted") == [
            "database pool exhausted: 7 requests got 503 after waiting 0.05 s for a connection (pool max 1 per"
            " worker × 1 worker); raise the pool size if PostgreSQL has room, or acquire_timeout"
        ]
    finally:
        await db.close()


async def test_connections_refused_for_lack_of_slots_are_said_once_per_burst(database_url, caplog):
    # A role limited to 2 connections (superusers are exempt from such limits) meets
    # PostgreSQL's own refusal, as a pool past max_connections does.
    role = f"aiorest_two_{uuid.uuid4().hex[:8]}"  # roles belong to the whole server
    admin = psycopg2.connect(database_url)
    admin.autocommit = True
    with admin.cursor() as cursor:
        cursor.execute(f"CREATE ROLE {role} LOGIN CONNECTION LIMIT 2")
    try:
        db = Database(with_user(database_url, role), min_size=1, max_size=4)
        await db.open()
        try:
            async with db.connection() as first, db.connection() as second:
                assert await first.fetchval("SELECT 1") == await second.fetchval("SELECT 1") == 1
                for _ in range(3):
                    with pytest.raises(DatabaseUnavailable):
                        await db.fetchval("SELECT 1")
            await asyncio.sleep(0.55)
            [line] = db_lines(caplog, "PostgreSQL refused")
            assert line.startswith(
                "PostgreSQL refused 3 new connections, requests got 503: FATAL:  too many connections for role"
            )
            assert line.endswith("need more than its max_connections")
        finally:
            await db.close()
    finally:
        with admin.cursor() as cursor:
            cursor.execute(f"DROP ROLE {role}")
        admin.close()


# -- a task cancelled mid-statement (cancel_on_disconnect, timeouts) ---------------------------


async def test_a_task_cancelled_mid_statement_in_a_transaction_rolls_back_and_pools_its_connection_clean(
    database_url,
):
    db = Database(database_url, min_size=1, max_size=1, acquire_timeout=5)
    await db.open()
    try:
        await db.execute("CREATE TABLE t (id int PRIMARY KEY, n int)")
        await db.execute("INSERT INTO t VALUES (1, 0)")
        pid = await db.fetchval("SELECT pg_backend_pid()")

        async def handler() -> None:
            async with db.transaction():
                await db.execute("UPDATE t SET n = 1 WHERE id = 1")  # holds the row's lock
                async with db.transaction():  # a savepoint: the whole transaction still goes
                    await db.execute("INSERT INTO t VALUES (2, 2)")
                    await db.fetchval("SELECT pg_sleep(30)")

        task = asyncio.create_task(handler())
        await asyncio.sleep(0.3)
        assert (await asyncio.to_thread(backend_state, database_url, pid))[0] == "active"
        task.cancel()
        began = time.monotonic()
        with pytest.raises(asyncio.CancelledError):  # the cancellation itself, not an error from a ROLLBACK
            await task
        # the task ends without waiting for the statement (30 s): a breakage guard, generous on purpose;
        # the pool cleans up behind it
        assert time.monotonic() - began < 10
        async with asyncio.timeout(2):
            while db.idle != 1:
                await asyncio.sleep(0.01)
        assert db.size == 1 and db.in_use == 0
        state, query = await asyncio.to_thread(backend_state, database_url, pid)
        assert (state, query) == ("idle", "ROLLBACK")  # not "idle in transaction", and pg_sleep is over
        assert await db.fetchval("SELECT pg_backend_pid()") == pid  # the same connection, reused
        assert await db.fetchall("SELECT * FROM t") == [{"id": 1, "n": 0}]  # rolled back, savepoint and all
    finally:
        await db.close()


async def test_a_task_cancelled_mid_statement_outside_a_transaction_gives_its_connection_back(database_url):
    db = Database(database_url, min_size=1, max_size=1, acquire_timeout=5)
    await db.open()
    try:
        pid = await db.fetchval("SELECT pg_backend_pid()")
        for _ in range(3):
            task = asyncio.create_task(db.fetchval("SELECT pg_sleep(30)"))
            await asyncio.sleep(0.1)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            async with asyncio.timeout(2):  # waits for the cancelled statement to end, not for 30 s
                assert await db.fetchval("SELECT pg_backend_pid()") == pid
        assert db.size == db.idle == 1
    finally:
        await db.close()


async def test_closing_the_pool_while_a_cancelled_statement_ends_closes_its_connection(database_url):
    db = Database(database_url, min_size=1, max_size=1)
    await db.open()
    task = asyncio.create_task(db.fetchval("SELECT pg_sleep(30)"))
    await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    async with asyncio.timeout(2):
        await db.close()
    assert db.size == 0


async def test_unprepared_statements_inline_integer_parameters_as_psycopg2_would(database_url):
    db = Database(database_url, min_size=1, max_size=1, prepare=False)
    await db.open()
    try:
        assert await db.fetchrows("SELECT %s::int + %s, '100%%', %s::text, 1-%s", (40, 2, -7, -1)) == [
            (42, "100%", "-7", 2)
        ]
        assert await db.fetchval("SELECT %s::text", (True,)) == "true"  # not an int: psycopg2 adapts it
        with pytest.raises(TypeError):  # psycopg2's own word on a count that does not match
            await db.fetchval("SELECT %s", (1, 2))
        with pytest.raises(IndexError):
            await db.fetchval("SELECT %s, %s", (1,))
        assert await db.fetchval("SELECT count(*) FROM pg_prepared_statements") == 0
    finally:
        await db.close()


async def test_a_task_cancelled_while_its_statement_is_prepared_leaves_the_next_statement_a_fresh_name(database_url):
    """A PREPARE cancelled with its task may have run on the server: its name must not be given again (before, the
    next statement prepared on the connection failed with DuplicatePreparedStatement)."""
    db = Database(database_url, min_size=1, max_size=1, acquire_timeout=5)
    await db.open()
    try:
        for n in range(40):
            task = asyncio.create_task(db.fetchval(f"SELECT %s::int + {n}", (n,)))
            await asyncio.sleep(n * 0.0002)  # cancelled at different steps of sending and running the PREPARE
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            async with asyncio.timeout(5):
                assert await db.fetchval(f"SELECT %s::int - {n}", (n,)) == 0
                assert await db.fetchval(f"SELECT %s::int + {n}", (n,)) == 2 * n
    finally:
        await db.close()

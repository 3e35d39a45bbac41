"""aiorest.db on aiopg: Database(driver="aiopg") and Database.from_aiopg(pool) keep the default driver's API.

Rows as dicts, the helpers, transactions and savepoints, the errors as HTTP
answers, the statement timeout, the capacity check, /readyz and the pool
metrics, PostgresSessionStore and the migrations: each against a real PostgreSQL,
on connections aiorest opens and on connections borrowed from an aiopg pool.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest

from aiorest import App, PostgresSessionStore, Request, Server
from aiorest.db import (
    ConstraintViolation,
    Database,
    InvalidValue,
    NulCharacter,
    StatementTimeout,
    UniqueViolation,
    migrate,
)
from aiorest.middleware.sessions.session import Session

aiopg = pytest.importorskip("aiopg")


@asynccontextmanager
async def database(url: str, flavour: str, **options: Any) -> AsyncIterator[Database]:
    """An open Database on aiopg: connections it opens ("aiopg"), or borrowed from an aiopg pool ("from_aiopg")."""
    if flavour == "aiopg":
        db = Database(url, driver="aiopg", **{"min_size": 1, "max_size": 4, **options})
        await db.open()
        try:
            yield db
        finally:
            await db.close()
        return
    async with aiopg.create_pool(url, minsize=1, maxsize=4) as pool:
        db = Database.from_aiopg(pool, **options)
        await db.open()
        try:
            yield db
        finally:
            await db.close()
        assert pool.freesize == pool.size, "a borrowed connection was not given back"


@pytest.fixture(params=["aiopg", "from_aiopg"])
async def db(request: pytest.FixtureRequest, database_url: str) -> AsyncIterator[Database]:
    async with database(database_url, request.param, statement_timeout=1) as db:
        await db.execute("CREATE TABLE items (id int PRIMARY KEY, qty int NOT NULL CHECK (qty >= 0), name varchar(3))")
        yield db


async def test_rows_and_helpers(db: Database) -> None:
    assert await db.execute("INSERT INTO items (id, qty) VALUES (%s, %s), (%s, %s)", (1, 5, 2, 7)) == 2
    assert await db.fetchone("SELECT id, qty FROM items WHERE id = %s", (1,)) == {"id": 1, "qty": 5}
    assert await db.fetchone("SELECT * FROM items WHERE id = %s", (99,)) is None
    assert await db.fetchall("SELECT id FROM items ORDER BY id") == [{"id": 1}, {"id": 2}]
    assert await db.fetchrows("SELECT id, qty FROM items ORDER BY id") == [(1, 5), (2, 7)]
    assert await db.fetchval("SELECT sum(qty) FROM items") == 12
    assert await db.fetchval("SELECT %(x)s::int * 2", {"x": 21}) == 42


async def test_transactions_and_savepoints(db: Database) -> None:
    async with db.transaction():
        await db.execute("INSERT INTO items (id, qty) VALUES (1, 1)")
        with pytest.raises(UniqueViolation):
            async with db.transaction():  # a savepoint: only it is rolled back
                await db.execute("INSERT INTO items (id, qty) VALUES (2, 2)")
                await db.execute("INSERT INTO items (id, qty) VALUES (1, 1)")
    with pytest.raises(RuntimeError):
        async with db.transaction():
            await db.execute("INSERT INTO items (id, qty) VALUES (3, 3)")
            raise RuntimeError("rolled back")
    assert await db.fetchall("SELECT id FROM items") == [{"id": 1}]
    async with db.connection() as held:
        assert await held.fetchval("SELECT count(*) FROM items") == 1


async def test_errors_are_mapped_as_on_the_default_driver(db: Database) -> None:
    await db.execute("INSERT INTO items (id, qty) VALUES (1, 1)")
    with pytest.raises(UniqueViolation) as conflict:
        await db.execute("INSERT INTO items (id, qty) VALUES (1, 1)")
    assert conflict.value.status == 409 and conflict.value.constraint == "items_pkey"
    with pytest.raises(ConstraintViolation) as refused:
        await db.execute("INSERT INTO items (id, qty) VALUES (2, -1)")
    assert refused.value.status == 422
    with pytest.raises(InvalidValue):
        await db.execute("INSERT INTO items (id, qty, name) VALUES (3, 1, %s)", ("too long",))
    with pytest.raises(NulCharacter):
        await db.execute("INSERT INTO items (id, qty, name) VALUES (4, 1, %s)", ("a\x00",))
    with pytest.raises(StatementTimeout) as timeout:
        await db.fetchval("SELECT pg_sleep(3)")
    assert timeout.value.status == 503 and timeout.value.headers["Retry-After"] == "1"
    assert await db.fetchval("SELECT count(*) FROM items") == 1  # the pool goes on


async def test_a_borrowed_pool_is_shared_and_stays_the_app_s(database_url: str) -> None:
    async with aiopg.create_pool(database_url, minsize=1, maxsize=2) as pool:
        asked = []
        db = Database.from_aiopg(lambda: asked.append(1) or pool)  # resolved at open: a pool an app context makes
        await db.open()
        assert db.max_size == 10  # aiopg's default maxsize: the pool was not known when the Database was made
        assert await db.fetchval("SELECT 1") == 1
        assert await db.fetchval("SELECT 2") == 2
        assert len(asked) == 1  # once, at open: not again for each statement
        assert (db.size, pool.freesize) == (0, pool.size)  # given back at once
        async with pool.acquire() as conn, conn.cursor() as cursor:  # the app's own code, beside it
            await cursor.execute("SELECT 2")
            assert await cursor.fetchone() == (2,)
        await db.close()
        assert not pool.closed


async def test_the_capacity_check_covers_both_flavours(database_url: str) -> None:
    too_large = "database pool too large: pool max 4000 × 2 workers"
    with pytest.raises(RuntimeError, match=too_large):
        await Database(database_url, driver="aiopg", min_size=1, max_size=4000, workers=2).open()
    async with aiopg.create_pool(database_url, minsize=0, maxsize=4) as pool:
        db = Database.from_aiopg(pool, max_size=4000, workers=2)
        with pytest.raises(RuntimeError, match=too_large):
            await db.open()
        assert pool.freesize == pool.size  # the connection borrowed for the check went back


@pytest.mark.parametrize("flavour", ["aiopg", "from_aiopg"])
async def test_http_answers_readyz_and_metrics(database_url: str, flavour: str) -> None:
    pytest.importorskip("prometheus_client")
    async with database(database_url, flavour) as db:
        await db.execute("CREATE TABLE things (id int PRIMARY KEY)")
        app = App()
        app.database = db  # what Database.setup sets: the server hands it to /readyz and the metrics

        @app.post("/things/{id:int}")
        async def add(request: Request) -> dict[str, int]:
            await db.execute("INSERT INTO things VALUES (%s)", (request.path_params["id"],))
            return {"id": request.path_params["id"]}

        server = Server(app, port=0, health=True, metrics=True)
        await server.start()
        try:
            async with aiohttp.ClientSession(server.url) as session:
                assert (await session.post("/things/1")).status == 200
                async with session.post("/things/1") as response:
                    assert response.status == 409 and (await response.json())["error"]["status"] == 409
                async with session.get("/readyz") as response:
                    assert response.status == 200, await response.text()
                server.metrics.sample()  # type: ignore[union-attr]
                async with session.get("/metrics") as response:
                    text = await response.text()
                assert f"aiorest_db_pool_max_size {float(db.max_size)}" in text
        finally:
            await server.stop(timeout=2)


@pytest.mark.parametrize("flavour", ["aiopg", "from_aiopg"])
async def test_sessions_and_migrations(database_url: str, flavour: str, tmp_path: Any) -> None:
    (tmp_path / "0001_notes.sql").write_text("CREATE TABLE notes (id int PRIMARY KEY);")
    async with database(database_url, flavour) as db:
        assert [m.version for m in await migrate(db, tmp_path)] == [1]
        assert [m.version for m in await migrate(db, "aiorest:sessions")] == [-1]
        store = PostgresSessionStore(db)
        session = Session({"user": "ann"})
        session_id = await store.save(session, 60)
        loaded = await store.load(session_id, 60)
        assert loaded is not None and dict(loaded) == {"user": "ann"}


def test_aiorest_migrate_on_the_aiopg_driver(database_url: str, tmp_path: Any) -> None:
    (tmp_path / "0001_notes.sql").write_text("CREATE TABLE notes (id int PRIMARY KEY);")
    command = [sys.executable, "-m", "aiorest", "migrate", "--dir", str(tmp_path), "--dsn", database_url]
    done = subprocess.run([*command, "--driver", "aiopg"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "1 migration(s) applied" in done.stdout, done.stderr

"""The example app's TechEmpower endpoints follow the TFB rules (shared/TFB.md)."""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from collections import Counter
from collections.abc import Iterator
from html import unescape
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg2
import pytest

import aiorest.db.psycopg2_driver
from aiorest.db import Database, load_migrations, migrate, migration_status
from example_app import create_app
from example_app.app import MIGRATIONS

FORTUNE_HEAD = (
    "<!DOCTYPE html><html><head><title>Fortunes</title></head><body><table><tr><th>id</th><th>message</th></tr>"
)


@pytest.fixture
async def client(aiorest_client, shared_database_url):
    app = create_app(Database(shared_database_url, min_size=2, max_size=8))
    return await aiorest_client(app)


@pytest.fixture
def statements(monkeypatch) -> Counter[str]:
    """Every statement the app sends to PostgreSQL, counted by its first word and table."""
    seen: Counter[str] = Counter()
    original = aiorest.db.psycopg2_driver.Psycopg2Connection.execute

    async def counting(self, sql, params=None, *, prepare=True):
        words = sql.split()
        seen[f"{words[0].upper()} {'world' if 'world' in sql else 'fortune' if 'fortune' in sql else '?'}"] += 1
        return await original(self, sql, params, prepare=prepare)

    monkeypatch.setattr(aiorest.db.psycopg2_driver.Psycopg2Connection, "execute", counting)
    return seen


async def test_every_response_has_server_date_type_and_length(client):
    for path, content_type in [
        ("/json", "application/json"),
        ("/plaintext", "text/plain; charset=utf-8"),
        ("/db", "application/json"),
        ("/queries?queries=2", "application/json"),
        ("/fortunes", "text/html; charset=utf-8"),
        ("/updates?queries=2", "application/json"),
    ]:
        async with client.get(path) as response:
            assert response.status == 200, path
            assert response.headers["Server"] == "aiorest"
            assert response.headers["Date"].endswith(" GMT")
            assert response.headers["Content-Type"] == content_type
            assert int(response.headers["Content-Length"]) == len(await response.read())
            assert "Content-Encoding" not in response.headers


async def test_json_and_plaintext(client):
    async with client.get("/json") as response:
        assert await response.read() == b'{"message":"Hello, World!"}'
    async with client.get("/plaintext") as response:
        assert await response.read() == b"Hello, World!"


async def test_db_returns_one_world_row_with_one_select(client, statements):
    async with client.get("/db") as response:
        row = await response.json()
    assert set(row) == {"id", "randomNumber"}
    assert 1 <= row["id"] <= 10000 and 1 <= row["randomNumber"] <= 10000
    assert statements["SELECT world"] == 1


@pytest.mark.parametrize(
    ("query", "count"),
    [
        ("", 1),
        ("?queries=", 1),
        ("?queries=0", 1),
        ("?queries=foo", 1),
        ("?queries=-3", 1),
        ("?queries=7", 7),
        ("?queries=007", 7),
        ("?queries=1_0", 1),  # Python's int() reads 10
        ("?queries=%205", 1),  # and 5
        ("?queries=501", 500),
        ("?queries=" + "9" * 5000, 500),  # more digits than int() converts
    ],
)
async def test_queries_clamps_and_runs_one_select_per_row(client, statements, query, count):
    async with client.get(f"/queries{query}") as response:
        rows = await response.json()
    assert len(rows) == count
    assert all(set(row) == {"id", "randomNumber"} for row in rows)
    assert statements["SELECT world"] == count


async def test_fortunes_are_escaped_sorted_and_include_the_added_one(client, statements):
    async with client.get("/fortunes") as response:
        html = await response.text()
    assert html.startswith(FORTUNE_HEAD) and html.endswith("</table></body></html>")
    assert (
        "<tr><td>11</td><td>&lt;script&gt;alert(&quot;This should not be displayed in a browser alert box."
        "&quot;);&lt;/script&gt;</td></tr>" in html
    )
    assert "<tr><td>12</td><td>フレームワークのベンチマーク</td></tr>" in html
    rows = html[len(FORTUNE_HEAD) : -len("</table></body></html>")].split("</tr>")[:-1]
    messages = [unescape(row.split("<td>")[2].removesuffix("</td>")) for row in rows]
    assert len(messages) == 13 and messages == sorted(messages)
    assert "Additional fortune added at request time." in messages
    assert statements["SELECT fortune"] == 1


async def test_updates_persist_every_row_with_one_bulk_update(client, statements):
    async with client.get("/updates?queries=20") as response:
        rows = await response.json()
    assert len(rows) == 20
    assert statements["SELECT world"] == 20 and statements["UPDATE world"] == 1
    db = Database(client.app.state.db.dsn, min_size=1, max_size=1)
    await db.open()
    try:
        for row in rows:
            stored = await db.fetchval("SELECT randomnumber FROM world WHERE id = %s", (row["id"],))
            assert stored == row["randomNumber"]
    finally:
        await db.close()


async def test_concurrent_updates_neither_deadlock_nor_fail(client):
    async def update() -> int:
        async with client.get("/updates?queries=20") as response:
            return response.status

    assert await asyncio.gather(*(update() for _ in range(30))) == [200] * 30


async def test_the_seed_data_is_tfb_s(client):
    db = Database(client.app.state.db.dsn, min_size=1, max_size=1)
    await db.open()
    try:
        assert await db.fetchval("SELECT count(*) FROM world") == 10000
        assert await db.fetchval("SELECT count(*) FROM world WHERE randomnumber NOT BETWEEN 1 AND 10000") == 0
        assert await db.fetchval("SELECT count(*) FROM fortune") == 12
        assert await db.fetchval("SELECT message FROM fortune WHERE id = 12") == "フレームワークのベンチマーク"
    finally:
        await db.close()


# TechEmpower's database image (toolset/databases/postgres/ in TechEmpower/FrameworkBenchmarks)
# runs create-postgres-database.sql as postgres, then create-postgres.sql in the new database.
TFB_FORTUNES = (
    "fortune: No such file or directory",
    "A computer scientist is someone who fixes things that aren't broken.",
    "After enough decimal places, nobody gives a damn.",
    "A bad random number generator: 1, 1, 1, 1, 1, 4.33e+67, 1, 1, 1",
    "A computer program does what you tell it to do, not what you want it to do.",
    "Emacs is a nice operating system, but I prefer UNIX. — Tom Christaensen",
    "Any program that runs right is obsolete.",
    "A list is only as strong as its weakest link. — Donald Knuth",
    "Feature: A bug with seniority.",
    "Computers make very fast, very accurate mistakes.",
    '<script>alert("This should not be displayed in a browser alert box.");</script>',
    "フレームワークのベンチマーク",
)


def tfb_create_postgres_sql(*, stat_statements: bool) -> str:
    """create-postgres.sql, statement for statement: World and Fortune, unquoted and then quoted.

    ``stat_statements``: whether the server has the pg_stat_statements extension
    (the embedded PostgreSQL has not; TFB's image has).
    """
    statements = ["BEGIN;"]
    if stat_statements:
        statements.append("CREATE EXTENSION IF NOT EXISTS pg_stat_statements;")
    for world, fortune in (("World", "Fortune"), ('"World"', '"Fortune"')):
        statements += [
            f"CREATE TABLE  {world} (id integer NOT NULL, randomNumber integer NOT NULL default 0, PRIMARY KEY  (id));",
            f"GRANT ALL PRIVILEGES ON {world} to benchmarkdbuser;",
            f"INSERT INTO {world} (id, randomnumber) "
            "SELECT x.id, least(floor(random() * 10000 + 1), 10000) FROM generate_series(1,10000) as x(id);",
            f"CREATE TABLE {fortune} (id integer NOT NULL, message varchar(2048) NOT NULL, PRIMARY KEY  (id));",
            f"GRANT ALL PRIVILEGES ON {fortune} to benchmarkdbuser;",
        ]
        for id_, message in enumerate(TFB_FORTUNES, 1):
            quoted = message.replace("'", "''")
            statements.append(f"INSERT INTO {fortune} (id, message) VALUES ({id_}, '{quoted}');")
    statements.append("COMMIT;")
    return "\n".join(statements)


@pytest.fixture
def tfb_database_url(pg_server: str) -> Iterator[str]:
    """A database made the way TechEmpower's image makes hello_world; the URL logs in as benchmarkdbuser.

    Where it differs: the database gets a name of its own, so that it never meets
    a real hello_world on $DATABASE_URL's server; the role is created only if the
    server lacks it (and then dropped afterwards); pg_stat_statements only where
    the server has it.
    """
    name = f"hello_world_{uuid.uuid4().hex[:12]}"
    admin = psycopg2.connect(pg_server)
    admin.autocommit = True
    created_role = False
    try:
        with admin.cursor() as cursor:
            cursor.execute("SELECT 1 FROM pg_roles WHERE rolname = 'benchmarkdbuser'")
            if cursor.fetchone() is None:
                cursor.execute("CREATE USER benchmarkdbuser WITH PASSWORD 'benchmarkdbpass'")
                cursor.execute("ALTER USER benchmarkdbuser WITH SUPERUSER")
                created_role = True
            cursor.execute(f"CREATE DATABASE {name} WITH TEMPLATE = template0 ENCODING 'UTF8'")
            cursor.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'pg_stat_statements'")
            stat_statements = cursor.fetchone() is not None
        parts = urlsplit(pg_server)
        tfb = psycopg2.connect(urlunsplit(parts._replace(path="/" + name)))
        tfb.autocommit = True  # the script has its own BEGIN and COMMIT, as psql runs it
        try:
            with tfb.cursor() as cursor:
                cursor.execute(tfb_create_postgres_sql(stat_statements=stat_statements))
        finally:
            tfb.close()
        host = parts.netloc.rpartition("@")[2]
        yield urlunsplit(parts._replace(netloc=f"benchmarkdbuser:benchmarkdbpass@{host}", path="/" + name))
        with admin.cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                (name,),
            )
            cursor.execute(f"DROP DATABASE IF EXISTS {name}")
            if created_role:
                cursor.execute("DROP ROLE benchmarkdbuser")
    finally:
        admin.close()


async def test_the_app_adopts_techempower_s_own_database(aiorest_client, tfb_database_url):
    # Two instances start at once, as workers do; each migrates in its startup hook.
    clients = await asyncio.gather(
        *(aiorest_client(create_app(Database(tfb_database_url, min_size=1, max_size=4))) for _ in range(2))
    )
    db = Database(tfb_database_url, min_size=1, max_size=1)
    await db.open()
    try:
        stored = dict(await db.fetchrows("SELECT id, randomnumber FROM world"))
        for client in clients:
            async with client.get("/db") as response:
                row = await response.json()
            assert stored[row["id"]] == row["randomNumber"]
            async with client.get("/queries?queries=20") as response:
                rows = await response.json()
            assert len(rows) == 20 and all(stored[row["id"]] == row["randomNumber"] for row in rows)
            async with client.get("/fortunes") as response:
                html = await response.text()
            cells = [row.removeprefix("<tr><td>").split("</td><td>") for row in html.split("</tr>")[1:-1]]
            served = [(int(id_), unescape(message.removesuffix("</td>"))) for id_, message in cells]
            expected = [*enumerate(TFB_FORTUNES, 1), (0, "Additional fortune added at request time.")]
            assert served == sorted(expected, key=lambda row: row[1])
            async with client.get("/updates?queries=20") as response:
                updated = await response.json()
            stored = dict(await db.fetchrows("SELECT id, randomnumber FROM world"))
            assert len(updated) == 20 and all(stored[row["id"]] == row["randomNumber"] for row in updated)

        assert await db.fetchrows("SELECT count(*), min(id), max(id) FROM world") == [(10000, 1, 10000)]
        assert await db.fetchrows("SELECT id, message FROM fortune ORDER BY id") == list(enumerate(TFB_FORTUNES, 1))
        assert await db.fetchval('SELECT count(*) FROM "World"') == 10000
        assert await db.fetchval('SELECT count(*) FROM "Fortune"') == 12
        assert [state for _, state in await migration_status(db, MIGRATIONS)] == ["applied"] * 5
        recorded = await db.fetchrows(  # the app's: aiorest's own (sessions) are under negative versions
            "SELECT version, checksum FROM aiorest_migrations WHERE version > 0 ORDER BY version"
        )
        assert recorded == [(m.version, m.checksum) for m in load_migrations(MIGRATIONS)]
    finally:
        await db.close()


WORLD_TABLE = "CREATE TABLE world (id integer PRIMARY KEY, randomnumber integer NOT NULL DEFAULT 0);"
FORTUNE_TABLE = "CREATE TABLE fortune (id integer PRIMARY KEY, message varchar(2048) NOT NULL);"


@pytest.mark.parametrize(
    ("before", "kept_worlds", "kept_fortunes"),
    [
        pytest.param(WORLD_TABLE + FORTUNE_TABLE, 0, {}, id="both-empty"),
        pytest.param(
            WORLD_TABLE + "INSERT INTO world SELECT x, 7 FROM generate_series(1, 4000) AS x;",
            4000,
            {},
            id="world-partly-filled-no-fortune",
        ),
        pytest.param(
            FORTUNE_TABLE + "INSERT INTO fortune VALUES (3, 'mine'), (40, 'also mine');",
            0,
            {3: "mine", 40: "also mine"},
            id="fortune-partly-filled-no-world",
        ),
        pytest.param(
            WORLD_TABLE + "INSERT INTO world SELECT x, 7 FROM generate_series(1, 10000) AS x;",
            10000,
            {},
            id="world-full-no-fortune",
        ),
    ],
)
async def test_migrations_fill_in_only_what_is_missing(database_url, before, kept_worlds, kept_fortunes):
    db = Database(database_url, min_size=1, max_size=4)
    await db.open()
    try:
        async with db.connection() as conn:
            await conn.execute_script(before)
        # Workers starting at once; every run ends before the test looks.
        results = await asyncio.gather(*(migrate(db, MIGRATIONS) for _ in range(3)), return_exceptions=True)
        assert sorted(m.version for applied in results for m in applied) == [1, 2, 3, 4, 5], results  # each once
        assert await db.fetchrows("SELECT count(*), min(id), max(id) FROM world") == [(10000, 1, 10000)]
        assert await db.fetchval("SELECT count(*) FROM world WHERE id <= %s AND randomnumber <> 7", (kept_worlds,)) == 0
        assert await db.fetchval("SELECT count(*) FROM world WHERE randomnumber NOT BETWEEN 1 AND 10000") == 0
        fortunes = dict(await db.fetchrows("SELECT id, message FROM fortune"))
        assert fortunes == {**dict(enumerate(TFB_FORTUNES, 1)), **kept_fortunes}
    finally:
        await db.close()


# migrations/0002's first text (git show ee07db5:migrations/0002_techempower.sql), kept as a
# file so that the test needs no git history: the checksum every deployment of it recorded.
FIRST_0002 = Path(__file__).resolve().parent / "data" / "0002_techempower_first.sql"


async def test_a_database_migrated_by_the_first_0002_still_migrates(database_url, tmp_path):
    first = FIRST_0002.read_text(encoding="utf-8")
    assert f"-- aiorest:supersedes {hashlib.sha256(first.encode()).hexdigest()}" in (
        MIGRATIONS / "0002_techempower.sql"
    ).read_text(encoding="utf-8")
    (tmp_path / "0001_notes.sql").write_text((MIGRATIONS / "0001_notes.sql").read_text(encoding="utf-8"))
    (tmp_path / "0002_techempower.sql").write_text(first, encoding="utf-8")
    db = Database(database_url, min_size=1, max_size=1)
    await db.open()
    try:
        await migrate(db, tmp_path)  # a deployment of the example app before 0002 was rewritten
        numbers = await db.fetchrows("SELECT id, randomnumber FROM world ORDER BY id")
        assert [m.version for m in await migrate(db, MIGRATIONS)] == [3, 4, 5]  # 0002 is not run again
        assert [state for _, state in await migration_status(db, MIGRATIONS)] == ["applied"] * 5
        assert await db.fetchval("SELECT checksum FROM aiorest_migrations WHERE version = 2") == (
            hashlib.sha256(first.encode()).hexdigest()
        )
        assert await db.fetchrows("SELECT id, randomnumber FROM world ORDER BY id") == numbers
        assert await db.fetchval("SELECT count(*) FROM fortune") == 12
    finally:
        await db.close()

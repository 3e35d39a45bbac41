"""Issue 19, point 8: aiorest behind a real PgBouncer (Debian's 1.18) in transaction mode.

PgBouncer 1.18 hands each transaction (each statement, in autocommit) to whichever server
connection is free: a PREPARE made on one is missing on the next, and a session's SET stays
on a server connection that other clients get. ``Database(pooler="transaction")`` neither
prepares nor SETs; its statement timeout is a cancel request sent from the client.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psycopg2
import pytest

from aiorest.db import Database, StatementTimeout, UniqueViolation
from example_app.app import MIGRATE_ARGS
from harness.pgbouncer import database_name, run_pgbouncer
from harness.ports import free_port
from harness.processes import stop_process

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(
    shutil.which("pgbouncer") is None and not os.path.exists("/usr/sbin/pgbouncer"),
    reason="pgbouncer is not installed (.ci/run installs it)",
)


@pytest.fixture
def pooled(pg_server: str, database_url: str) -> Iterator[str]:
    """``database_url``'s database through PgBouncer in transaction mode (4 server connections)."""
    with run_pgbouncer(pg_server, pool_size=4) as template:
        yield template.format(database=database_name(database_url))


async def test_prepared_statements_break_in_transaction_mode_and_the_pooler_setting_mends_it(pooled):
    # PgBouncer gives the most recently freed server connection first: the PREPARE
    # lands on S1; a transaction then holds S1, so the EXECUTE runs on S2.
    async def sequence(db: Database) -> None:
        async with db.connection() as first:
            assert await first.fetchval("SELECT %s::int + 1", (1,)) == 2  # prepared (or not) on S1
            async with db.connection() as other, other.transaction():
                await other.fetchval("SELECT pg_backend_pid()")  # holds S1 until the block ends
                assert await first.fetchval("SELECT %s::int + 1", (2,)) == 3  # on S2

    naive = Database(pooled, min_size=2, max_size=2)  # prepare=True, as for a direct connection
    await naive.open()
    try:
        # The other client's PREPARE meets this one's on S1, or this EXECUTE misses it on S2.
        with pytest.raises(psycopg2.Error, match='prepared statement "aiorest_0" (already exists|does not exist)'):
            await sequence(naive)
    finally:
        await naive.close()
    pooler = Database(pooled, min_size=2, max_size=2, pooler="transaction")
    await pooler.open()
    try:
        await sequence(pooler)
        assert pooler.prepare is False
    finally:
        await pooler.close()


async def test_transactions_savepoints_errors_and_timeouts_hold_behind_pgbouncer(pooled, database_url):
    db = Database(pooled, min_size=2, max_size=6, pooler="transaction", statement_timeout=0.5)
    await db.open()
    try:
        await db.execute("CREATE TABLE items (id int PRIMARY KEY, qty int NOT NULL CHECK (qty >= 0))")
        async with db.transaction() as tx:
            pid = await tx.fetchval("SELECT pg_backend_pid()")
            await tx.execute("INSERT INTO items VALUES (1, 1)")
            with pytest.raises(RuntimeError):
                async with db.transaction():
                    await db.execute("INSERT INTO items VALUES (2, 2)")
                    raise RuntimeError("undo the savepoint only")
            assert await db.fetchval("SELECT pg_backend_pid()") == pid  # one server connection throughout
        assert await db.fetchall("SELECT id FROM items") == [{"id": 1}]
        with pytest.raises(UniqueViolation):
            await db.execute("INSERT INTO items VALUES (1, 5)")
        # No session SET reached a server connection: other clients of PgBouncer keep their defaults...
        other = psycopg2.connect(pooled)
        try:
            with other.cursor() as cursor:
                for _ in range(6):
                    cursor.execute("SHOW statement_timeout")
                    assert cursor.fetchone() == ("0",)
        finally:
            other.close()
        # ...and the statement timeout holds all the same: a cancel request, the connection kept.
        began = time.monotonic()
        with pytest.raises(StatementTimeout):
            await db.fetchval("SELECT pg_sleep(5)")
        assert time.monotonic() - began < 4  # a breakage guard, generous on purpose: not the 5 s of pg_sleep
        assert await db.fetchval("SELECT 1") == 1
        assert db.size == db.idle
        # A task cancelled mid-statement in a transaction: rolled back, its connection pooled clean.
        task = asyncio.create_task(cancelled_write(db))
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        async with asyncio.timeout(2):
            while db.in_use:
                await asyncio.sleep(0.01)
        assert await db.fetchval("SELECT qty FROM items WHERE id = 1") == 1
        assert await db.fetchval("SELECT count(*) FROM pg_stat_activity WHERE state LIKE 'idle in transaction%'") == 0
    finally:
        await db.close()


async def cancelled_write(db: Database) -> None:
    async with db.transaction():
        await db.execute("UPDATE items SET qty = 0 WHERE id = 1")
        await db.fetchval("SELECT pg_sleep(0.4)")  # under the statement timeout: only the cancel ends it


async def test_the_pool_reconnects_when_pgbouncer_restarts(pg_server, database_url):
    with run_pgbouncer(pg_server, pool_size=2) as template:
        url = template.format(database=database_name(database_url))
        db = Database(url, min_size=2, max_size=2, pooler="transaction", acquire_timeout=2)
        await db.open()
    try:
        # PgBouncer is gone: its connections are lost and requests get 503, not a hang.
        async with asyncio.timeout(2):
            while db.size:
                await asyncio.sleep(0.02)
        with pytest.raises(Exception) as failed:
            await db.fetchval("SELECT 1")
        assert getattr(failed.value, "status", None) == 503
        port = int(re.search(r":(\d+)/", url).group(1))
        with run_pgbouncer(pg_server, pool_size=2, port=port):
            async with asyncio.timeout(5):
                while True:
                    try:
                        assert await db.fetchval("SELECT 1") == 1
                        break
                    except Exception as exc:  # noqa: BLE001 - 503 until the pool has reconnected
                        assert getattr(exc, "status", None) == 503, exc
                        await asyncio.sleep(0.1)
            assert db.size == 2
    finally:
        await db.close()


# -- the example app behind PgBouncer under load -----------------------------------------------

NOTE_POST = """wrk.method = "POST"
wrk.body = '{"title": "through pgbouncer", "body": "x"}'
wrk.headers["Content-Type"] = "application/json"
"""
NOTE_PATCH = """wrk.method = "PATCH"
wrk.body = '{"done": true}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["If-Match"] = "*"
"""


def post(url: str, payload: dict, headers: dict[str, str] | None = None) -> dict:
    data = json.dumps(payload).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json", **(headers or {})})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def bearer_token(base: str) -> str:
    """A user's token: logged in once (POST /tokens, an argon2 hash), sent by every wrk request."""
    account = {"username": "pgbouncer", "password": "through pgbouncer"}
    post(f"{base}/users", account)
    return str(post(f"{base}/tokens", account)["token"])


def run_wrk(url: str, seconds: int = 1, script: Path | None = None) -> tuple[int, str]:
    command = ["wrk", "-t1", "-c64", f"-d{seconds}s", "--timeout", "10s", url]
    if script is not None:
        command[1:1] = ["-s", str(script)]
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    return int(re.search(r"(\d+) requests in", output).group(1)), output


@pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk is not installed (.ci/run installs it)")
def test_the_example_app_behind_pgbouncer_under_load_answers_every_request(pg_server, database_url, tmp_path):
    migrations = list(MIGRATE_ARGS)  # the logins' sessions table, the app's own
    subprocess.run(  # migrations go to PostgreSQL itself (docs/deployment.rst says why)
        [sys.executable, "-m", "aiorest", "migrate", *migrations, "--dsn", database_url],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    port = free_port()
    log = tmp_path / "service.log"
    with run_pgbouncer(pg_server, pool_size=8) as template:
        env = {key: value for key, value in os.environ.items() if not key.startswith(("DATABASE_", "AIOREST_"))}
        env.update(
            DATABASE_URL=template.format(database=database_name(database_url)),
            DATABASE_POOLER="transaction",
            PYTHONPATH=str(ROOT),
        )
        command = [sys.executable, "-m", "aiorest", "run", "example_app.app:app", "--port", str(port), "--workers", "2"]
        with log.open("wb") as output:
            service = subprocess.Popen(command, cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 30
            while log.read_text().count("aiorest serving on") < 2:
                assert service.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.1)
            base = f"http://127.0.0.1:{port}"
            token = bearer_token(base)  # the notes are a user's: every notes request sends the token
            auth = f'wrk.headers["Authorization"] = "Bearer {token}"\n'
            (tmp_path / "auth.lua").write_text(auth)
            (tmp_path / "post.lua").write_text(NOTE_POST + auth)
            (tmp_path / "patch.lua").write_text(NOTE_PATCH + auth)
            note = post(f"{base}/notes", {"title": "patched through pgbouncer"}, {"Authorization": f"Bearer {token}"})
            run_wrk(f"{base}/notes", script=tmp_path / "post.lua")  # notes to list
            loads = [
                (f"{base}/db", None),
                (f"{base}/queries?queries=5", None),
                (f"{base}/updates?queries=5", None),
                (f"{base}/fortunes", None),
                (f"{base}/notes?limit=20", tmp_path / "auth.lua"),
                (f"{base}/notes", tmp_path / "post.lua"),
                (f"{base}/notes/{note['id']}", tmp_path / "patch.lua"),
            ]
            for url, script in loads:
                requests, output = run_wrk(url, script=script)
                assert requests > 100, (url, output)
                assert "Non-2xx or 3xx responses" not in output, (url, output, log.read_text()[-3000:])
                assert "Socket errors" not in output, (url, output)
            assert service.poll() is None, log.read_text()
        finally:
            stop_process(service, 15)
    text = log.read_text()
    assert " WARNING " not in text and " ERROR " not in text, text


async def test_runners_migrating_at_once_behind_pgbouncer_apply_each_migration_once(pooled, tmp_path):
    # The advisory lock is taken in each migration's transaction: behind PgBouncer a
    # session lock would be taken on one server connection and released on another.
    from aiorest.db import migrate

    (tmp_path / "0001_things.sql").write_text("CREATE TABLE pooled_things (id int);")
    (tmp_path / "0002_slow.sql").write_text("SELECT pg_sleep(0.2); INSERT INTO pooled_things VALUES (2);")
    (tmp_path / "0003_more.sql").write_text("INSERT INTO pooled_things VALUES (3);")
    dbs = [Database(pooled, min_size=1, max_size=1, pooler="transaction") for _ in range(3)]
    for db in dbs:
        await db.open()
    try:
        results = await asyncio.gather(*(migrate(db, tmp_path) for db in dbs))
        assert sorted(m.version for applied in results for m in applied) == [1, 2, 3]
        assert await dbs[0].fetchval("SELECT count(*) FROM pooled_things") == 2
        assert await dbs[0].fetchval("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'") == 0
    finally:
        for db in dbs:
            await db.close()


async def test_listen_behind_pgbouncer_in_transaction_mode_goes_to_postgresql(pooled, database_url):
    # A LISTEN needs a session, which transaction mode does not keep: listen_dsn names PostgreSQL itself,
    # while the NOTIFY goes through PgBouncer like any statement.
    db = Database(pooled, min_size=1, max_size=2, pooler="transaction", listen_dsn=database_url)
    await db.open()
    try:
        async with db.listen("through") as subscription:
            await db.fetchval("SELECT pg_notify('through', 'hello')")
            item = await asyncio.wait_for(anext(subscription), 10)
            assert item.payload == "hello"
    finally:
        await db.close()

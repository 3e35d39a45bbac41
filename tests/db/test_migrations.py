"""The migration runner: order, checksums, concurrency, the CLI."""

from __future__ import annotations

import asyncio
import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from aiorest.db import Database, MigrationError, load_migrations, migrate, migration_status


def write(folder: Path, name: str, sql: str) -> None:
    (folder / name).write_text(sql, encoding="utf-8")


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    write(tmp_path, "0001_things.sql", "CREATE TABLE things (id int PRIMARY KEY);")
    write(tmp_path, "0002_seed.sql", "INSERT INTO things VALUES (1), (2); -- 100% seeded")
    return tmp_path


async def open_db(url: str) -> Database:
    db = Database(url, min_size=1, max_size=2)
    await db.open()
    return db


async def test_applies_in_order_once_and_reports_status(database_url, folder):
    db = await open_db(database_url)
    try:
        assert [m.version for m in await migrate(db, folder)] == [1, 2]
        assert await migrate(db, folder) == []
        assert await db.fetchval("SELECT count(*) FROM things") == 2
        write(folder, "0003_more.sql", "INSERT INTO things VALUES (3);")
        assert [(m.version, state) for m, state in await migration_status(db, folder)] == [
            (1, "applied"),
            (2, "applied"),
            (3, "pending"),
        ]
        assert [m.version for m in await migrate(db, folder)] == [3]
    finally:
        await db.close()


async def test_concurrent_runs_apply_each_migration_once(database_url, folder):
    write(folder, "0003_slow.sql", "SELECT pg_sleep(0.3); INSERT INTO things VALUES (3);")
    dbs = [await open_db(database_url) for _ in range(4)]
    try:
        results = await asyncio.gather(*(migrate(db, folder) for db in dbs))
        # each once, in order, whichever runner took it (each migration is one locked transaction)
        versions = sorted(migration.version for applied in results for migration in applied)
        assert versions == [1, 2, 3]
        assert all([m.version for m in applied] == sorted(m.version for m in applied) for applied in results)
        assert await dbs[0].fetchval("SELECT count(*) FROM things") == 3
        assert await dbs[0].fetchval("SELECT count(*) FROM aiorest_migrations") == 3
    finally:
        for db in dbs:
            await db.close()


async def test_an_edited_migration_is_refused(database_url, folder):
    db = await open_db(database_url)
    try:
        await migrate(db, folder)
        write(folder, "0002_seed.sql", "INSERT INTO things VALUES (1), (2), (5);")
        with pytest.raises(MigrationError, match="0002_seed.sql was changed"):
            await migrate(db, folder)
        assert [state for _, state in await migration_status(db, folder)] == ["applied", "edited"]
    finally:
        await db.close()


async def test_a_failing_migration_rolls_back_and_is_not_recorded(database_url, folder):
    write(folder, "0003_broken.sql", "INSERT INTO things VALUES (3); INSERT INTO nowhere VALUES (1);")
    db = await open_db(database_url)
    try:
        with pytest.raises(Exception, match="nowhere"):
            await migrate(db, folder)
        assert await db.fetchval("SELECT count(*) FROM things") == 2  # 0003's first insert rolled back
        assert await db.fetchval("SELECT max(version) FROM aiorest_migrations") == 2
    finally:
        await db.close()


def test_bad_file_names_and_duplicate_versions(tmp_path):
    write(tmp_path, "0001_a.sql", "")
    write(tmp_path, "1_b.sql", "")
    with pytest.raises(MigrationError, match="version 1"):
        load_migrations(tmp_path)
    (tmp_path / "1_b.sql").unlink()
    write(tmp_path, "second.sql", "")
    with pytest.raises(MigrationError, match="NNNN_name.sql"):
        load_migrations(tmp_path)
    with pytest.raises(MigrationError, match="no migrations folder"):
        load_migrations(tmp_path / "missing")


def test_cli_migrate_and_status(database_url, folder):
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "aiorest", "migrate", *args, "--dir", str(folder), "--dsn", database_url],
            capture_output=True,
            text=True,
            timeout=60,
        )

    first = run()
    assert first.returncode == 0, first.stderr
    assert "applied 0001 things" in first.stdout and "2 migration(s) applied" in first.stdout
    status = run("status")
    assert "0002 seed" in status.stdout and "applied" in status.stdout
    write(folder, "0001_things.sql", "CREATE TABLE things (id bigint PRIMARY KEY);")
    refused = run()
    assert refused.returncode == 1 and "changed after it was applied" in refused.stderr


def test_cli_applies_several_folders_in_the_order_given(database_url, folder):
    command = [sys.executable, "-m", "aiorest", "migrate", "--dir", "aiorest:sessions", "--dir", str(folder)]
    done = subprocess.run([*command, "--dsn", database_url], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "applied -001 create_sessions",
        "1 migration(s) applied",
        "applied 0001 things",
        "applied 0002 seed",
        "2 migration(s) applied",
    ]


def checksum(sql: str) -> str:
    return hashlib.sha256(sql.encode()).hexdigest()


async def test_a_rewrite_naming_the_applied_text_counts_as_applied(database_url, folder):
    db = await open_db(database_url)
    try:
        await migrate(db, folder)
        applied = (folder / "0002_seed.sql").read_text(encoding="utf-8")
        write(
            folder,
            "0002_seed.sql",
            f"-- Seeds only the missing rows.\n-- aiorest:supersedes {checksum('an older text')}\n"
            f"--   aiorest:supersedes   {checksum(applied)}\n\n"
            "INSERT INTO things SELECT x FROM generate_series(1, 2) AS x ON CONFLICT DO NOTHING;",
        )
        assert await migrate(db, folder) == []  # not run again: the database ran a text it names
        assert [state for _, state in await migration_status(db, folder)] == ["applied", "applied"]
        assert await db.fetchval("SELECT checksum FROM aiorest_migrations WHERE version = 2") == checksum(applied)
        assert await db.fetchval("SELECT count(*) FROM things") == 2
    finally:
        await db.close()


async def test_a_rewrite_naming_another_text_is_still_refused(database_url, folder):
    db = await open_db(database_url)
    try:
        await migrate(db, folder)
        applied = checksum((folder / "0001_things.sql").read_text(encoding="utf-8"))
        write(folder, "0001_things.sql", f"-- aiorest:supersedes {checksum('another text')}\nSELECT 1;")
        with pytest.raises(MigrationError, match=f"0001_things.sql was changed.*supersedes {applied}"):
            await migrate(db, folder)
        # Only the comment lines that open the file name superseded texts.
        write(folder, "0001_things.sql", f"SELECT 1;\n-- aiorest:supersedes {applied}\n")
        with pytest.raises(MigrationError, match="0001_things.sql was changed"):
            await migrate(db, folder)
        assert [state for _, state in await migration_status(db, folder)] == ["edited", "applied"]
    finally:
        await db.close()


@pytest.mark.parametrize("named", ["", "E4F2", "e4f2" * 16 + ",", "sha256:" + "e4f2" * 16])
def test_a_supersedes_line_needs_sha256_checksums(folder, named):
    write(folder, "0003_more.sql", f"-- aiorest:supersedes {named}\nSELECT 1;")
    with pytest.raises(MigrationError, match="0003_more.sql: '-- aiorest:supersedes' takes the SHA-256"):
        load_migrations(folder)


_ADVISORY_LOCKS_HERE = (  # pg_locks is the whole server's: count this test's database only
    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
    " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
)


async def test_a_cancelled_run_leaves_no_lock_and_the_next_run_applies_the_rest(database_url, folder):
    write(folder, "0003_slow.sql", "SELECT pg_sleep(5); INSERT INTO things VALUES (3);")
    db = await open_db(database_url)
    try:
        running = asyncio.ensure_future(migrate(db, folder))
        while await db.fetchval("SELECT to_regclass('aiorest_migrations') IS NULL"):
            await asyncio.sleep(0.02)
        while await db.fetchval("SELECT count(*) FROM aiorest_migrations WHERE version = 2") == 0:
            await asyncio.sleep(0.02)  # 0001 and 0002 are in; 0003 sleeps
        await asyncio.sleep(0.2)
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        # The cancelled statement is ended (server-side cancel, then ROLLBACK) by the pool in the
        # background, after the task has ended: the lock goes with that rollback, not at once.
        # The 10 s is a breakage guard on a busy host, not a speed target.
        async with asyncio.timeout(10):
            while await db.fetchval(_ADVISORY_LOCKS_HERE):
                await asyncio.sleep(0.02)
        write(folder, "0003_slow.sql", "INSERT INTO things VALUES (3);")  # the same version, quick now
        assert [m.version for m in await asyncio.wait_for(migrate(db, folder), 5)] == [3]
    finally:
        await db.close()

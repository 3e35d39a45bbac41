"""PostgreSQL for tests and measurements.

A server (``server_url``: $DATABASE_URL's, else a private pgserver for the run),
a throwaway database on it (``fresh_database``), and the machine's PostgreSQL
pinned to a CPU while a server is measured (``postgres_pinned``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg2

ROOT = Path(__file__).resolve().parent.parent


def _with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


@contextmanager
def server_url() -> Iterator[str]:
    """A PostgreSQL server URL: $DATABASE_URL, or a private pgserver, removed on the way out."""
    url = os.environ.get("DATABASE_URL")
    if url:
        yield url
        return
    import pgserver  # type: ignore[import-untyped]

    with tempfile.TemporaryDirectory(prefix="aiorest-test-pg-") as directory:
        server = pgserver.get_server(directory, cleanup_mode="delete")
        try:
            yield str(server.get_uri())
        finally:
            server.cleanup()


@contextmanager
def fresh_database(url: str) -> Iterator[str]:
    """Create an empty database on ``url``'s server; drop it afterwards."""
    name = f"aiorest_test_{uuid.uuid4().hex[:12]}"
    admin = psycopg2.connect(url)
    admin.autocommit = True
    try:
        with admin.cursor() as cursor:
            cursor.execute(f"CREATE DATABASE {name}")
        yield _with_database(url, name)
        with admin.cursor() as cursor:
            # FORCE (PostgreSQL 13) ends the sessions still on it and waits for them to go: a
            # pg_terminate_backend first returned before its backend had gone, and the DROP failed.
            cursor.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    finally:
        admin.close()


def postgres_pids() -> list[int]:
    """This machine's PostgreSQL processes: the postmaster, its helpers and backends."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() in ("postgres", "postmaster"):
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


@contextmanager
def postgres_pinned(cpu: int) -> Iterator[None]:
    """Pin this machine's PostgreSQL to ``cpu`` (with the load generator), off the server's core.

    Unpinned, a backend woken by the server's query often runs on the server's
    core and preempts it: measured on /db at 1,000 connections, a third of the
    server's samples sat in the send() that woke it. New backends inherit the
    postmaster's CPU set. If nothing can be pinned (not root, or no local
    PostgreSQL) it says so on stderr and the run goes on; every process is
    given all CPUs back afterwards.
    """
    pinned = []
    for pid in postgres_pids():
        try:
            os.sched_setaffinity(pid, {cpu})
        except OSError:
            continue
        pinned.append(pid)
    if not pinned:
        print(f"cannot pin PostgreSQL to CPU {cpu} (needs root): it may share the server's core", file=sys.stderr)
    try:
        yield
    finally:
        everywhere = set(range(os.cpu_count() or 1))
        for pid in postgres_pids():  # backends started meanwhile included
            try:
                os.sched_setaffinity(pid, everywhere)
            except OSError:
                continue


def migrate(dsn: str, *args: str) -> None:
    """``aiorest migrate ARGS --dsn DSN`` from the repository's root (``--dir migrations`` if no args).

    Run as a user would run it, in a process of its own; RuntimeError with what it printed if it fails.
    """
    done = subprocess.run(
        [sys.executable, "-m", "aiorest", "migrate", *(args or ("--dir", "migrations")), "--dsn", dsn],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode != 0:
        raise RuntimeError(f"cannot migrate {dsn}: {done.stderr.strip()}")

"""A throwaway PostgreSQL database for the tests: on $DATABASE_URL's server, else an embedded one."""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit, urlunsplit

import psycopg2


def _with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


@contextmanager
def server_url() -> Iterator[str]:
    """A PostgreSQL server URL: $DATABASE_URL, or a private pgserver for this run."""
    url = os.environ.get("DATABASE_URL")
    if url:
        yield url
        return
    import pgserver

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
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                (name,),
            )
            cursor.execute(f"DROP DATABASE IF EXISTS {name}")
    finally:
        admin.close()

"""Issue 19, point 1: ``aiorest run example_app.app:app --workers 4`` against PostgreSQL's default
max_connections (100) under 512 concurrent clients: every answer a 200, and a pool that cannot
fit refuses to start with a line that names the numbers.

Each worker used to open up to 32 connections: 4 × 32 > 100, so 10-14% of the answers were
503s, nothing in the log said why, and every other client of that PostgreSQL was refused.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg2
import pytest

from harness.ports import free_port
from harness.processes import stop_process

ROOT = Path(__file__).resolve().parents[2]
WRK = shutil.which("wrk")
pytestmark = pytest.mark.skipif(WRK is None, reason="wrk is not installed (.ci/run installs it)")


def server_limits(url: str) -> tuple[int, int]:
    connection = psycopg2.connect(url)
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT current_setting('max_connections')::int, current_setting('superuser_reserved_connections')::int"
                " + coalesce(current_setting('reserved_connections', true), '0')::int"
            )
            limits: tuple[int, int] = cursor.fetchone()
            return limits
    finally:
        connection.close()


def connections_to(url: str, database: str) -> int:
    """Backends connected to ``database`` now (this one's own connection is made to another)."""
    connection = psycopg2.connect(url, dbname="postgres")
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (database,))
            return int(cursor.fetchone()[0])
    finally:
        connection.close()


@contextmanager
def example_service(
    database_url: str, log: Path, workers: int, **env: str
) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """The example app under ``aiorest run --workers``; stopped (SIGTERM, then SIGKILL) on the way out."""
    port = free_port()
    environ = {key: value for key, value in os.environ.items() if not key.startswith(("DATABASE_", "AIOREST_"))}
    environ.update(DATABASE_URL=database_url, PYTHONPATH=str(ROOT), **env)
    command = [sys.executable, "-m", "aiorest", "run", "example_app.app:app", "--port", str(port)]
    with log.open("wb") as output:
        process = subprocess.Popen(
            [*command, "--workers", str(workers)], cwd=ROOT, env=environ, stdout=output, stderr=subprocess.STDOUT
        )
    try:
        yield process, port
    finally:
        stop_process(process, 15)


def wait_serving(process: subprocess.Popen[bytes], log: Path, workers: int) -> None:
    deadline = time.monotonic() + 30
    while log.read_text().count("aiorest serving on") < workers:
        assert process.poll() is None, log.read_text()
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.1)


def test_four_workers_under_512_clients_answer_every_request_within_max_connections(database_url, tmp_path):
    max_connections, reserved = server_limits(database_url)
    database = database_url.rsplit("/", 1)[1].split("?")[0]
    log = tmp_path / "service.log"
    with example_service(database_url, log, workers=4) as (process, port):
        wait_serving(process, log, 4)
        url = f"http://127.0.0.1:{port}/queries?queries=5"
        with urllib.request.urlopen(url, timeout=5) as response:
            assert response.status == 200
        # wrk's own timeout is 2 s; requests queue for a connection for longer than
        # that on a loaded 2-core machine, and queueing is what the pool is for.
        wrk = subprocess.Popen(
            [WRK, "-t2", "-c512", "-d5s", "--timeout", "10s", url], stdout=subprocess.PIPE, text=True
        )
        try:
            time.sleep(2.5)
            during = connections_to(database_url, database)  # and another client still gets in
        finally:
            output, _ = wrk.communicate(timeout=30)
        assert process.poll() is None, log.read_text()
    assert "Non-2xx or 3xx responses" not in output, output
    assert "Socket errors" not in output, output
    requests = int(re.search(r"(\d+) requests in", output).group(1))
    assert requests > 1000, output
    # The example's default: 64 connections for the host, 16 per worker.
    assert during <= 64 < max_connections - reserved, (during, max_connections, reserved)
    text = log.read_text()
    assert " WARNING " not in text and " ERROR " not in text, text


def test_a_pool_too_large_for_the_server_refuses_to_start_and_says_why(database_url, tmp_path):
    max_connections, reserved = server_limits(database_url)
    available = max_connections - reserved
    total = 4 * (available // 4 + 1)
    log = tmp_path / "service.log"
    with example_service(database_url, log, workers=4, DATABASE_POOL_TOTAL=str(total)) as (process, port):
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"a pool of {total} started: {log.read_text()}") from None
    assert process.returncode == 1
    text = log.read_text()
    line = (
        f"pool max {total // 4} × 4 workers = {total} connections exceeds PostgreSQL's"
        f" max_connections {max_connections} − {reserved} reserved = {available}; set Database(max_total=...)"
    )
    assert line in text, text

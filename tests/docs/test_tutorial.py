"""The tutorial (docs/tutorial.rst), followed as a reader would, from a copy of docs/tutorial/.

Every step is the command the page gives, run as a subprocess: the migration,
the tutorial's own tests, ``aiorest run`` behind the shipped nginx
configuration, and the locustfile.
"""

from __future__ import annotations

import csv
import http.client
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.fixtures import aiorest_process, nginx  # noqa: F401  (fixtures)

ROOT = Path(__file__).resolve().parents[2]
TUTORIAL = ROOT / "docs" / "tutorial"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """The tutorial's files in a folder of their own, as a reader who typed them in would have them."""
    folder = tmp_path / "bookmarks-service"
    shutil.copytree(TUTORIAL, folder, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    return folder


def environment(database_url: str) -> dict[str, str]:
    env = dict(os.environ, DATABASE_URL=database_url)
    env.setdefault("PYTHONPATH", str(ROOT))  # this checkout's aiorest
    return env


def run(command: list[str], cwd: Path, env: dict[str, str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def migrate(project: Path, database_url: str) -> str:
    """``python -m aiorest migrate``, as the page runs it; its output."""
    command = [sys.executable, "-m", "aiorest", "migrate", "--dir", "migrations", "--dsn", database_url]
    result = run(command, project, environment(database_url))
    assert result.returncode == 0, result.stderr
    return result.stdout


def request(url: str, method: str = "GET", document: Any = None) -> tuple[int, Any]:
    host, port = url.removeprefix("http://").split("/", 1)[0].split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        body = None if document is None else json.dumps(document)
        headers = {} if document is None else {"Content-Type": "application/json"}
        connection.request(method, url[len(f"http://{host}:{port}") :], body, headers)
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def test_migrate_then_the_tutorials_tests_pass(project: Path, database_url: str) -> None:
    assert migrate(project, database_url).splitlines() == ["applied 0001 create_bookmarks", "1 migration(s) applied"]
    assert migrate(project, database_url).splitlines() == ["0 migration(s) applied"]  # applied once only

    result = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], project, environment(database_url))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "5 passed" in result.stdout, result.stdout


def test_served_behind_nginx_and_load_tested(project: Path, database_url: str, nginx, aiorest_process) -> None:  # noqa: F811
    migrate(project, database_url)
    upstream = aiorest_process(
        "bookmarks.app:app", "--workers", "2", cwd=project, env=environment(database_url), ready_path="/bookmarks"
    )
    nginx.start([upstream.upstream])

    status, created = request(nginx.url + "/bookmarks", "POST", {"url": "https://www.python.org/", "title": "Python"})
    assert status == 201, created
    assert created["url"] == "https://www.python.org/" and created["title"] == "Python"
    assert request(f"{nginx.url}/bookmarks/{created['id']}") == (200, created)
    assert request(nginx.url + "/bookmarks/999") == (
        404,
        {"error": {"status": 404, "message": "no bookmark 999", "details": None}},
    )
    status, problem = request(nginx.url + "/bookmarks?limit=0")
    assert status == 422 and problem["error"]["details"][0]["location"] == "query.limit"

    stats = project / "stats"
    command = [sys.executable, "-m", "locust", "-f", "locustfile.py", "--headless", "-u", "5", "-r", "5", "-t", "3s"]
    command += ["--host", nginx.url, "--only-summary", "--csv", str(stats)]
    result = run(command, project, environment(database_url), timeout=40)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    with open(f"{stats}_stats.csv", newline="") as file:
        totals = next(row for row in csv.DictReader(file) if row["Name"] == "Aggregated")
    assert int(totals["Failure Count"]) == 0, totals
    assert int(totals["Request Count"]) > 0, totals
    # locust's bookmarks are in the database: the newest is one of them.
    status, newest = request(nginx.url + "/bookmarks?limit=1")
    assert status == 200 and newest[0]["title"] == "load"

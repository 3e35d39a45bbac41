"""A short smoke run of the load comparison tool: every output is written and well-formed.

It drives aiorest alone, to stay short; tests/server/test_conformance.py starts the baselines.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import psycopg2
import pytest

# Not importorskip: importing locust imports gevent, whose monkey-patching of
# threads lasts the whole session (a later test running a thread under uvloop
# hangs). These tests run locust in subprocesses only.
if importlib.util.find_spec("locust") is None:
    pytest.skip("locust is not installed (pip install -e '.[load]')", allow_module_level=True)
ROOT = Path(__file__).resolve().parents[2]


def leftovers(dsn: str) -> tuple[int, int, int]:
    """The notes, tokens and sessions of the load suite's accounts (all named load-…) still in the database."""
    connection = psycopg2.connect(dsn)
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                """WITH loaders AS (SELECT id FROM users WHERE username LIKE 'load-%')
                   SELECT (SELECT count(*) FROM notes WHERE owner_id IN (SELECT id FROM loaders)),
                          (SELECT count(*) FROM api_tokens WHERE user_id IN (SELECT id FROM loaders)),
                          (SELECT count(*) FROM aiorest_sessions
                            WHERE (data->>'user_id')::bigint IN (SELECT id FROM loaders))"""
            )
            return cursor.fetchone()
    finally:
        connection.close()


@pytest.mark.parametrize(
    ("tool", "flow"),
    [
        ("locust", "tfb"),
        ("locust", "notes"),  # logged in: a session cookie for browsers, a bearer token for writers
        ("wrk", "notes"),  # one endpoint keeps the run short; a bearer token on every request
    ],
)
def test_compare_smoke_run_writes_every_output(tool, flow, shared_database_url, tmp_path):
    if tool == "wrk":
        import shutil

        if shutil.which("wrk") is None:
            pytest.skip("wrk is not installed (apt-get install -y wrk)")
    command = [
        sys.executable,
        "-m",
        "load",
        "compare",
        "--targets",
        "aiorest",
        "--users",
        "2,4",
        "--flow",
        flow,
        "--tool",
        tool,
        "--duration",
        "2",
        "--warmup",
        "1",
        "--rounds",
        "1",
        "--pool",
        "4",
        "--queries",
        "2",
        "--dsn",
        shared_database_url,
        "--out",
        str(tmp_path),
    ]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "[2/2] round 1/1" in done.stderr  # progress is shown
    [out] = list(tmp_path.iterdir())
    raw = json.loads((out / "raw.json").read_text())
    assert {(r["target"], r["level"]) for r in raw} == {("aiorest", 2), ("aiorest", 4)}
    assert all(r["requests"] > 0 and r["failures"] == 0 for r in raw), raw
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["cells"]) == {"2", "4"}
    lag = summary["cells"]["2"]["aiorest"]["loop_lag"]
    assert lag is not None and lag["max_ms"] >= lag["p99_ms"] >= lag["p50_ms"] >= 0
    table = (out / "summary.md").read_text()
    assert "| 2 | aiorest |" in table and "| 4 | aiorest |" in table
    endpoints = summary["endpoints"]["4"]
    assert endpoints and any(row["aiorest"]["requests"] > 0 for row in endpoints.values()), endpoints
    unit = "connections" if tool == "wrk" else "users"
    assert f"| {unit} | endpoint | aiorest req/s |" in table
    if flow == "notes":
        assert leftovers(shared_database_url) == (0, 0, 0)  # the runs removed what they made
    if tool == "locust" and flow == "notes":
        assert {"GET /notes?q&limit", "POST POST /notes", "DELETE DELETE /notes/{id}"} <= set(endpoints), endpoints
    if tool == "wrk":
        assert list(endpoints) == ["/notes?limit=10"]
        assert endpoints["/notes?limit=10"]["aiorest"]["timeouts"] == 0
    for png in ("throughput_bars.png", "throughput_vs_users.png", "failures_vs_users.png", "p99_vs_users.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png


def test_the_readmes_quick_comparison_runs_with_no_database_given(tmp_path):
    """load/README.md's quick command, as written: it starts its own PostgreSQL and shows the whole output."""
    if shutil.which("wrk") is None:
        pytest.skip("wrk is not installed (apt-get install -y wrk)")
    readme = (ROOT / "load" / "README.md").read_text()
    blocks = re.findall(r"```sh\n(.*?)```", readme, re.DOTALL)
    [quick] = [line for block in blocks for line in block.splitlines() if "--quick" in line]
    env = {key: value for key, value in os.environ.items() if key != "DATABASE_URL"}
    command = [*shlex.split(quick, comments=True), "--out", str(tmp_path)]  # not load/out/ of the checkout
    assert command[:4] == ["python", "-m", "load", "compare"]
    done = subprocess.run(
        [sys.executable, *command[1:]], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "embedded PostgreSQL" in done.stderr
    assert "[6/6] round 3/3" in done.stderr  # both targets, three rounds
    assert re.search(r"\| 10 \| \*\*aiorest/threaded\*\* \| \*\*\d+\.\d\d×\*\*", done.stdout), done.stdout
    [out] = list(tmp_path.iterdir())
    assert f"written to {out}: raw.json summary.json summary.md throughput_bars.png" in done.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["lost_runs"] == [] and summary["cells"]["10"]["threaded"]["failures"] == 0


def test_compare_refuses_a_missing_database(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "load",
            "compare",
            "--dsn",
            "postgresql://postgres@127.0.0.1:1/x",
            "--out",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0 and "cannot reach the database" in done.stderr


def test_compare_refuses_an_unknown_target(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "load", "compare", "--targets", "nginx"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0 and "unknown target" in done.stderr


def test_a_lost_run_is_reported_and_left_out_of_the_paired_ratios():
    from load.compare.run import markdown, summarise_runs

    def run(round_number: int, target: str, rps: float) -> dict:
        return {
            "round": round_number,
            "target": target,
            "level": 100,
            "requests": int(rps * 10),
            "failures": 0,
            "seconds": 10.0,
            "requests_per_sec": rps,
            "p50_ms": 1.0,
            "p99_ms": 2.0,
            "generator_cpu": float("nan"),
            "generator_bound": False,
            "per_endpoint": {"/db": {"requests": int(rps * 10), "rps": rps, "p99_ms": 2.0, "failures": 0}},
            "loop_lag": None,
        }

    raw = [
        run(0, "aiorest", 9000.0),
        {"round": 0, "target": "threaded", "level": 100, "lost": "wrk on /db at 100 connections did not finish"},
        run(1, "aiorest", 6000.0),
        run(1, "threaded", 2000.0),
    ]
    summary = summarise_runs(raw, ["aiorest", "threaded"], [100])
    # Round 0 has no threaded figure: only round 1 pairs, 6000 / 2000.
    assert summary["cells"]["100"]["aiorest/threaded"]["mean"] == 3.0
    assert summary["endpoints"]["100"]["/db"]["aiorest/threaded"]["mean"] == 3.0
    assert summary["cells"]["100"]["aiorest"]["rps"]["mean"] == 7500.0
    assert summary["lost_runs"] == [raw[1]]
    table = markdown(summary, "python -m load compare …", "wrk")
    assert "1 run(s) lost" in table
    assert "- round 1, threaded, connections 100: wrk on /db at 100 connections did not finish" in table


def test_a_locust_run_past_its_deadline_is_stopped_with_its_workers(monkeypatch):
    from load.clients import generators

    # Nothing listens on this port; locust would go on for its 60 s. The deadline
    # comes 4 s after the start instead, once the master has forked its workers.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    monkeypatch.setattr(generators, "GRACE_S", -56.0)
    with pytest.raises(generators.GeneratorError, match="did not finish"):
        generators.run_locust(url, flow="tfb", users=2, seconds=60, processes=2, think=(0, 0), queries=1, cpus=None)

    def left() -> list[str]:
        found = []
        for entry in Path("/proc").iterdir():
            try:
                if entry.name.isdigit() and url.encode() in (entry / "cmdline").read_bytes():
                    found.append(entry.name)
            except OSError:
                continue
        return found

    # SIGKILL has been sent to the whole group; on a busy machine a worker may
    # take a moment to die (a dead one, not yet reaped, has an empty cmdline).
    for _ in range(50):
        if not left():
            break
        time.sleep(0.1)
    assert left() == [], "locust processes outlived the run"

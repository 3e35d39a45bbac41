"""The benchmark scripts still run: a few hundred requests, not a measurement."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_inprocess_bench_answers_every_request():
    done = subprocess.run(
        [sys.executable, "-m", "bench.inprocess", "--requests", "300", "--repeats", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    figures = dict(re.findall(r"^(/\w+)\s+([\d.]+) µs/request", done.stdout, re.MULTILINE))
    assert set(figures) == {"/json", "/plaintext"}, done.stdout
    assert all(float(value) > 0 for value in figures.values())


def test_inprocess_bench_feeds_the_ceiling_one_endpoint_at_a_time():
    done = subprocess.run(
        [sys.executable, "-m", "bench.inprocess", "--requests", "300", "--repeats", "1", "--ceiling"]
        + ["--endpoints", "/plaintext"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert re.findall(r"^(/\w+)\s+[\d.]+ µs/request", done.stdout, re.MULTILINE) == ["/plaintext"]


def test_instructions_per_request_cancel_the_start_up_out():
    sys.path.insert(0, str(ROOT))
    from bench.instructions import per_request

    assert per_request((2000, 1_200_000_000), (12000, 1_650_000_000)) == 45_000


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_instructions_counts_a_request_of_the_ceiling_under_valgrind():
    sys.path.insert(0, str(ROOT))
    from bench.instructions import count, per_request

    runs = [(requests, count("/json", requests, ceiling=True)) for requests in (100, 600)]
    # Parsing a request and writing a canned answer: thousands of instructions, not millions.
    assert 1_000 < per_request(*runs) < 100_000


def test_profile_charges_each_sample_to_its_innermost_known_frame():
    sys.path.insert(0, str(ROOT))
    from bench.profile import INTERPRETER, group_of, summarise, table

    raw = "\n".join(
        [
            # py-spy --native --format raw: frames outermost first, then the count
            "0x7f (libc.so.6);run (aiorest/server.py:10);_handle (aiorest/protocol.py:420);send (libc.so.6) 6",
            "0x7f (libc.so.6);_handle (aiorest/protocol.py:420);execute (aiopg/cursor.py:1);pqPutMsgEnd (libpq.so) 3",
            "0x7f (libc.so.6);_handle (aiorest/protocol.py:420);_PyEval_EvalFrameDefault (libpython3.11.so) 1",
            "0x7f (libc.so.6);_PyObject_Malloc (libpython3.11.so) 2",
            "not a sample line",
        ]
    )
    groups, leaves, total = summarise(raw)
    assert total == 12
    assert groups == {"kernel: socket send/recv": 6, "libpq": 3, "aiorest": 1, INTERPRETER: 2}
    assert leaves["send (libc.so.6)"] == 6
    rendered = table(groups, total, us_per_request=24.0)
    assert "| kernel: socket send/recv | 50.0% | 12.0 |" in rendered
    assert "| libpq | 25.0% | 6.0 |" in rendered
    # Without native frames, uvloop's own time lands on the frame that started the loop.
    assert group_of(["<module> (app.py:1)", "Runner.run (asyncio/runners.py:118)"]) == "event loop (uvloop/asyncio)"
    assert group_of(["run_app (aiohttp/web.py:502)", "data_received (aiohttp/web_protocol.py:1)"]) == "aiohttp"


def test_a_run_records_its_host_and_the_versions_it_measured():
    from bench.host import describe, one_line

    host = describe()
    versions = host["versions"]
    assert isinstance(versions, dict)
    assert versions["httptools"] and versions["uvloop"] and versions["aiohttp"]
    assert host["python"] == ".".join(map(str, sys.version_info[:3]))
    assert isinstance(host["cores"], int) and len(host["load_average"]) == 3
    line = one_line(host)
    assert f"aiohttp {versions['aiohttp']}" in line and f"Python {host['python']}" in line

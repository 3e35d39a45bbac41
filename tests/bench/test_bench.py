"""The benchmark scripts still run: a few hundred requests, not a measurement."""

from __future__ import annotations

import importlib.util
import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


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


def test_multipart_parsers_bench_prints_both_parsers_on_every_body():
    done = subprocess.run(
        [sys.executable, "bench/multipart_parsers.py", "--rounds", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = re.findall(r"^\| ([^|]+) \| ([\d.]+) ms \| ([\d.]+) ms \| ([\d.]+)× \|$", done.stdout, re.MULTILINE)
    assert [row[0] for row in rows] == ["one 1 MiB file", "one 64 MiB file", "20 small fields"], done.stdout
    assert all(float(ratio) > 0 for *_, ratio in rows)
    assert "[3/3] 20 small fields" in done.stderr  # progress is shown


def test_uploads_bench_writes_its_tables_and_plots(tmp_path):
    if shutil.which("wrk") is None or shutil.which("nginx") is None and not Path("/usr/sbin/nginx").exists():
        pytest.skip("wrk and nginx are needed (apt-get install -y wrk nginx)")
    done = subprocess.run(
        [sys.executable, "bench/uploads.py", "--smoke", "--contenders", "aiorest,nginx,floor", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    uploads, files = summary["parts"]["uploads"], summary["parts"]["files"]
    assert set(uploads) == {"upload 1 MiB", "upload 64 MiB", "form of 20 fields"}
    # a smoke run: the figures are there, not good (the 64 MiB one may time out beside another test's load)
    assert all(uploads[case]["aiorest"]["rps"]["mean"] > 0 for case in ("upload 1 MiB", "form of 20 fields"))
    assert files["file 1 KiB"]["aiorest/nginx"]["cpu_ratio"] > 0  # nginx served the same files
    floor = uploads["upload 1 MiB"]["floor"]  # the floor took the same uploads, and part of its CPU is the kernel's
    assert floor["rps"]["mean"] > 0 and 0 < floor["kernel_us_per_request"] <= floor["cpu_us_per_request"]
    assert "| file 1 MiB |" in done.stdout and "files round 1/1" in done.stderr
    for png in ("uploads.png", "files.png"):
        assert (tmp_path / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


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


def smoke(script: str, out: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """``script --smoke --out out [args]``, which must succeed; what it printed and its summary.json."""
    done = subprocess.run(
        [sys.executable, script, "--smoke", "--out", str(out), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done, json.loads((out / "summary.json").read_text())


@pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk is not installed")
def test_typed_bench_writes_its_figures_and_verdicts(tmp_path):
    # the peers are in the bench extra; without them there is nothing to compare
    pytest.importorskip("fastapi")
    pytest.importorskip("litestar")
    pytest.importorskip("uvicorn")
    done, summary = smoke("bench/typed.py", tmp_path)
    assert summary["contenders"] == ["aiorest", "fastapi", "litestar"]
    (cell,) = summary["table"].values()
    for name in ("aiorest", "fastapi", "litestar"):
        # every contender answered the valid body (200), and only that
        assert cell[name]["rps"]["mean"] > 0 and cell[name]["errors"] == 0, cell[name]
        assert cell[name]["server_cpu_us"] > 0
    invalid = summary["invalid"]
    assert invalid["rps"]["mean"] > 0 and invalid["answers_not_4xx"] == 0 and invalid["socket_errors"] == 0
    assert [v["ratio"] for v in summary["verdicts"]] == ["aiorest/fastapi", "aiorest/litestar", "aiorest invalid/valid"]
    assert all(v["verdict"].split()[0] in ("met", "missed", "undecided") for v in summary["verdicts"])
    assert len(json.loads((tmp_path / "raw.json").read_text())) == 4  # three valid runs, aiorest's invalid one
    assert "aiorest invalid/valid ≥ 0.9" in done.stdout
    assert (tmp_path / "summary.md").read_text().count("\n") > 5
    if importlib.util.find_spec("matplotlib"):
        assert (tmp_path / "throughput.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk is not installed")
def test_batteries_smoke_measures_each_battery_against_its_plain_route(tmp_path):
    done, summary = smoke("bench/batteries.py", tmp_path)
    cells = summary["cells"]
    # No --dsn or --redis: the sessions kept there are left out, the signed cookie's is measured.
    assert set(cells) == {"gzip, 10 KB JSON", "gzip, 100 B JSON", "CORS, simple request", "session read, signed cookie"}
    for cell in cells.values():
        assert cell["rps"]["mean"] > 0 and cell["plain_rps"]["mean"] > 0 and cell["errors"] == 0, cell
        assert cell["ratio"]["mean"] > 0 and cell["server_cpu_us"] > 0
    big, small = cells["gzip, 10 KB JSON"], cells["gzip, 100 B JSON"]
    assert big["encoding"] == "gzip" and big["wire_bytes"] * 3 < big["plain_wire_bytes"]
    assert small["encoding"] == "identity" and small["body_bytes"] == small["plain_body_bytes"]
    assert [ok for _, ok in summary["bar"]] == [True, True]
    assert done.stdout.count("PASS:") == 2 and "| CORS, simple request |" in done.stdout
    assert "left out: session read, Redis (give --redis)" in done.stderr
    if importlib.util.find_spec("matplotlib"):
        assert (tmp_path / "throughput.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk is not installed")
def test_notes_bench_checks_both_answers_alike_and_pairs_the_ratios(tmp_path, pg_server):
    # FastAPI's side: asyncpg and pydantic (the bench extra); without them there is nothing to compare
    pytest.importorskip("asyncpg")
    pytest.importorskip("fastapi")
    done, summary = smoke("bench/notes.py", tmp_path, "--dsn", pg_server, "--contenders", "aiorest,fastapi")
    assert summary["contenders"] == ["aiorest", "fastapi"]
    for name in ("aiorest", "fastapi"):
        # each answered the same page (checked before the load), and every request of the load with a 2xx
        cell = summary["cells"][name]
        assert cell["rps"]["mean"] > 0 and cell["errors"] == 0, cell
        # PostgreSQL's CPU is read in clock ticks of each backend: one second of smoke on a loaded machine
        # can see none (CI saw 0.0 for FastAPI's pool), so only its being measured is checked here
        assert cell["server_cpu_us"] > 0 and math.isfinite(cell["postgres_cpu_us"]) and cell["postgres_cpu_us"] >= 0
    assert set(summary["ratios"]) == {"aiorest/fastapi rps", "aiorest/fastapi cpu"}
    for ratio in summary["ratios"].values():
        assert ratio["mean"] > 0 and ratio["per_round"] and ratio["target"] == 5.0
        assert ratio["verdict"].split()[0] in ("met", "missed", "undecided")
    assert "| aiorest / FastAPI requests/s |" in done.stdout and "Per round:" in done.stdout
    assert len(json.loads((tmp_path / "raw.json").read_text())) == 2
    if importlib.util.find_spec("matplotlib"):
        assert (tmp_path / "throughput.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_db_suite_refuses_an_answer_of_another_shape():
    sys.path.insert(0, str(ROOT))
    from bench.db_answers import EXTRA_FORTUNE, problem

    world = '{"id":3217,"randomNumber":2149}'
    assert problem("/db", world, "application/json") is None
    assert problem("/queries?queries=2", f"[{world},{world}]", "application/json") is None
    assert "{id, randomNumber}" in problem("/db", '{"id":3217,"randomnumber":2149}', "application/json")
    assert "2 rows" in problem("/updates?queries=2", f"[{world}]", "application/json")
    assert problem("/db", world, "text/plain") == "Content-Type text/plain"
    rows = "".join(f"<tr><td>{i}</td><td>fortune</td></tr>" for i in range(1, 11))
    page = (
        rows
        + "<tr><td>11</td><td>&lt;script&gt;alert(</td></tr><tr><td>12</td><td>フレームワークのベンチマーク</td></tr>"
    )
    assert problem("/fortunes", page + EXTRA_FORTUNE, "text/html; charset=utf-8") is None
    assert "12 rows" in problem("/fortunes", page, "text/html; charset=utf-8")


def test_bare_asyncpg_floor_reads_queries_as_the_example_app_does():
    pytest.importorskip("asyncpg")
    from example_app.queries import query_count

    spec = importlib.util.spec_from_file_location("db_asyncpg", ROOT / "bench" / "servers" / "db_asyncpg.py")
    assert spec and spec.loader
    floor = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(floor)
    for text in ("20", "", "0", "abc", "501", "0005", "1_0", "٥", "99999", "500"):
        assert floor.query_count(b"x=1&queries=" + text.encode()) == query_count(text), text
    assert floor.query_count(b"") == query_count(None) == 1

"""A smoke run of ``python -m load live`` (aiorest alone, 200 connections): every output is written and well-formed.

It runs the real thing, a server process and a client process over loopback; no duration is asserted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytest.importorskip("matplotlib")


def test_live_smoke_writes_a_summary_with_every_figure(tmp_path: Path) -> None:
    out = tmp_path / "live"
    run = subprocess.run(
        [sys.executable, "-m", "load", "live", "--smoke", "--contenders", "aiorest", "--out", str(out)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert "live: aiorest ws: 200 of 200 open" in run.stderr  # progress lines on stderr
    assert "| ws | aiorest | 200 |" in run.stdout and "| sse | aiorest | 200 |" in run.stdout

    summary = json.loads((out / "summary.json").read_text())
    assert summary["failures"] == {}
    assert summary["options"]["connections"] == 200
    assert [(r["contender"], r["kind"]) for r in summary["results"]] == [("aiorest", "ws"), ("aiorest", "sse")]
    for result in summary["results"]:
        assert result["opened"] == 200
        assert result["received"] == [200, 200]  # every client got each of the two broadcasts
        assert result["rss_held"] > 0 and result["bytes_per_connection"] > 0
        broadcast = result["broadcast_ms"]
        assert broadcast["n"] == 400 and 0 <= broadcast["p50"] <= broadcast["p99"] <= broadcast["max"]
        assert result["lag_ms"]["n"] >= 1 and result["lag_ms"]["p99"] <= result["lag_ms"]["max"]
    echo = summary["results"][0]["echo"]
    assert echo["connections"] == 64 and echo["messages"] > 0

    assert (out / "summary.md").read_text().startswith("# Live connections")
    for figure in ("memory.png", "broadcast_p99.png", "loop_lag.png", "echo.png"):
        assert figure in summary["figures"]
        assert (out / figure).read_bytes().startswith(b"\x89PNG")


def test_live_rejects_an_unknown_contender() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "load", "live", "--contenders", "tornado"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2 and "unknown contender or kind: tornado" in run.stderr

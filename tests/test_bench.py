"""The benchmark scripts still run: a few hundred requests, not a measurement."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

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

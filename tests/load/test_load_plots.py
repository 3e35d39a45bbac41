"""The figures and latencies of ``python -m load compare`` (load/compare/plots.py), drawn from a summary."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from load.compare.plots import latency, plot
from load.compare.run import markdown, summarise_runs

matplotlib = pytest.importorskip("matplotlib")
from matplotlib.container import ErrorbarContainer  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (0.41234, "412 µs"),
        (0.041234, "41.2 µs"),
        (0.0041234, "4.12 µs"),
        (0.9996, "1.00 ms"),  # rounds up into the next unit
        (1.2345, "1.23 ms"),
        (41, "41.0 ms"),
        (316.4, "316 ms"),
        (5273, "5270 ms"),
        (math.nan, "–"),
    ],
)
def test_a_latency_has_three_significant_figures_in_us_or_ms(ms, text):
    assert latency(ms) == text


def test_a_latency_below_the_tools_resolution_says_so():
    # locust keeps whole milliseconds: its 0 is a response under half a millisecond, not 0 ms
    assert latency(0, 0.5) == "< 500 µs" and latency(3, 0.5) == "3.00 ms"


def run(round_number: int, target: str, level: int, rps: float, p50: float, p99: float) -> dict:
    return {
        "round": round_number,
        "target": target,
        "level": level,
        "requests": int(rps * 5),
        "failures": 0,
        "seconds": 5.0,
        "requests_per_sec": rps,
        "p50_ms": p50,
        "p99_ms": p99,
        "generator_cpu": math.nan,
        "generator_bound": False,
        "loop_lag": {"p50_ms": 0.0123, "p99_ms": 1.5, "max_ms": 12.0} if target == "aiorest" else None,
        "per_endpoint": {
            "/json": {"requests": int(rps * 5), "failures": 0, "rps": rps, "p99_ms": p99}
            | {"timeouts": 0, "socket_errors": 0, "non_2xx": 0}
        },
    }


def summary() -> dict:
    """A wrk comparison of GET /json, 3 rounds of 5 s, as ``python -m load compare`` writes it."""
    raw = [
        run(n, target, level, rps * (1 + n / 50), p50, p99 + n / 100)
        for n in range(3)
        for target, rps, p50, p99 in (("aiorest", 20000, 0.31, 0.412), ("threaded", 3000, 2.1, 9.5))
        for level in (10, 100)
    ]
    result = summarise_runs(raw, ["aiorest", "threaded"], [10, 100])
    result.update(command="python -m load compare …", tool="wrk", flow="tfb", duration=5, rounds=3)
    return result


@pytest.fixture
def figures(monkeypatch: pytest.MonkeyPatch) -> dict[str, Figure]:
    """Every figure saved, by file name, as it was drawn."""
    saved: dict[str, Figure] = {}
    save = Figure.savefig

    def keep(self: Figure, path, *args, **kwargs):
        saved[str(path).rpartition("/")[2]] = self
        return save(self, path, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    return saved


def test_every_figure_names_its_endpoint_its_units_and_its_rounds(figures, tmp_path):
    written = plot(summary(), tmp_path, "wrk")
    assert (
        sorted(written)
        == sorted(figures)
        == [
            "failures_vs_users.png",
            "p99_vs_users.png",
            "throughput_bars.png",
            "throughput_vs_users.png",
        ]
    )
    assert all((tmp_path / name).stat().st_size > 0 for name in written)
    for name, figure in figures.items():
        (axes,) = figure.axes
        assert "GET /json (wrk, 3 rounds of 5 s)" in axes.get_title(), name
        assert axes.get_xlabel() == "connections (wrk)", name
    units = {name: figure.axes[0].get_ylabel() for name, figure in figures.items()}
    assert units == {
        "throughput_bars.png": "requests/s",
        "throughput_vs_users.png": "requests/s",
        "failures_vs_users.png": "failed requests (% of requests)",
        "p99_vs_users.png": "p99 latency (log scale)",  # from 422 µs to 9.51 ms
    }


def test_a_latency_axis_prints_us_or_ms_on_each_tick(figures, tmp_path):
    plot(summary(), tmp_path, "wrk")
    p99 = figures["p99_vs_users.png"].axes[0]
    assert p99.get_yscale() == "log"
    ticks = {tick.get_text() for tick in p99.get_yticklabels()}
    assert {"500 µs", "1.00 ms", "2.00 ms", "5.00 ms"} <= ticks  # 1, 2 and 5 of each decade
    assert all(tick == "" or tick.endswith((" µs", " ms")) for tick in ticks), ticks
    fast = summary()
    for row in fast["cells"].values():
        row.pop("threaded"), row.pop("aiorest/threaded")
    plot(fast, tmp_path, "wrk")  # 422 µs at both levels: a linear axis, from 0
    p99 = figures["p99_vs_users.png"].axes[0]
    assert p99.get_yscale() == "linear" and p99.get_ylabel() == "p99 latency" and p99.get_ylim()[0] == 0
    ticks = [tick.get_text() for tick in p99.get_yticklabels() if tick.get_text()]
    assert ticks[0] == "0" and all(tick.endswith(" µs") for tick in ticks[1:]), ticks


def test_error_bars_are_in_the_legend_only_where_they_are_drawn(figures, tmp_path):
    plot(summary(), tmp_path, "wrk")
    throughput, p99 = (figures[f"{name}_vs_users.png"].axes[0] for name in ("throughput", "p99"))
    assert all(isinstance(handle, ErrorbarContainer) for handle in throughput.get_legend_handles_labels()[0])
    # a p99 is the median of the rounds: a line and its points
    assert not any(isinstance(handle, ErrorbarContainer) for handle in p99.get_legend_handles_labels()[0])
    assert "median of the rounds" in p99.get_title()


def test_the_table_prints_a_sub_millisecond_latency_in_us():
    table = markdown(summary(), "python -m load compare …", "wrk")
    assert "| 10 | aiorest | 20,400 ± 400 | " in table
    assert "| 310 µs | 422 µs |" in table and "| 2.10 ms | 9.51 ms |" in table
    assert "12.3 µs / 1.50 ms / 12.0 ms" in table  # the loop's lag


def test_the_figures_are_drawn_again_from_a_summary_file(tmp_path):
    (tmp_path / "summary.json").write_text(json.dumps(summary()))
    command = [sys.executable, "-m", "load", "compare", "plots", str(tmp_path / "summary.json")]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert sorted(path.name for path in tmp_path.glob("*.png")) == [
        "failures_vs_users.png",
        "p99_vs_users.png",
        "throughput_bars.png",
        "throughput_vs_users.png",
    ]

"""The figures of ``python -m load compare``, and latencies as a reader wants them.

Each figure stands alone (a PNG is pasted into a report without the table
beside it): its title names the endpoint and how it was measured (the tool,
the rounds and their length), each axis its unit. Error bars are drawn where
rounds give a spread (throughput: mean and 95% CI); a latency is the median
of the rounds' percentiles and has none, so its legend promises none.

A latency is printed with three significant figures, in µs below 1 ms:
``412 µs``, ``1.23 ms``, ``5270 ms``; a p50 under a millisecond is not ``0 ms``.
"""

from __future__ import annotations

import argparse
import json
import math
import textwrap
from pathlib import Path

from bench.stats import Summary, bar_chart, line_chart

__all__ = ["latency", "plot", "endpoint_names", "LOCUST_RESOLUTION_MS"]

#: locust keeps a response time rounded to the millisecond (below 100 ms): its 0 is below 0.5 ms.
LOCUST_RESOLUTION_MS = 0.5


def latency(ms: float, resolution_ms: float = 0.0) -> str:
    """``ms`` as text: three significant figures, in µs below 1 ms; ``< …`` below the tool's resolution."""
    if math.isnan(ms):
        return "–"
    if ms < resolution_ms:
        return f"< {latency(resolution_ms)}"
    ms = _significant(ms)
    return f"{_digits(ms * 1000)} µs" if ms < 1 else f"{_digits(ms)} ms"


def _significant(value: float, figures: int = 3) -> float:
    if value == 0 or not math.isfinite(value):
        return value
    return round(value, figures - 1 - math.floor(math.log10(abs(value))))


def _digits(value: float, figures: int = 3) -> str:
    """A value already rounded to ``figures`` significant figures, with as many decimals as they need."""
    if value == 0:
        return "0"
    decimals = max(0, figures - 1 - math.floor(math.log10(abs(_significant(value, figures)))))
    return f"{_significant(value, figures):.{decimals}f}"


def endpoint_names(summary: dict) -> list[str]:
    """The endpoints the runs drove, as ``GET /db`` (wrk's are GETs of a path; locust names its method)."""
    names = dict.fromkeys(name for rows in summary.get("endpoints", {}).values() for name in rows)
    return [name if " " in name else f"GET {name}" for name in names]


def _what(summary: dict, tool: str) -> str:
    """The endpoint(s) and how they were measured: a figure's second line."""
    names = endpoint_names(summary)
    if len(names) == 1:
        endpoint = names[0]
    else:
        flow = summary.get("flow")
        # a no-break space keeps each method with its path when the line wraps
        listed = ", ".join(name.replace(" ", "\u00a0") for name in names) or "no endpoint answered"
        endpoint = f"{'the ' + flow + ' flow' if flow else 'a mix'}: {listed}"
    rounds = summary.get("rounds") or max(
        (cell["rps"]["n"] for row in summary["cells"].values() for key, cell in row.items() if "/" not in key),
        default=0,
    )
    duration = summary.get("duration")
    how = f"{tool}, {rounds} round{'s' if rounds != 1 else ''}" + (f" of {duration} s" if duration else "")
    return textwrap.fill(f"{endpoint} ({how})", 80)


def plot(summary: dict, out: Path, tool: str) -> list[str]:
    """Writes the figures of a comparison into ``out``; returns the names of those written (none without matplotlib)."""
    unit = "connections (wrk)" if tool == "wrk" else "concurrent users (locust)"
    targets, levels = summary["targets"], summary["levels"]
    what = _what(summary, tool)

    def series(key: str, scale: float = 1.0) -> dict[str, list[Summary]]:
        result = {}
        for target in targets:
            values = []
            for level in levels:
                cell = summary["cells"][str(level)].get(target)
                if cell is None:
                    values.append(Summary(0, math.nan, math.nan, math.nan, math.nan))
                elif key == "rps":
                    values.append(Summary(**cell["rps"]))
                else:  # one figure over the rounds (a median, or a total): no spread to draw
                    value = cell[key] * scale
                    values.append(Summary(1, value, 0.0, value, value))
            result[target] = values
        return result

    # a p99 axis on a log scale when the values span more than a factor of 10 (2 ms at 10 users, 3 s at 10,000)
    p99s = [
        cell["p99_ms"]
        for row in summary["cells"].values()
        for key, cell in row.items()
        if "/" not in key and cell["p99_ms"] > 0
    ]
    log_p99 = bool(p99s) and max(p99s) > 10 * min(p99s)
    written = []
    xs = [float(x) for x in levels]
    if bar_chart(
        out / "throughput_bars.png",
        f"Throughput, mean and 95% CI of the rounds\n{what}",
        [str(x) for x in levels],
        series("rps"),
        "requests/s",
        xlabel=unit,
    ):
        written.append("throughput_bars.png")
    figures = (
        ("throughput", f"Throughput, mean and 95% CI of the rounds\n{what}", series("rps"), "requests/s", {}),
        (
            "failures",
            f"Failed requests, all rounds together\n{what}",
            series("failure_rate", 100),
            "failed requests (% of requests)",
            {},
        ),
        (
            "p99",
            f"p99 latency, median of the rounds\n{what}",
            series("p99_ms"),
            "p99 latency" + (" (log scale)" if log_p99 else ""),
            {"y_format": lambda ms: latency(ms) if ms else "0", "log_y": log_p99},  # on each tick: µs or ms
        ),
    )
    for name, title, values, label, options in figures:
        if line_chart(out / f"{name}_vs_users.png", title, xs, values, unit, label, log_x=True, **options):
            written.append(f"{name}_vs_users.png")
    return written


def main(argv: list[str]) -> int:
    """``python -m load compare plots SUMMARY.json…``: draws a comparison's figures again, beside its summary."""
    parser = argparse.ArgumentParser(prog="python -m load compare plots", description=main.__doc__)
    parser.add_argument("summaries", nargs="+", type=Path, metavar="SUMMARY", help="load/out/<time>/summary.json")
    for path in parser.parse_args(argv).summaries:
        summary = json.loads(path.read_text())
        written = plot(summary, path.parent, summary.get("tool", "locust"))
        print(f"{path.parent}: {' '.join(written) or 'nothing (matplotlib is not installed)'}")
    return 0

"""What ``python -m load live`` writes: summary.json, summary.md (the table it prints) and its figures."""

from __future__ import annotations

import json
import math
import platform
from pathlib import Path
from typing import Any

from bench.stats import bar_chart, summarise

KIND = {"ws": "WebSockets", "sse": "event streams"}


def _cell(value: float | None, spec: str) -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def table(results: list[dict[str, Any]]) -> str:
    """One row per contender and kind, then aiorest's ratios to each peer."""
    head = (
        "| kind | contender | open | KiB/conn | broadcast p50 ms | p99 ms | max ms "
        "| loop lag p50 ms | p99 ms | max ms | echo msgs/s (64) |"
    )
    lines = [head, "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for r in results:
        b, lag = r["broadcast_ms"], r["lag_ms"]
        echo = r.get("echo", {}).get("per_s", math.nan)
        lines.append(
            f"| {r['kind']} | {r['contender']} | {r['opened']} | {r['bytes_per_connection'] / 1024:.1f} "
            f"| {_cell(b['p50'], '.1f')} | {_cell(b['p99'], '.1f')} | {_cell(b['max'], '.1f')} "
            f"| {_cell(lag['p50'], '.1f')} | {_cell(lag['p99'], '.1f')} | {_cell(lag['max'], '.1f')} "
            f"| {_cell(echo, '.0f')} |"
        )
    ratios = ratio_lines(results)
    return "\n".join(lines + ([""] + ratios if ratios else []))


def ratio_lines(results: list[dict[str, Any]]) -> list[str]:
    """aiorest against each peer, per kind: memory and broadcast p99 (peer ÷ aiorest: above 1, aiorest is ahead),
    echo (aiorest ÷ peer)."""
    lines = []
    for kind in KIND:
        ours = next((r for r in results if r["contender"] == "aiorest" and r["kind"] == kind), None)
        if ours is None:
            continue
        for peer in (r for r in results if r["kind"] == kind and r["contender"] != "aiorest"):
            parts = [
                f"memory {peer['bytes_per_connection'] / ours['bytes_per_connection']:.2f}x",
                f"broadcast p99 {peer['broadcast_ms']['p99'] / ours['broadcast_ms']['p99']:.2f}x",
            ]
            if kind == "ws":
                parts.append(f"echo {ours['echo']['per_s'] / peer['echo']['per_s']:.2f}x")
            lines.append(f"aiorest vs {peer['contender']} ({kind}): " + ", ".join(parts))
    if lines:
        lines.insert(
            0, "ratios (memory and p99: the peer's ÷ aiorest's; echo: aiorest's ÷ the peer's; above 1, aiorest ahead)"
        )
    return lines


def plots(out: Path, results: list[dict[str, Any]]) -> list[str]:
    kinds = [k for k in KIND if any(r["kind"] == k for r in results)]
    names = list(dict.fromkeys(r["contender"] for r in results))
    found = {(r["contender"], r["kind"]): r for r in results}

    def value(figure: Any, name: str, kind: str) -> list[float]:
        result = found.get((name, kind))
        number = figure(result) if result is not None else None
        return [math.nan if number is None else number]

    def series(figure: Any, only: list[str]) -> dict[str, list[Any]]:
        return {n: [summarise(value(figure, n, k)) for k in only] for n in names}

    drawn = []
    charts = [
        ("memory.png", "Memory per idle connection", kinds, lambda r: r["bytes_per_connection"] / 1024, "KiB"),
        ("broadcast_p99.png", "Broadcast delivery latency, p99", kinds, lambda r: r["broadcast_ms"]["p99"], "ms"),
        ("loop_lag.png", "Event loop lag during the broadcast, max", kinds, lambda r: r["lag_ms"]["max"], "ms"),
        ("echo.png", "Echo over 64 WebSockets", ["ws"], lambda r: r["echo"]["per_s"], "messages/s"),
    ]
    for file, title, only, figure, unit in charts:
        only = [k for k in only if k in kinds]
        if only and bar_chart(out / file, title, [KIND[k] for k in only], series(figure, only), unit):
            drawn.append(file)
    return drawn


def write_outputs(out: Path, results: list[dict[str, Any]], failures: dict[str, str], options: dict[str, Any]) -> str:
    out.mkdir(parents=True, exist_ok=True)
    host = f"{platform.node()}: {platform.processor() or platform.machine()}, Python {platform.python_version()}"
    text = table(results)
    figures = plots(out, results)
    options = {k: (str(v) if isinstance(v, Path) else v) for k, v in options.items()}
    summary = {"host": host, "options": options, "results": results, "failures": failures, "figures": figures}
    (out / "summary.json").write_text(json.dumps(summary, indent=2, allow_nan=True))
    left_out = [f"- {name}: {why}" for name, why in failures.items()]
    md = [
        "# Live connections",
        "",
        f"Host: {host}. Servers on CPU 0, the client on CPU 1. Options: {json.dumps(options)}.",
        "",
        text,
        *(["", "Left out:", *left_out] if left_out else []),
        "",
        *[f"![{f}]({f})" for f in figures],
    ]
    (out / "summary.md").write_text("\n".join(md) + "\n")
    return text + ("\n\nleft out:\n" + "\n".join(left_out) if left_out else "")

"""``python -m load compare``: aiorest against the threaded baselines, round after round.

For each round and each load level, every target is started fresh (one process
on CPU 0, same database, same pool size), warmed up, loaded (locust or wrk on
CPU 1) and stopped; targets are interleaved and their order rotates. The
results go to ``load/out/<time>/``: raw.json, summary.json, summary.md and PNGs.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import psycopg2

from bench.stats import median, paired_ratio, summarise
from example_app.app import MIGRATE_ARGS
from harness.postgres import migrate, postgres_pinned
from load.clients.generators import FLOWS, GeneratorError, LoadResult, run_locust, run_wrk_mix, wrk_headers, wrk_paths

from .plots import LOCUST_RESOLUTION_MS, latency, plot
from .targets import TARGETS, RunningServer, ServerError

OUT = Path(__file__).resolve().parents[1] / "out"


#: ``--quick``: a look at the whole output in about half a minute (three rounds: the fewest whose CIs say something).
QUICK = {"users": "10", "duration": 2, "warmup": 1, "rounds": 3, "pool": 4}


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m load compare",
        description=__doc__.splitlines()[0],
        epilog="Figures again from a run's summary: python -m load compare plots load/out/<time>/summary.json.",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a short run showing the whole output: " + " ".join(f"--{k} {v}" for k, v in QUICK.items()),
    )
    parser.add_argument("--targets", default="aiorest,threaded", help=f"comma-separated: {', '.join(TARGETS)}")
    parser.add_argument("--users", default="10,100,1000", help="load levels: locust users or wrk connections")
    parser.add_argument("--flow", choices=sorted(FLOWS), default="tfb")
    parser.add_argument("--tool", choices=["locust", "wrk"], default="locust")
    parser.add_argument("--duration", type=int, default=30, help="seconds of measured load per run")
    parser.add_argument("--warmup", type=int, default=3, help="seconds of discarded load before each run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--load-workers", type=int, default=1, help="locust processes (a master and N workers)")
    parser.add_argument(
        "--generator-cpus",
        default="1",
        help="CPUs locust is pinned to, a taskset list (default 1; e.g. 1-7 with --load-workers 7 on 8 cores)",
    )
    parser.add_argument("--pool", type=int, default=32, help="database connections per server")
    parser.add_argument("--queries", type=int, default=20, help="N for /queries and /updates")
    parser.add_argument("--paths", help="wrk only: comma-separated paths instead of the flow's, e.g. /db")
    parser.add_argument("--think", default="0,0", help="locust think time, min,max seconds")
    parser.add_argument(
        "--dsn", help="a PostgreSQL URL (default $DATABASE_URL; without either, a private PostgreSQL is started)"
    )
    parser.add_argument("--out", type=Path, default=OUT)
    if parser.parse_known_args(argv)[0].quick:  # its values are defaults: an option given still wins
        parser.set_defaults(**QUICK)
    return parser.parse_args(argv)


def check_database(dsn: str | None) -> str:
    import os

    dsn = dsn or os.environ.get("DATABASE_URL")
    if not dsn:
        from example_app.__main__ import embedded_postgres_url

        print("no --dsn or DATABASE_URL: starting an embedded PostgreSQL (pgserver)", file=sys.stderr, flush=True)
        dsn = embedded_postgres_url()  # stopped when this process exits
    try:
        psycopg2.connect(dsn, connect_timeout=5).close()
    except psycopg2.Error as exc:
        raise SystemExit(f"cannot reach the database at {dsn}: {exc}") from None
    try:  # aiorest's sessions table first: the notes API logs users in (the baselines use it too)
        migrate(dsn, *MIGRATE_ARGS)
    except RuntimeError as exc:
        raise SystemExit(str(exc)) from None
    return dsn


def raise_file_limit() -> int:
    """Thousands of connections need thousands of descriptors, in us and in the servers we start."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def one_run(args: argparse.Namespace, server: RunningServer, level: int) -> LoadResult:
    think = tuple(float(x) for x in args.think.split(","))
    if args.tool == "wrk":
        paths = args.paths.split(",") if args.paths else wrk_paths(args.flow, args.queries)
        with wrk_headers(server.url, paths) as headers:  # /notes needs a login: one per run, not per request
            run_wrk_mix(server.url, paths=paths, connections=min(level, 100), seconds=args.warmup, headers=headers)
            return run_wrk_mix(server.url, paths=paths, connections=level, seconds=args.duration, headers=headers)
    run_locust(
        server.url,
        flow=args.flow,
        users=min(level, 50),
        seconds=args.warmup,
        processes=args.load_workers,
        think=(think[0], think[1]),
        queries=args.queries,
        cpus=args.generator_cpus,
    )
    return run_locust(
        server.url,
        flow=args.flow,
        users=level,
        seconds=args.duration,
        processes=args.load_workers,
        think=(think[0], think[1]),
        queries=args.queries,
        cpus=args.generator_cpus,
    )


def measure(args: argparse.Namespace, dsn: str, targets: list[str], levels: list[int], raw: list[dict]) -> None:
    runs = args.rounds * len(levels) * len(targets)
    started = time.monotonic()
    done = 0
    for round_number in range(args.rounds):
        for level in levels:
            shift = (round_number + levels.index(level)) % len(targets)
            for name in targets[shift:] + targets[:shift]:
                done += 1
                print(
                    f"[{done}/{runs}] round {round_number + 1}/{args.rounds}  {name:9s} level {level:<6d} "
                    f"elapsed {time.monotonic() - started:5.0f} s",
                    file=sys.stderr,
                    flush=True,
                )
                server = RunningServer(TARGETS[name], dsn, args.pool)
                lag = None
                try:
                    server.wait_ready("/db")
                    result = one_run(args, server, level)
                except GeneratorError as exc:
                    # One lost run does not cost the others: it is recorded, reported, and left out.
                    print(f"        run lost: {exc}", file=sys.stderr, flush=True)
                    raw.append({"round": round_number, "target": name, "level": level, "lost": str(exc)[:500]})
                    continue
                finally:
                    lag = server.stop_and_report()
                raw.append({"round": round_number, "target": name, "level": level, **result.as_dict(), "loop_lag": lag})
                flag = "  (generator-bound)" if result.generator_bound else ""
                print(
                    f"        {result.requests_per_sec:9.0f} req/s  failures {result.failure_rate:.2%}  "
                    f"p99 {latency(result.p99_ms)}{flag}",
                    file=sys.stderr,
                    flush=True,
                )


def summarise_runs(raw: list[dict], targets: list[str], levels: list[int]) -> dict:
    lost = [{k: r[k] for k in ("round", "target", "level", "lost")} for r in raw if "lost" in r]
    raw = [r for r in raw if "lost" not in r]
    cells: dict[str, dict] = {}
    for level in levels:
        row: dict = {}
        per = {
            t: sorted((r for r in raw if r["target"] == t and r["level"] == level), key=lambda r: r["round"])
            for t in targets
        }
        for target, runs in per.items():
            if not runs:
                continue
            lags = [r["loop_lag"] for r in runs if r.get("loop_lag")]
            row[target] = {
                "rps": summarise([r["requests_per_sec"] for r in runs]).__dict__,
                "p50_ms": median([r["p50_ms"] for r in runs]),
                "p99_ms": median([r["p99_ms"] for r in runs]),
                "failure_rate": sum(r["failures"] for r in runs) / max(1, sum(r["requests"] for r in runs)),
                "failures": sum(r["failures"] for r in runs),
                "generator_cpu": median([r["generator_cpu"] for r in runs]),
                "generator_bound_runs": sum(1 for r in runs if r["generator_bound"]),
                "loop_lag": {k: median([lag[k] for lag in lags]) for k in ("p50_ms", "p99_ms", "max_ms")}
                if lags
                else None,
            }
        if "aiorest" in per and per["aiorest"]:
            for other in targets:
                if other != "aiorest" and per.get(other):
                    theirs = {r["round"]: r["requests_per_sec"] for r in per[other]}
                    pairs = [  # paired by round: a lost run leaves its round out of the ratio
                        (a["requests_per_sec"], theirs[a["round"]]) for a in per["aiorest"] if a["round"] in theirs
                    ]
                    if pairs:
                        row[f"aiorest/{other}"] = paired_ratio([a for a, _ in pairs], [b for _, b in pairs]).__dict__
        cells[str(level)] = row
    return {
        "targets": targets,
        "levels": levels,
        "cells": cells,
        "endpoints": summarise_endpoints(raw, targets, levels),
        "lost_runs": lost,
    }


_ERROR_KINDS = ("failures", "timeouts", "socket_errors", "non_2xx")


def summarise_endpoints(raw: list[dict], targets: list[str], levels: list[int]) -> dict:
    """Per level and endpoint: each target's requests/s and errors, and aiorest's paired ratios."""
    result: dict[str, dict] = {}
    for level in levels:
        per = {
            t: sorted((r for r in raw if r["target"] == t and r["level"] == level), key=lambda r: r["round"])
            for t in targets
        }
        paths = list(dict.fromkeys(path for runs in per.values() for r in runs for path in r["per_endpoint"]))
        rows: dict[str, dict] = {}
        for path in paths:
            rates: dict[str, dict[int, float]] = {}  # per target: round → requests/s
            row: dict = {}
            for target, runs in per.items():
                entries = [(r["per_endpoint"][path], r) for r in runs if path in r["per_endpoint"]]
                if not entries:
                    continue
                # wrk reports each endpoint's own rate; locust's endpoints share the run's time
                rates[target] = {
                    r["round"]: e.get("rps", e["requests"] / r["seconds"] if r["seconds"] else 0.0) for e, r in entries
                }
                row[target] = {
                    "rps": summarise(list(rates[target].values())).__dict__,
                    "requests": sum(e["requests"] for e, _ in entries),
                    "p99_ms": median([e["p99_ms"] for e, _ in entries]),
                    **{kind: sum(e.get(kind, 0) for e, _ in entries) for kind in _ERROR_KINDS},
                }
            for other in targets:
                if other != "aiorest" and "aiorest" in rates and other in rates:
                    rounds = [n for n in rates["aiorest"] if n in rates[other]]
                    if rounds:
                        row[f"aiorest/{other}"] = paired_ratio(
                            [rates["aiorest"][n] for n in rounds], [rates[other][n] for n in rounds]
                        ).__dict__
            rows[path] = row
        result[str(level)] = rows
    return result


def markdown(summary: dict, command: str, tool: str) -> str:
    unit = "connections" if tool == "wrk" else "users"
    resolution = LOCUST_RESOLUTION_MS if tool == "locust" else 0.0
    lines = [
        f"`{command}`",
        "",
        f"| {unit} | target | req/s mean ± std | 95% CI | p50 | p99 | failure rate | generator CPU "
        "| loop lag p50 / p99 / max |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for level, row in summary["cells"].items():
        for target in summary["targets"]:
            cell = row.get(target)
            if cell is None:
                continue
            rps = cell["rps"]
            lag = cell["loop_lag"]
            lag_text = " / ".join(latency(lag[k]) for k in ("p50_ms", "p99_ms", "max_ms")) if lag else "–"
            gen = "–" if math.isnan(cell["generator_cpu"]) else f"{cell['generator_cpu']:.0%}"
            if cell["generator_bound_runs"]:
                gen += f" (bound in {cell['generator_bound_runs']})"
            lines.append(
                f"| {level} | {target} | {rps['mean']:,.0f} ± {rps['std']:,.0f} | {rps['ci_low']:,.0f}–"
                f"{rps['ci_high']:,.0f} | {latency(cell['p50_ms'], resolution)} "
                f"| {latency(cell['p99_ms'], resolution)} "
                f"| {cell['failure_rate']:.3%} "
                f"({cell['failures']}) | {gen} | {lag_text} |"
            )
        for key, ratio in row.items():
            if key.startswith("aiorest/"):
                lines.append(
                    f"| {level} | **{key}** | **{ratio['mean']:.2f}×** | {ratio['ci_low']:.2f}–"
                    f"{ratio['ci_high']:.2f} | | | | | |"
                )
    lines += ["", *endpoint_markdown(summary, unit)]
    lost = summary.get("lost_runs") or []
    if lost:
        lines += ["", f"{len(lost)} run(s) lost (the load generator failed; left out of every figure above):", ""]
        lines += [f"- round {r['round'] + 1}, {r['target']}, {unit} {r['level']}: {r['lost']}" for r in lost]
    return "\n".join(lines)


def endpoint_markdown(summary: dict, unit: str) -> list[str]:
    """One row per level and endpoint: requests/s, errors by kind, and the ratios."""
    targets = summary["targets"]
    others = [t for t in targets if t != "aiorest"]
    header = [unit, "endpoint", *(f"{t} req/s" for t in targets), *(f"aiorest/{t} (95% CI)" for t in others)]
    header += [f"{t} errors (timeouts / socket / non-2xx)" for t in targets]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for level, rows in summary["endpoints"].items():
        for path, row in rows.items():
            cells = [level, f"`{path}`"]
            cells += [f"{row[t]['rps']['mean']:,.0f}" if t in row else "–" for t in targets]
            for other in others:
                ratio = row.get(f"aiorest/{other}")
                # no ratio where the baseline answered nothing in every round
                usable = ratio and not math.isnan(ratio["mean"])
                cells.append(f"{ratio['mean']:.2f}× ({ratio['ci_low']:.2f}–{ratio['ci_high']:.2f})" if usable else "–")
            cells += [
                f"{row[t]['failures']} ({row[t]['timeouts']} / {row[t]['socket_errors']} / {row[t]['non_2xx']})"
                if t in row
                else "–"
                for t in targets
            ]
            lines.append("| " + " | ".join(cells) + " |")
    return lines


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    unknown = [t for t in targets if t not in TARGETS]
    if unknown:
        raise SystemExit(f"unknown target(s) {unknown}; choose from {sorted(TARGETS)}")
    levels = [int(x) for x in args.users.split(",")]
    if args.paths and not all(path.startswith("/") for path in args.paths.split(",")):
        raise SystemExit(f"--paths takes paths that start with '/', e.g. /db,/fortunes; got {args.paths!r}")
    dsn = check_database(args.dsn)
    limit = raise_file_limit()
    if max(levels) + 100 > limit:
        print(f"warning: the file-descriptor limit is {limit}; {max(levels)} connections need more", file=sys.stderr)
    out = args.out / f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}"
    out.mkdir(parents=True)
    command = "python -m load compare " + " ".join(argv)
    raw: list[dict] = []
    status = 0
    try:
        with postgres_pinned(1):
            measure(args, dsn, targets, levels, raw)
    except KeyboardInterrupt:
        print("interrupted: writing what was measured", file=sys.stderr)
        status = 130
    except ServerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        status = 1
    (out / "raw.json").write_text(json.dumps(raw, indent=1))
    if not raw:
        print(f"nothing was measured; see {out}", file=sys.stderr)
        return status or 1
    summary = summarise_runs(raw, targets, levels)
    summary.update(command=command, tool=args.tool, flow=args.flow, duration=args.duration, rounds=args.rounds)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    table = markdown(summary, command, args.tool)
    (out / "summary.md").write_text(table + "\n")
    pngs = plot(summary, out, args.tool)
    print(table)
    print(f"\nwritten to {out}: raw.json summary.json summary.md {' '.join(pngs)}")
    return status

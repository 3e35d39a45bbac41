"""Benchmarks: aiorest against aiohttp.web (and the raw-protocol ceiling), side by side.

    python bench/run.py core --rounds 30            # /json, /plaintext: aiorest, aiohttp, ceiling
    python bench/run.py db --rounds 10              # TechEmpower DB endpoints: aiorest, aiohttp, bare asyncpg
    python bench/run.py drivers --rounds 30         # the example app on its two database drivers
    python bench/run.py blocked --rounds 30         # /json with the blocked-loop detector off and on
    python bench/run.py --smoke --contenders aiohttp,ceiling --endpoints json   # a quick check
    python bench/run.py core --against /tmp/old-aiorest --contenders aiorest    # this tree over another

``--against DIR`` adds the same aiorest server run from another checkout of
aiorest (``git worktree add DIR REV``), named ``aiorest@DIR``: the ratio
``aiorest/aiorest@DIR`` is this tree's throughput over that one's, measured side
by side (the core suite's server; the example app on the default driver in the
db and drivers suites).

Each round starts every contender fresh (one process, pinned to CPU 0), warms it
up, drives it with wrk (pinned to CPU 1), stops it, and rotates the order of
contenders from round to round. Results go to bench/out/<time>-<suite>/.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script: bench/ is a package

from bench.db_answers import check_answers  # noqa: E402
from bench.host import describe, one_line  # noqa: E402
from bench.stats import Summary, bar_chart, median, paired_ratio, summarise  # noqa: E402
from bench.wrk import WrkResult, require_wrk, run_wrk  # noqa: E402
from harness.postgres import migrate, postgres_pids, postgres_pinned  # noqa: E402
from harness.processes import ServerError, ServerProcess  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SERVERS = Path(__file__).resolve().parent / "servers"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
BASE = "aiorest"  # the ratios are aiorest over each other contender
T = TypeVar("T")
NO_FIGURES = (
    "p50_ms",
    "p99_ms",
    "server_cpu_us_per_request",
    "server_kernel_us_per_request",
    "postgres_cpu_us_per_request",
)
Record = dict[str, Any]  # one measured run, or one cell of the summary: JSON-shaped


@dataclass(frozen=True)
class Contender:
    name: str
    command: list[str]  # "{port}" is replaced
    env: dict[str, str] = field(default_factory=dict)  # added to the suite's environment


CORE = [
    Contender("aiorest", [sys.executable, str(SERVERS / "aiorest_app.py"), "--port", "{port}"]),
    Contender("aiohttp", [sys.executable, str(SERVERS / "aiohttp_app.py"), "--port", "{port}"]),
    Contender("ceiling", [sys.executable, str(SERVERS / "ceiling.py"), "--port", "{port}"]),
]
EXAMPLE_APP = [sys.executable, "-m", "aiorest", "run", "example_app:app", "--port", "{port}", "--log-level", "warning"]
DB = [
    Contender("aiorest", EXAMPLE_APP),
    Contender("aiohttp", [sys.executable, str(SERVERS / "aiohttp_app.py"), "--port", "{port}"]),
    # the floor: no framework, a bare protocol and an asyncpg pool (what issue 38 measures aiorest against)
    Contender("asyncpg-bare", [sys.executable, str(SERVERS / "db_asyncpg.py"), "--port", "{port}"]),
    # ... without the reset query asyncpg's pool sends on every release: the least Python on asyncpg does
    Contender("asyncpg-lean", [sys.executable, str(SERVERS / "db_asyncpg.py"), "--port", "{port}", "--no-reset"]),
]
# The example app on each database driver (docs/database.rst, choosing a driver).
DRIVERS = [
    Contender("aiorest", EXAMPLE_APP),
    Contender("aiorest-aiopg", EXAMPLE_APP, {"DATABASE_DRIVER": "aiopg"}),
]
# The blocked-loop detector's cost: the core suite's server with it off and on (docs/deployment.rst).
BLOCKED = [
    CORE[0],
    Contender("aiorest-blocked", [*CORE[0].command, "--blocked-loop-threshold", "0.1"]),
]
SUITES = {
    "core": (CORE, ["/json", "/plaintext"]),
    "blocked": (BLOCKED, ["/json"]),
    "db": (DB, ["/db", "/queries?queries=20", "/fortunes", "/updates?queries=20"]),
    "drivers": (DRIVERS, ["/db", "/queries?queries=20", "/fortunes"]),
}
DB_SUITES = ("db", "drivers")


def cpu_seconds(pids: list[int]) -> float:
    return sum(cpu_times(pids))


def cpu_times(pids: list[int]) -> tuple[float, float]:
    """The CPU seconds ``pids`` have spent so far: in user space, and in the kernel for them."""
    user = system = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        user += int(fields[11])  # utime
        system += int(fields[12])  # stime
    return user / CLOCK_TICKS, system / CLOCK_TICKS


def measure(
    server: ServerProcess,
    path: str,
    connections: int,
    seconds: float,
    db: bool,
    postgres: Callable[[], list[int]] = postgres_pids,
    **wrk: Any,
) -> dict[str, float]:
    """One run of wrk after a second of warm-up; ``wrk`` goes to run_wrk (a Lua script and its arguments).

    With ``db``, PostgreSQL's CPU per request too: that of the processes ``postgres``
    returns (after the warm-up), by default every PostgreSQL process of the machine.
    """
    url = server.url + path
    run_wrk(url, connections=connections, seconds=1, **wrk)  # warm-up, discarded
    pg = postgres() if db else []
    server_user, server_kernel = cpu_times([server.process.pid, *child_pids(server.process.pid)])
    pg_before = {pid: cpu_seconds([pid]) for pid in pg}
    result: WrkResult = run_wrk(url, connections=connections, seconds=seconds, **wrk)
    user, kernel = cpu_times([server.process.pid, *child_pids(server.process.pid)])
    server_cpu, server_kernel = user - server_user + kernel - server_kernel, kernel - server_kernel
    # a backend that ends meanwhile (the previous server's, closing) reads 0 after: left out, not subtracted
    pg_cpu = sum(after - pg_before[pid] for pid in pg if (after := cpu_seconds([pid])) >= pg_before[pid])
    done = result.requests
    if not done:
        # wrk counts only finished requests: none means the run measured nothing (an overloaded machine)
        print(f"warning: no request to {url} finished in {seconds:.0f} s", file=sys.stderr, flush=True)
        return {**result.as_dict(), **dict.fromkeys(NO_FIGURES, math.nan)}
    return {
        **result.as_dict(),
        "server_cpu_us_per_request": server_cpu * 1e6 / done,
        "server_kernel_us_per_request": server_kernel * 1e6 / done,  # of it, in the kernel (copies, syscalls)
        "postgres_cpu_us_per_request": pg_cpu * 1e6 / done if db else math.nan,
    }


def child_pids(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def run_suite(
    contenders: list[Contender],
    paths: list[str],
    rounds: int,
    seconds: float,
    levels: list[int],
    env: dict[str, str],
    db: bool,
    raw: list[Record],
) -> None:
    """Append one record per measured run to ``raw`` (so a failure keeps what was measured)."""
    started = time.monotonic()
    for round_number in range(rounds):
        shift = round_number % len(contenders)
        for contender in contenders[shift:] + contenders[:shift]:
            server = ServerProcess(contender.name, contender.command, {**env, **contender.env})
            try:
                server.wait_ready(paths[0])
                if db and round_number == 0:  # the same work from each, checked once
                    check_answers(contender.name, server.url, paths)
                for path in paths:
                    for connections in levels:
                        elapsed = time.monotonic() - started
                        # the load average shows at a glance whether something else shares the machine
                        print(
                            f"round {round_number + 1}/{rounds}  {contender.name:8s} {path:22s} "
                            f"c={connections:<4d} elapsed {elapsed:6.0f} s  load {os.getloadavg()[0]:5.1f}",
                            file=sys.stderr,
                            flush=True,
                        )
                        figures = measure(server, path, connections, seconds, db)
                        raw.append(
                            {
                                "round": round_number,
                                "contender": contender.name,
                                "path": path,
                                "connections": connections,
                                **figures,
                            }
                        )
            finally:
                server.stop()


def summarise_suite(raw: list[Record], suite: str, contenders: list[str], paths: list[str]) -> Record:
    keys = sorted({(r["path"], r["connections"]) for r in raw}, key=lambda k: (paths.index(k[0]), k[1]))
    others = [name for name in contenders if name != BASE] if BASE in contenders else []
    table: Record = {}
    for path, connections in keys:
        cell: Record = {}
        per = {
            name: sorted(
                (r for r in raw if (r["contender"], r["path"], r["connections"]) == (name, path, connections)),
                key=lambda r: r["round"],
            )
            for name in contenders
        }
        for name, rows in per.items():
            rps = summarise([r["requests_per_sec"] for r in rows])
            cell[name] = {
                "rps": rps.__dict__,
                "p99_ms": median([r["p99_ms"] for r in rows]),
                "errors": sum(r["errors"] for r in rows),
                "timeouts": sum(r["timeouts"] for r in rows),
                "server_cpu_us": median([r["server_cpu_us_per_request"] for r in rows]),
                "postgres_cpu_us": median([r["postgres_cpu_us_per_request"] for r in rows]),
            }
        for other in others:
            # a run cut short by a failure can leave a round without its pair: pair by round number
            rounds = {r["round"] for r in per[BASE]} & {r["round"] for r in per[other]}
            base = [r["requests_per_sec"] for r in per[BASE] if r["round"] in rounds]
            rates = [r["requests_per_sec"] for r in per[other] if r["round"] in rounds]
            cell[f"{BASE}/{other}"] = {
                **paired_ratio(base, rates).__dict__,
                "median": median([a / b for a, b in zip(base, rates, strict=True) if b]),
                "server_cpu": cpu_ratio(per[BASE], per[other]),
            }
        table[f"{path} c={connections}"] = cell
    return {"suite": suite, "contenders": contenders, "ratios": [f"{BASE}/{o}" for o in others], "table": table}


def cpu_ratio(base: list[Record], other: list[Record]) -> Record:
    """aiorest's server CPU per request over the other's, paired by round (below 1: aiorest spends less)."""
    cpu = "server_cpu_us_per_request"
    theirs = {r["round"]: r[cpu] for r in other if not math.isnan(r[cpu])}
    pairs = [(r[cpu], theirs[r["round"]]) for r in base if r["round"] in theirs and not math.isnan(r[cpu])]
    ratio = paired_ratio([a for a, _ in pairs], [b for _, b in pairs])
    return {**ratio.__dict__, "median": median([a / b for a, b in pairs])}


def markdown(summary: Record) -> str:
    contenders, ratio_keys = summary["contenders"], summary["ratios"]
    names = ", ".join(contenders)
    columns = [
        "endpoint",
        *(f"{c} req/s (95% CI)" for c in contenders),
        *(f"{r} (mean, 95% CI; median)" for r in ratio_keys),
        *(f"server CPU/req {r} (mean, 95% CI)" for r in ratio_keys),
        f"server CPU µs/req, median ({names})",
        f"p99 ms, median ({names})",
        f"errors (timeouts) ({names})",
    ]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for key, cell in summary["table"].items():
        rates = [
            f"{cell[c]['rps']['mean']:,.0f} ± {(cell[c]['rps']['ci_high'] - cell[c]['rps']['ci_low']) / 2:,.0f}"
            for c in contenders
        ]
        ratios = [
            f"{cell[r]['mean']:.2f} ({cell[r]['ci_low']:.2f}–{cell[r]['ci_high']:.2f}; {cell[r]['median']:.2f})"
            for r in ratio_keys
        ]
        cpu_ratios = [
            f"{c['mean']:.2f} ({c['ci_low']:.2f}–{c['ci_high']:.2f})"
            for c in (cell[r]["server_cpu"] for r in ratio_keys)
        ]
        cpu = ", ".join(f"{cell[c]['server_cpu_us']:.1f}" for c in contenders)
        if not math.isnan(cell[contenders[0]]["postgres_cpu_us"]):
            cpu += " (PostgreSQL: " + ", ".join(f"{cell[c]['postgres_cpu_us']:.0f}" for c in contenders) + ")"
        p99 = ", ".join(f"{cell[c]['p99_ms']:.1f}" for c in contenders)
        errors = ", ".join(f"{cell[c]['errors']} ({cell[c]['timeouts']})" for c in contenders)
        lines.append("| " + " | ".join([key, *rates, *ratios, *cpu_ratios, cpu, p99, errors]) + " |")
    return "\n".join(lines)


def plot(summary: Record, path: Path) -> bool:
    keys = list(summary["table"])
    series = {c: [Summary(**summary["table"][k][c]["rps"]) for k in keys] for c in summary["contenders"]}
    return bar_chart(path, f"{summary['suite']}: requests/s (95% CI)", keys, series, "requests/s")


def select(items: list[T], name: Callable[[T], str], wanted: str | None, what: str) -> list[T]:
    """The items named in the comma-separated ``wanted`` (all when empty), in the suite's order."""
    if not wanted:
        return items
    names = {w.strip().lstrip("/") for w in wanted.split(",") if w.strip()}
    unknown = names - {name(item) for item in items}
    if unknown or not names:
        choices = ", ".join(name(item) for item in items)
        raise SystemExit(f"unknown {what}: {', '.join(sorted(unknown)) or wanted!r} (choose from {choices})")
    return [item for item in items if name(item) in names]


def suite_environment(suite: str, dsn: str | None) -> dict[str, str]:
    """The servers' environment; for the db suite, the database (migrated) and pools of 32."""
    env = dict(os.environ)
    if suite not in DB_SUITES:
        return env
    if not dsn:
        raise SystemExit(f"the {suite} suite needs a database: --dsn postgresql://... or DATABASE_URL")
    env.update(DATABASE_URL=dsn, DATABASE_POOL_MIN="32", DATABASE_POOL_MAX="32", BENCH_POOL_SIZE="32")
    try:
        migrate(dsn)
    except RuntimeError as exc:
        raise SystemExit(f"the benchmark database: {exc}") from None
    return env


def against(checkout: Path, suite: str) -> Contender:
    """The suite's aiorest server, run from another checkout (its own aiorest first on the path)."""
    checkout = checkout.resolve()
    name, env = f"aiorest@{checkout.name}", {"PYTHONPATH": str(checkout)}
    if suite in DB_SUITES:
        if not (checkout / "example_app" / "app.py").is_file():
            raise SystemExit(f"--against {checkout}: no example_app there")
        return Contender(name, EXAMPLE_APP, {**env, "DATABASE_DRIVER": "psycopg2"})
    script = checkout / "bench" / "servers" / "aiorest_app.py"
    if not script.is_file():
        raise SystemExit(f"--against {checkout}: no bench/servers/aiorest_app.py there")
    return Contender(name, [sys.executable, str(script), "--port", "{port}"], env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suite", nargs="?", default="core", choices=sorted(SUITES), help="default: core")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--duration", type=float, default=5.0, help="seconds of measured load per run")
    parser.add_argument("--connections", default=None, help="comma-separated levels (core: 64; db: 64,256)")
    parser.add_argument("--contenders", default=None, help="comma-separated subset, e.g. aiohttp,ceiling")
    parser.add_argument("--endpoints", default=None, help="comma-separated subset, e.g. json,plaintext")
    parser.add_argument("--smoke", action="store_true", help="a quick check: 2 rounds of 1 s")
    parser.add_argument("--dsn", default=os.environ.get("DATABASE_URL"), help="db suite: a PostgreSQL URL")
    parser.add_argument("--against", type=Path, help="also run aiorest from this other checkout")
    args = parser.parse_args()
    require_wrk()
    if args.smoke:
        args.rounds, args.duration = 2, 1.0
    contenders = list(select(SUITES[args.suite][0], lambda c: c.name, args.contenders, "contender"))
    if args.against is not None:
        contenders.append(against(args.against, args.suite))
    paths = select(SUITES[args.suite][1], lambda p: p.lstrip("/").split("?")[0], args.endpoints, "endpoint")
    levels = [int(x) for x in (args.connections or ("64,256" if args.suite in DB_SUITES else "64")).split(",")]
    env = suite_environment(args.suite, args.dsn)
    host = describe()  # before the load: its load average says how busy the machine was
    out = ROOT / "bench" / "out" / f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{args.suite}"
    out.mkdir(parents=True)
    raw: list[Record] = []

    def run() -> None:
        db = args.suite in DB_SUITES
        with postgres_pinned(1) if db else nullcontext():
            run_suite(contenders, paths, args.rounds, args.duration, levels, env, db, raw)

    failure = keep_measuring(out, raw, run)
    summary = summarise_suite(raw, args.suite, [c.name for c in contenders], paths)
    summary["command"] = " ".join(sys.argv)
    summary["host"] = host
    write_summary(out, summary, markdown(summary), plot)
    if failure:
        raise SystemExit(failure)


def keep_measuring(out: Path, raw: list[Record], run: Callable[[], None]) -> str | None:
    """Call ``run``, which appends records to ``raw``, and write them to ``out/raw.json`` however it ends.

    An interrupt (Ctrl-C) or a server error keeps what was measured before it;
    the error is returned, to be raised once the summary is written. Nothing
    measured at all ends the program.
    """
    failure = None
    try:
        run()
    except KeyboardInterrupt:
        print("interrupted: writing what was measured", file=sys.stderr)
    except ServerError as exc:
        failure = f"error: {exc}"
        print(failure + "\nwriting what was measured before it", file=sys.stderr)
    finally:
        (out / "raw.json").write_text(json.dumps(raw, indent=1))
    if not raw:
        raise SystemExit(failure or "nothing was measured")
    return failure


def write_summary(out: Path, summary: Record, text: str, plot: Callable[[Record, Path], bool]) -> None:
    """summary.json, summary.md (the command, the host, ``text``) and the plot in ``out``; ``text`` printed."""
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    (out / "summary.md").write_text(f"`{summary['command']}`\n\n{one_line(summary['host'])}\n\n{text}\n")
    plotted = plot(summary, out / "throughput.png")
    print(text)
    print(f"\nwritten to {out}" + ("" if plotted else " (no PNG: pip install matplotlib)"))


if __name__ == "__main__":
    main()

"""A list of notes: example_app's GET /notes?limit=20 against the same endpoint in FastAPI (issue 38).

    python bench/notes.py --rounds 30 --duration 4     # a headline figure
    python bench/notes.py --smoke                      # 1 round of 1 s: checks the harness, not a figure
    python bench/notes.py --profile                    # py-spy of aiorest's side under the same load

One user with a bearer token and 30 notes (and a second user with 30 of their
own, whom the owner filter must leave out), in a fresh database migrated as
example_app migrates it. GET /notes?limit=20 with ``Authorization: Bearer``
answers 20 notes and the URL of the next page. The contenders: example_app
(``aiorest run example_app:app``, one process) on its psycopg2 driver and on
its aiopg driver, and bench/servers/notes_fastapi.py, the endpoint as a FastAPI
user writes it (asyncpg pool, pydantic models, a Depends for the token; uvicorn
with httptools and uvloop). Every pool holds 32 connections, opened at start.

Before it measures a contender, the script checks that it answers the same JSON
as the others and refuses a request without the token. Then, as bench/run.py:
a fresh process per contender and round on CPU 0, wrk (one thread) and every
PostgreSQL process on CPU 1, a second of warm-up, the order rotated each round,
the server's and PostgreSQL's CPU per request from /proc. Ratios are paired per
round: each aiorest driver's requests/s over FastAPI's, and FastAPI's server CPU
per request over its. Raw figures go to bench/out/<time>-notes/; a full run also
writes its Markdown table and plot to bench/results/notes-<date>.{md,png}.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import secrets
import shutil
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script: bench/ is a package

import psycopg2  # noqa: E402

from aiorest.security import token_hash  # noqa: E402
from bench.host import describe  # noqa: E402
from bench.profile import print_profile, sample  # noqa: E402
from bench.run import (  # noqa: E402
    EXAMPLE_APP,
    SERVERS,
    Contender,
    Record,
    keep_measuring,
    measure,
    select,
    write_summary,
)  # noqa: E402
from bench.stats import Summary, median, summarise  # noqa: E402
from bench.wrk import require_wrk  # noqa: E402
from example_app import queries  # noqa: E402
from example_app.app import MIGRATE_ARGS  # noqa: E402
from harness.postgres import fresh_database, migrate, postgres_pinned  # noqa: E402
from harness.processes import ServerError, ServerProcess  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
LUA = str(Path(__file__).resolve().parent / "headers.lua")
PATH = "/notes?limit=20"
NOTES = 30  # the caller's: a page of 20 and a next one
PEER = "fastapi"
POOL = "32"
CONTENDERS = [
    Contender("aiorest", EXAMPLE_APP, {"DATABASE_DRIVER": "psycopg2"}),
    Contender("aiorest-aiopg", EXAMPLE_APP, {"DATABASE_DRIVER": "aiopg"}),
    Contender(PEER, [sys.executable, str(SERVERS / "notes_fastapi.py"), "--port", "{port}"]),
]
READY = {PEER: "/ready"}  # the example app's: /json (served once its migrations have run)
# issue 38: requests/s over FastAPI's, and FastAPI's CPU per request over its, at least this
TARGETS = {"aiorest": 5.0, "aiorest-aiopg": 4.0}
DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres?sslmode=disable"


def seed(dsn: str) -> str:
    """The caller (a user, a bearer token, NOTES notes) and a second user's notes; the token."""
    token = secrets.token_urlsafe(32)
    connection = psycopg2.connect(dsn)
    connection.autocommit = True
    try:
        with connection.cursor() as cursor:
            owners = []
            for username in ("bench", "someone-else"):
                # nobody logs in: the token is made here, so the password hash is never checked
                cursor.execute(queries.INSERT_USER, (username, "not a password hash"))
                owners.append(cursor.fetchone()[0])
            cursor.execute(queries.INSERT_TOKEN, (token_hash(token), owners[0]))
            for n in range(NOTES):
                for owner in owners:
                    title = f"Note {n + 1}: call the plumber about the kitchen tap"
                    body = "Ask for Thursday morning; the spare key is with the neighbour at number 12. " * 2
                    cursor.execute(queries.INSERT_NOTE, (owner, title, body, n % 3 == 0))
    finally:
        connection.close()
    return token


@contextmanager
def notes_database(url: str) -> Iterator[tuple[str, str]]:
    """A fresh database on ``url``'s server with example_app's schema and the notes: (its URL, the token)."""
    with fresh_database(url) as dsn:
        try:
            migrate(dsn, *MIGRATE_ARGS)
        except RuntimeError as exc:
            raise SystemExit(f"the benchmark database: {exc}") from None
        yield dsn, seed(dsn)


def backends(dsn: str) -> list[int]:
    """The PostgreSQL processes serving ``dsn``'s database: the servers' pools (other sessions' left out)."""
    connection = psycopg2.connect(dsn)
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            return [pid for (pid,) in cursor.fetchall()]
    finally:
        connection.close()


def get(url: str, token: str | None) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, None


def check(server: ServerProcess, token: str, expected: dict[str, Any]) -> None:
    """The server answers the page ``expected`` holds (or sets it: the first answer) and 401s without a token.

    Two servers that answered different JSON would measure different work: ServerError.
    """
    status, page = get(server.url + PATH, token)
    if status != 200 or not isinstance(page, dict) or len(page.get("items", ())) != 20 or not page.get("next"):
        raise ServerError(f"{server.name} answered GET {PATH} {status} {page!r:.400}")
    if not expected:
        expected.update(page)
    elif page != expected:
        raise ServerError(f"{server.name} answered another page:\n{page!r:.1000}\nnot\n{expected!r:.1000}")
    status, _ = get(server.url + PATH, None)
    if status not in (401, 403):  # FastAPI's HTTPBearer answers 403 without the header in older versions
        raise ServerError(f"{server.name} answered GET {PATH} without a token {status}")


def run_rounds(
    contenders: list[Contender], env: dict[str, str], token: str, args: argparse.Namespace, raw: list[Record]
) -> None:
    """Append one record per measured run to ``raw`` (so a failure keeps what was measured)."""
    expected: dict[str, Any] = {}
    header = f"Authorization: Bearer {token}"
    for round_number in range(args.rounds):
        shift = round_number % len(contenders)
        for contender in contenders[shift:] + contenders[:shift]:
            server = ServerProcess(contender.name, contender.command, {**env, **contender.env})
            try:
                server.wait_ready(READY.get(contender.name, "/json"))
                check(server, token, expected)
                print(
                    f"round {round_number + 1}/{args.rounds}  {contender.name:14s} load {os.getloadavg()[0]:5.1f}",
                    file=sys.stderr,
                    flush=True,
                )
                figures = measure(
                    server,
                    PATH,
                    args.connections,
                    args.duration,
                    True,
                    lambda: backends(env["DATABASE_URL"]),
                    script=LUA,
                    script_args=[header],
                )
                raw.append({"round": round_number, "contender": contender.name} | figures)
            finally:
                server.stop()


def summarise_runs(raw: list[Record], names: list[str]) -> Record:
    """Each contender's figures, and each aiorest driver's ratios to FastAPI paired by round."""
    per = {name: {r["round"]: r for r in raw if r["contender"] == name} for name in names}
    cells: Record = {}
    for name in names:
        rows = list(per[name].values())
        cells[name] = {
            "rps": summarise([r["requests_per_sec"] for r in rows]).__dict__,
            "server_cpu_us": median([r["server_cpu_us_per_request"] for r in rows]),
            "postgres_cpu_us": median([r["postgres_cpu_us_per_request"] for r in rows]),
            "p50_ms": median([r["p50_ms"] for r in rows]),
            "p99_ms": median([r["p99_ms"] for r in rows]),
            "errors": sum(r["errors"] for r in rows),
            "timeouts": sum(r["timeouts"] for r in rows),
        }
    ratios: Record = {}
    for name in [n for n in names if n in TARGETS and PEER in names]:
        rounds = sorted(set(per[name]) & set(per[PEER]))
        ours, theirs = [per[name][n] for n in rounds], [per[PEER][n] for n in rounds]
        pairs = {
            "rps": ([r["requests_per_sec"] for r in ours], [r["requests_per_sec"] for r in theirs]),
            "cpu": ([r["server_cpu_us_per_request"] for r in theirs], [r["server_cpu_us_per_request"] for r in ours]),
        }
        for kind, (top, bottom) in pairs.items():
            per_round = {n: a / b if b > 0 else math.nan for n, a, b in zip(rounds, top, bottom, strict=True)}
            each = [x for x in per_round.values() if not math.isnan(x)]
            ratio = {
                **summarise(each).__dict__,
                "median": median(each),
                "min": min(each, default=math.nan),
                "max": max(each, default=math.nan),
                "per_round": per_round,
                "target": TARGETS[name],
            }
            ratio["verdict"] = verdict(ratio)
            ratios[f"{name}/{PEER} {kind}"] = ratio
    return {"cells": cells, "ratios": ratios}


def verdict(ratio: Record) -> str:
    """met when the 95% CI of the paired ratio lies above the target, missed below, undecided across."""
    if math.isnan(ratio["mean"]):
        return "not measured"
    found = (
        "met" if ratio["ci_low"] >= ratio["target"] else "missed" if ratio["ci_high"] < ratio["target"] else "undecided"
    )
    return found + (" (one round: no interval)" if ratio["n"] < 2 else "")


def ratio_label(key: str) -> str:
    name, kind = key.rsplit(" ", 1)
    ours = name.split("/")[0]
    return f"{ours} / FastAPI requests/s" if kind == "rps" else f"FastAPI / {ours} server CPU per request"


def report(summary: Record) -> str:
    cells, ratios, names = summary["cells"], summary["ratios"], summary["contenders"]
    lines = [
        f"GET {PATH}, bearer token, 20 notes a page; wrk -c{summary['connections']}, "
        f"{summary['rounds']} round(s) of {summary['duration']:g} s",
        "",
        "| contender | requests/s (mean ± 95% CI) | server CPU µs/req (median) | PostgreSQL CPU µs/req (median) "
        "| p50 / p99 ms (median) | errors (timeouts) |",
        "|---|---|---|---|---|---|",
    ]
    for name in names:
        c = cells[name]
        rps = Summary(**c["rps"])
        lines.append(
            f"| {name} | {rps.mean:,.0f} ± {rps.half_width:,.0f} | {c['server_cpu_us']:.1f} | "
            f"{c['postgres_cpu_us']:.1f} | {c['p50_ms']:.1f} / {c['p99_ms']:.1f} | {c['errors']} ({c['timeouts']}) |"
        )
    if ratios:
        lines += [
            "",
            "| ratio, paired per round | mean (95% CI) | median | range | target | verdict |",
            "|---|---|---|---|---|---|",
        ]
        for key, r in ratios.items():
            lines.append(
                f"| {ratio_label(key)} | {r['mean']:.2f} ({r['ci_low']:.2f}–{r['ci_high']:.2f}) | {r['median']:.2f} "
                f"| {r['min']:.2f}–{r['max']:.2f} | ≥ {r['target']:g} | {r['verdict']} |"
            )
        keys = list(ratios)
        lines += ["", "Per round:", "", "| round | " + " | ".join(ratio_label(k) for k in keys) + " |"]
        lines.append("|---" * (len(keys) + 1) + "|")
        for n in sorted({n for r in ratios.values() for n in r["per_round"]}):
            lines.append(
                f"| {n + 1} | " + " | ".join(f"{ratios[k]['per_round'].get(n, math.nan):.2f}" for k in keys) + " |"
            )
    return "\n".join(lines)


def plot(summary: Record, path: Path) -> bool:
    """Requests/s and server CPU per request of each contender, and the paired ratios round by round."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    cells, names, ratios = summary["cells"], summary["contenders"], summary["ratios"]
    fig, (rps_ax, cpu_ax, ratio_ax) = plt.subplots(1, 3, figsize=(14, 4.5))
    rates = [Summary(**cells[n]["rps"]) for n in names]
    rps_ax.bar(names, [s.mean for s in rates], yerr=[s.half_width for s in rates], capsize=4, color="C0")
    rps_ax.set_title("requests/s (mean, 95% CI)")
    cpu_ax.bar(names, [cells[n]["server_cpu_us"] for n in names], color="C1", label="server")
    cpu_ax.bar(
        names, [cells[n]["postgres_cpu_us"] for n in names], color="C2", alpha=0.5, width=0.4, label="PostgreSQL"
    )
    cpu_ax.set_title("CPU µs per request (median)")
    cpu_ax.legend()
    for i, (key, r) in enumerate(ratios.items()):
        rounds = sorted(r["per_round"])
        ratio_ax.plot([n + 1 for n in rounds], [r["per_round"][n] for n in rounds], marker="o", label=ratio_label(key))
        ratio_ax.axhline(r["target"], color=f"C{i}", linestyle=":", linewidth=0.8)
    ratio_ax.set_title("paired ratios per round (dotted: targets)")
    ratio_ax.set_xlabel("round")
    ratio_ax.set_ylim(bottom=0)
    if ratios:
        ratio_ax.legend(fontsize=7)
    for ax in (rps_ax, cpu_ax, ratio_ax):
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(f"GET {PATH} with a bearer token: example_app against FastAPI (asyncpg, pydantic)")
    fig.tight_layout()
    fig.savefig(path, dpi=80)  # three panels: a small file to commit
    plt.close(fig)
    return True


def profile(env: dict[str, str], token: str, args: argparse.Namespace) -> None:
    """py-spy's profile of example_app on ``--driver`` under the same load."""
    contender = next(c for c in CONTENDERS if c.name == ("aiorest" if args.driver == "psycopg2" else "aiorest-aiopg"))
    server = ServerProcess(contender.name, contender.command, {**env, **contender.env})
    try:
        server.wait_ready("/json")
        check(server, token, {})
        found = sample(
            server, PATH, args.connections, args.duration, script=LUA, script_args=[f"Authorization: Bearer {token}"]
        )
    finally:
        server.stop()
    print_profile(found, f"example_app ({args.driver}) GET {PATH} c={args.connections}", args.top)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--duration", type=float, default=5.0, help="seconds of measured load per run (or sampled)")
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--contenders", default=None, help="comma-separated subset, e.g. aiorest,fastapi")
    parser.add_argument("--dsn", default=os.environ.get("DATABASE_URL") or DEFAULT_DSN, help="a PostgreSQL server")
    parser.add_argument("--smoke", action="store_true", help="a quick check: 1 round of 1 s")
    parser.add_argument("--out", type=Path, default=None, help="default: bench/out/<time>-notes")
    parser.add_argument("--no-results", action="store_true", help="do not write bench/results/notes-<date>.*")
    parser.add_argument("--profile", action="store_true", help="profile aiorest's side instead (py-spy)")
    parser.add_argument("--driver", default="psycopg2", choices=("psycopg2", "aiopg"), help="--profile's")
    parser.add_argument("--top", type=int, default=20, help="--profile: innermost frames listed")
    args = parser.parse_args()
    require_wrk()
    if args.smoke:
        args.rounds, args.duration = 1, 1.0
    contenders = select(CONTENDERS, lambda c: c.name, args.contenders, "contender")
    host = describe()  # before the load: its load average says how busy the machine was
    with notes_database(args.dsn) as (dsn, token), postgres_pinned(1):
        env = dict(os.environ)
        # aiorest's pool and asyncpg's: 32 connections each, opened at start
        env.update(DATABASE_URL=dsn, DATABASE_POOL_MIN=POOL, DATABASE_POOL_MAX=POOL, BENCH_POOL_SIZE=POOL)
        if args.profile:
            profile(env, token, args)
            return
        out = args.out or ROOT / "bench" / "out" / f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}-notes"
        out.mkdir(parents=True, exist_ok=True)
        raw: list[Record] = []
        failure = keep_measuring(out, raw, lambda: run_rounds(contenders, env, token, args, raw))
    names = [c.name for c in contenders]
    summary = summarise_runs(raw, names) | {
        "contenders": names,
        "connections": args.connections,
        "rounds": args.rounds,
        "duration": args.duration,
        "command": " ".join(sys.argv),
        "host": host,
    }
    write_summary(out, summary, report(summary), plot)
    if not (args.smoke or args.no_results or args.out or failure):
        results = ROOT / "bench" / "results" / f"notes-{datetime.now(UTC):%Y-%m-%d}"
        shutil.copy(out / "summary.md", results.with_suffix(".md"))
        if (out / "throughput.png").exists():
            shutil.copy(out / "throughput.png", results.with_suffix(".png"))
        print(f"summary.md and throughput.png copied to {results}.*")
    if failure:
        raise SystemExit(failure)


if __name__ == "__main__":
    main()

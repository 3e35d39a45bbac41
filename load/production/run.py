"""The production bar of issue 19, reproduced and printed: ``python -m load production``.

Each part starts real processes (aiorest parents with their workers, nginx,
PgBouncer, PostgreSQL's backends), on loopback only, bounded in time, and stops
them all:

``failover``   steady load through nginx to two aiorest upstreams of two workers
               each: (a) two SIGHUPs to one upstream, (b) SIGKILL of the other
               upstream's parent; every failed request is counted (harness/steady.py
               never retries)
``sigterm``    (c) slow requests in flight on a two-worker aiorest, then SIGTERM:
               every request answered, exit within the grace period
``admission``  (d) max_concurrency under a 10x overload (load/production/admission.py)
``pool``       (e) the example app with 4 workers against max_connections = 100,
               under ``wrk -t2 -c512 -d10s /queries?queries=5``
``costs``      (f) the access log and the metrics on /json, against both off,
               interleaved wrk rounds, each server's CPU per request
``pooler``     (f) /db through PgBouncer transaction mode against a direct
               connection (load/production/pooler.py; its own PostgreSQL unless --dsn)

The figures go to stdout and to ``load/out/production/<time>.json``, with
plots (the failover timeline, the costs) beside it. About 4 minutes in all.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.stats import Summary, bar_chart, paired_ratio, summarise
from bench.wrk import parse, require_wrk
from harness.nginx import Nginx
from harness.postgres import migrate
from harness.processes import AiorestProcess, children_of
from harness.restarts import sigterm_in_flight
from harness.steady import run as steady_run

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "load" / "out" / "production"  # raw runs: git-ignored
APP = "load.production.app:app"
PARTS = ("failover", "sigterm", "admission", "pool", "costs", "pooler")


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- (a) and (b): restarts and a killed upstream behind nginx ----------------------------------------


def failover(duration: float = 30.0, rate: float = 400.0, connections: int = 32) -> dict[str, Any]:
    """Steady load through nginx; SIGHUP upstream A twice (each reload finished), then SIGKILL upstream B's parent."""
    events: list[dict[str, Any]] = []
    with (
        AiorestProcess(APP, "--workers", "2", ready_path="/json") as first,
        AiorestProcess(APP, "--workers", "2", ready_path="/json") as second,
        Nginx() as nginx,
    ):
        nginx.start([first.upstream, second.upstream])
        workers = [sorted(first.worker_pids())]

        async def go() -> Any:
            start = time.monotonic()

            def note(what: str) -> None:
                events.append({"at_s": round(time.monotonic() - start, 2), "event": what})
                say(f"  {time.monotonic() - start:5.1f} s: {what}")

            def act() -> None:
                for number, at in enumerate((0.2, 0.45), start=1):
                    time.sleep(max(0.0, start + duration * at - time.monotonic()))
                    first.send_signal(signal.SIGHUP)
                    note("SIGHUP upstream A")
                    first.wait_for_log("reload done", count=number, timeout=duration)
                    note("upstream A reloaded")
                    workers.append(sorted(first.worker_pids()))
                time.sleep(max(0.0, start + duration * 0.7 - time.monotonic()))
                second.kill()
                note("SIGKILL upstream B's parent")

            load = asyncio.ensure_future(
                steady_run(f"{nginx.url}/json", rate=rate, duration=duration, connections=connections, progress=True)
            )
            try:
                await asyncio.to_thread(act)
            finally:
                result = await load
            return result

        result = asyncio.run(go())
        deadline = time.monotonic() + 15  # the last reload's old workers finish their drain
        while len(first.worker_pids()) > 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        workers.append(sorted(first.worker_pids()))
        b_workers_left = sorted(second.worker_pids())
    summary = result.summary()
    return {
        "duration_s": duration,
        "rate_per_s": rate,
        "connections": connections,
        "sent": result.sent,
        "failed": result.failed,
        "failures": summary["failures"],
        "first_failures": result.first_failures,
        "statuses": summary["statuses"],
        "p50_ms": summary["p50_ms"],
        "p99_ms": summary["p99_ms"],
        "events": events,
        # at the start, when each reload was done (old ones may still drain), at the end
        "upstream_a_workers": workers,
        "upstream_a_workers_replaced": _replaced_twice(workers),
        "upstream_b_workers_left": b_workers_left,
        "timeline": result.timeline,
    }


def _replaced_twice(snapshots: list[list[int]]) -> bool:
    """Two reloads each replaced both workers: every worker at the end is new to both earlier sets."""
    start, first_reload, _, end = (set(pids) for pids in snapshots)
    started_by_first = first_reload - start
    return len(started_by_first) == 2 and len(end) == 2 and not end & (start | started_by_first)


# -- (c) SIGTERM with requests in flight ------------------------------------------------------------------


def sigterm(requests: int = 32, slow_ms: int = 1500, grace: float = 5.0) -> dict[str, Any]:
    """``requests`` slow requests in flight on two workers, then SIGTERM to the parent."""
    with AiorestProcess(APP, "--workers", "2", "--graceful-timeout", str(grace), ready_path="/json") as server:
        result = sigterm_in_flight(server, f"/slow?ms={slow_ms}", count=requests, wait=0.5)
    return {**result.summary(), "slow_ms": slow_ms, "grace_s": grace}


# -- (e) the example app with 4 workers against max_connections = 100 -----------------------------------------


def pool(dsn: str, seconds: int = 10) -> dict[str, Any]:
    """``wrk -t2 -c512 -d10s /queries?queries=5`` on 4 workers; another client connects meanwhile."""
    import psycopg2

    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute("SHOW max_connections")
        row = cur.fetchone()
        assert row is not None
        max_connections = int(row[0])
    conn.close()
    env = {**os.environ, "DATABASE_URL": dsn}
    with AiorestProcess("example_app.app:app", "--workers", "4", env=env, ready_path="/json") as app:
        wrk = subprocess.Popen(
            [require_wrk(), "-t2", "-c512", f"-d{seconds}s", "--timeout=10s", "--latency",
             f"http://127.0.0.1:{app.port}/queries?queries=5"],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        time.sleep(seconds / 2)
        try:  # another client of the same PostgreSQL, in the middle of the load
            other = psycopg2.connect(dsn, connect_timeout=5)
            other.close()
            other_client = "connected"
        except psycopg2.OperationalError as exc:
            other_client = str(exc).strip().splitlines()[0]
        output, _ = wrk.communicate(timeout=seconds + 60)
        log = app.log()
    measured = parse(output)
    return {
        "max_connections": max_connections,
        "workers": 4,
        "requests": measured.requests,
        "requests_per_s": round(measured.requests_per_sec),
        "errors": measured.errors,
        "non_2xx": measured.non_2xx,
        "socket_errors": measured.errors - measured.non_2xx,
        "p99_ms": measured.p99_ms,
        "other_client": other_client,
        "pool_lines": [line for line in log.splitlines() if "pool" in line.lower()][:5],
    }


# -- (f) the access log's and the metrics' cost on /json ---------------------------------------------------------


COST_VARIANTS: dict[str, list[str]] = {
    "off": [],
    "access log": ["--access-log", "{log}"],
    "metrics": ["--metrics"],
    "both": ["--access-log", "{log}", "--metrics"],
}


def _children(pid: int) -> list[int]:
    return sorted(children_of(pid))


def _cpu_seconds(pid: int) -> float:
    total = 0.0
    for process in [pid, *_children(pid)]:
        try:
            fields = Path(f"/proc/{process}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def costs(rounds: int = 6, seconds: int = 4, connections: int = 32) -> dict[str, Any]:
    """Interleaved wrk rounds on /json against one aiorest process per variant, pinned to CPU 0 (wrk: CPU 1)."""
    scratch = Path(tempfile.mkdtemp(prefix="aiorest-costs-"))
    servers: dict[str, AiorestProcess] = {}
    rates: dict[str, list[float]] = {name: [] for name in COST_VARIANTS}
    cpu_per_request: dict[str, list[float]] = {name: [] for name in COST_VARIANTS}
    try:
        for index, (name, args) in enumerate(COST_VARIANTS.items()):
            options = [arg.replace("{log}", str(scratch / f"access-{index}.log")) for arg in args]
            servers[name] = AiorestProcess(APP, *options, ready_path="/json", log_path=scratch / f"{index}.log")
            servers[name].start()
            os.sched_setaffinity(servers[name].pid, {0})
        for server in servers.values():  # warm up
            _wrk(server.port, 1, connections)
        for round_number in range(rounds):
            order = list(servers) if round_number % 2 == 0 else list(reversed(servers))
            for name in order:
                pid = servers[name].pid
                before = _cpu_seconds(pid)
                measured = _wrk(servers[name].port, seconds, connections)
                rates[name].append(measured.requests_per_sec)
                cpu_per_request[name].append((_cpu_seconds(pid) - before) / max(1, measured.requests) * 1e6)
            say(f"  costs round {round_number + 1}/{rounds}: " + ", ".join(f"{n} {rates[n][-1]:.0f}/s" for n in rates))
        access_lines = sum(1 for index in (1, 3) for _ in (scratch / f"access-{index}.log").open(errors="replace"))
    finally:
        for server in servers.values():
            server.stop()
    result: dict[str, Any] = {"rounds": rounds, "seconds": seconds, "connections": connections}
    for name in COST_VARIANTS:
        rate = summarise(rates[name])
        ratio = paired_ratio(rates[name], rates["off"])
        result[name] = {
            "requests_per_s": round(rate.mean),
            "ci95": [round(rate.ci_low), round(rate.ci_high)],
            "ratio_to_off": round(ratio.mean, 3),
            "ratio_ci95": [round(ratio.ci_low, 3), round(ratio.ci_high, 3)],
            "cpu_us_per_request": round(summarise(cpu_per_request[name]).mean, 1),
        }
    result["access_log_lines_written"] = access_lines
    result["_summaries"] = {name: summarise(values) for name, values in rates.items()}
    return result


def _wrk(port: int | None, seconds: int, connections: int) -> Any:
    command = ["taskset", "-c", "1", require_wrk(), "-t1", f"-c{connections}", f"-d{seconds}s", "--latency",
               f"http://127.0.0.1:{port}/json"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 60, check=True)
    measured = parse(done.stdout)
    if measured.errors:
        raise RuntimeError(f"wrk saw errors:\n{done.stdout}")
    return measured


# -- the whole bar -------------------------------------------------------------------------------------------


def _plots(results: dict[str, Any], stem: Path) -> list[str]:
    written: list[str] = []
    if "failover" in results:
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            return written
        failover_result = results["failover"]
        seconds = list(range(len(failover_result["timeline"])))
        fig, ax = plt.subplots(figsize=(8, 4))
        ax.plot(seconds, [sent for sent, _ in failover_result["timeline"]], label="requests sent")
        ax.bar(seconds, [failed for _, failed in failover_result["timeline"]], color="red", label="failed")
        for event in failover_result["events"]:
            done = event["event"].endswith("reloaded")  # a dotted line just after its SIGHUP's, unlabelled
            ax.axvline(event["at_s"], color="gray", linestyle=":" if done else "--")
            if not done:
                middle = ax.get_ylim()[1] * 0.5
                ax.text(event["at_s"], middle, " " + event["event"], rotation=90, va="center", fontsize=8)
        ax.set_xlabel("second of the run")
        ax.set_ylabel("requests a second")
        ax.set_title(f"nginx → 2 aiorest upstreams × 2 workers: {failover_result['failed']} failed requests")
        ax.legend(loc="lower left")
        fig.tight_layout()
        fig.savefig(f"{stem}-failover.png", dpi=110)
        plt.close(fig)
        written.append(f"{stem}-failover.png")
    if "costs" in results:
        summaries: dict[str, Summary] = results["costs"].pop("_summaries")
        path = Path(f"{stem}-costs.png")
        title = "/json, one process: requests/s (95% CI)"
        if bar_chart(path, title, list(summaries), {"aiorest": list(summaries.values())}, "requests/s"):
            written.append(str(path))
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m load production",
        description=__doc__.split("\n\n")[0],
        epilog="One part with options of its own: python -m load production admission|pooler|restarts --help.",
    )
    parser.add_argument(
        "--only", default=",".join(PARTS), help=f"parts to run, comma-separated (default {','.join(PARTS)})"
    )
    parser.add_argument("--duration", type=float, default=30.0, help="failover: seconds of steady load (default 30)")
    parser.add_argument("--rate", type=float, default=400.0, help="failover: requests a second (default 400)")
    parser.add_argument("--dsn", default=os.environ.get("DATABASE_URL"), help="pool, pooler: a PostgreSQL URL")
    args = parser.parse_args(argv)
    parts = [part.strip() for part in args.only.split(",") if part.strip()]
    unknown = set(parts) - set(PARTS)
    if unknown:
        parser.error(f"unknown parts {sorted(unknown)}; choose from {PARTS}")
    results: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%S"), "host": _host()}
    for part in parts:
        say(f"== {part}")
        if part == "failover":
            results[part] = failover(args.duration, args.rate)
        elif part == "sigterm":
            results[part] = sigterm()
        elif part == "admission":
            from load.production.admission import measure

            results[part] = measure()
        elif part == "pool":
            results[part] = pool(_database(args.dsn))
        elif part == "costs":
            results[part] = costs()
        elif part == "pooler":
            from load.production.pooler import measure as measure_pooler

            results[part] = measure_pooler(duration=5, rounds=3, dsn=args.dsn)
    RESULTS.mkdir(parents=True, exist_ok=True)
    stem = RESULTS / time.strftime("%Y%m%d-%H%M%S")
    plots = _plots(results, stem)
    Path(f"{stem}.json").write_text(json.dumps(results, indent=2, default=str))
    verdicts = _verdicts(results)
    for line in verdicts:
        print(line)
    print(f"figures: {stem}.json" + "".join(f", {plot}" for plot in plots))
    return 1 if any(line.startswith("FAIL") for line in verdicts) else 0


def _host() -> dict[str, Any]:
    try:
        from bench.host import describe

        return describe()
    except Exception:  # noqa: BLE001  # the host record is a courtesy
        return {"cpus": os.cpu_count(), "load": os.getloadavg()}


def _database(dsn: str | None) -> str:
    """``dsn``, else a database ``aiorest_production`` on 127.0.0.1:5432, created and migrated."""
    import psycopg2

    if dsn is None:
        admin = psycopg2.connect("postgresql://postgres@127.0.0.1:5432/postgres")
        admin.autocommit = True
        with admin.cursor() as cur:
            cur.execute("SELECT 1 FROM pg_database WHERE datname = 'aiorest_production'")
            if cur.fetchone() is None:
                cur.execute("CREATE DATABASE aiorest_production")
        admin.close()
        dsn = "postgresql://postgres@127.0.0.1:5432/aiorest_production?sslmode=disable"
    try:
        migrate(dsn)
    except RuntimeError as exc:
        raise SystemExit(str(exc)) from None
    return dsn


def _verdicts(results: dict[str, Any]) -> list[str]:
    lines = []

    def verdict(ok: bool, text: str) -> None:
        lines.append(f"{'PASS' if ok else 'FAIL'}  {text}")

    if "failover" in results:
        f = results["failover"]
        verdict(
            f["failed"] == 0 and f["upstream_a_workers_replaced"],
            f"(a)+(b) {f['sent']} requests at {f['rate_per_s']:.0f}/s for {f['duration_s']:.0f} s through nginx, "
            f"two SIGHUPs to A (workers replaced: {f['upstream_a_workers_replaced']}) and SIGKILL of B's parent: "
            f"{f['failed']} failed {f['failures'] or ''}",
        )
    if "sigterm" in results:
        s = results["sigterm"]
        verdict(
            s["answered"] == s["sent"] and s["exit_code"] == 0 and s["exit_seconds"] <= s["grace_s"],
            f"(c) SIGTERM with {s['sent']} requests of {s['slow_ms']} ms in flight: {s['answered']} answered 200, "
            f"exit {s['exit_code']} after {s['exit_seconds']} s (grace {s['grace_s']} s)",
        )
    if "admission" in results:
        a = results["admission"]
        only = set(a["statuses"]) <= {"200", "503", 200, 503} and not any(a["errors"].values())
        verdict(
            only and a["503_without_retry_after"] == 0 and a["p99_ratio"] <= 2.0,
            f"(d) 10x overload: statuses {a['statuses']}, errors {a['errors']}, p99 of the 200s "
            f"{a['overloaded_p99_200_ms']} ms against {a['unloaded_p99_ms']} ms unloaded ({a['p99_ratio']}x)",
        )
    if "pool" in results:
        p = results["pool"]
        verdict(
            p["errors"] == 0 and p["other_client"] == "connected",
            f"(e) 4 workers, max_connections {p['max_connections']}, wrk -c512 /queries?queries=5: {p['requests']} "
            f"requests, {p['errors']} errors, another client: {p['other_client']}",
        )
    if "costs" in results:
        c = results["costs"]
        lines.append(
            "      (f) /json cost, ratio to both off (95% CI), server CPU per request: "
            + "; ".join(
                f"{name} {c[name]['ratio_to_off']} [{c[name]['ratio_ci95'][0]}, {c[name]['ratio_ci95'][1]}] "
                f"{c[name]['cpu_us_per_request']} µs"
                for name in COST_VARIANTS
            )
        )
    if "pooler" in results:
        p = results["pooler"]
        lines.append(
            f"      (f) /db through PgBouncer (transaction mode, not prepared) / direct prepared: "
            f"{p['pgbouncer_vs_direct']} ({p['pgbouncer_rps']:.0f} against {p['direct_prepared_rps']:.0f} requests/s); "
            f"direct not prepared / prepared: {p['unprepared_vs_prepared']}; errors {p['errors']}"
        )
    return lines

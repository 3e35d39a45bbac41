"""``python -m load cluster``: aiorest as a cluster of hosts on this machine, loaded, faulted, measured.

Builds hosts out of network namespaces (load/cluster/hosts.py: a balancer, app
hosts, PostgreSQL behind PgBouncer, Redis, two load hosts), runs the scenarios,
prints a PASS/FAIL/SKIP line with figures for each, writes everything under
``load/out/cluster/<time>/`` and tears every host down, also on Ctrl-C,
SIGTERM or an error (and removes what a crashed run left, first). Root only.

    python -m load cluster                                  # 3 app hosts, every scenario
    python -m load cluster --app-hosts 2 --duration 10      # a small run
    python -m load cluster --scenarios load,rolling --rounds 3

Scenarios: ``load`` (distributed locust with wrk beside it, ``--rounds`` rounds,
the compare tool's summary and plots), ``rolling``, ``kill``, ``cut``,
``pgbouncer``, ``redis`` (point 5 of issue 30), ``sessions`` (point 4: a login through
the balancer valid on every app host, a logout seen by all, with the sessions in
PostgreSQL and then in Redis; load/cluster/sessions.py) and ``costs`` (what the nginx and
PgBouncer hops, and the shared limiter's round trip, cost per request).
``--rate-limit-store redis|postgres`` gives the app hosts ``RATE_LIMIT_STORE``
(the shared login limiter, where the example app has it).
"""

from __future__ import annotations

import argparse
import http.client
import json
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

from harness.netns import unavailable_reason
from harness.processes import AiorestProcess
from load.cluster import faults
from load.cluster import sessions as cluster_sessions
from load.cluster.hosts import APP_PORT, Cluster, ClusterConfig, missing_tools
from load.cluster.locust_runs import LocustRun, run_wrk
from load.compare.plots import LOCUST_RESOLUTION_MS, latency

OUT = Path(__file__).resolve().parents[1] / "out" / "cluster"  # raw runs: git-ignored
SCENARIOS = ("load", "rolling", "kill", "cut", "pgbouncer", "redis", "sessions", "costs")


def say(text: str) -> None:
    print(f"[{datetime.now(UTC):%H:%M:%S}] {text}", file=sys.stderr, flush=True)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m load cluster", description=__doc__.splitlines()[0])
    parser.add_argument("--app-hosts", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2, help="aiorest workers per app host")
    parser.add_argument("--duration", type=float, default=30, help="seconds of load per scenario (default 30)")
    parser.add_argument("--users", type=int, default=40, help="locust users")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of the load scenario")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help=f"comma-separated: {', '.join(SCENARIOS)}")
    parser.add_argument("--rate-limit-store", choices=["none", "redis", "postgres"], default="none")
    parser.add_argument("--pool-per-host", type=int, default=16, help="DATABASE_POOL_TOTAL of each app host")
    parser.add_argument("--pgbouncer-pool", type=int, default=20, help="PgBouncer's server connections")
    parser.add_argument("--out", type=Path, default=OUT)
    return parser.parse_args(argv)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


# -- point 2: distributed load with wrk beside it ---------------------------------------------------


def load_scenario(cluster: Cluster, args: argparse.Namespace, out: Path) -> faults.Outcome:
    from load.compare import run as compare

    raw: list[dict[str, Any]] = []
    hosts: dict[str, list[float]] = {name: [] for name in cluster.app_names}
    wrk_rps: list[float] = []
    for number in range(args.rounds):
        say(f"load round {number + 1}/{args.rounds}: locust {args.users} users + wrk, {args.duration:.0f} s")
        before = {name: cluster.metrics(name)["requests"] for name in cluster.app_names}
        run = LocustRun(
            cluster, users=args.users, seconds=int(args.duration), folder=out / f"round{number + 1}"
        ).start()
        run.wait_for_traffic()
        wrk: dict[str, Any] = {}

        def beside(into: dict[str, Any] = wrk) -> None:
            try:
                into["result"] = run_wrk(cluster, "load2", "/json", max(1, int(args.duration) - 5), 16)
            except (RuntimeError, subprocess.TimeoutExpired) as exc:  # stopped with the hosts, or hung
                say(f"  wrk: {exc}")

        thread = threading.Thread(target=beside)
        thread.start()
        thread.join(args.duration + 40)
        run.wait()
        result = run.result()
        rows = [row for row in run.rows() if row["name"] not in ("setup", "seed", "cleanup")]
        after = {name: cluster.metrics(name)["requests"] for name in cluster.app_names}
        for name in cluster.app_names:
            hosts[name].append(after[name] - before[name])
        if "result" in wrk:
            wrk_rps.append(wrk["result"].requests_per_sec)
        if result is None:
            raw.append({"round": number, "target": "cluster", "level": args.users, "lost": run.log()[-500:]})
            continue
        entry = {"round": number, "target": "cluster", "level": args.users, **result.as_dict(), "loop_lag": None}
        for endpoint, figures in entry["per_endpoint"].items():
            mine = [row for row in rows if f"{row['method']} {row['name']}" == endpoint and row["failed"]]
            figures["timeouts"] = sum("timed out" in row["error"].lower() for row in mine)
            figures["socket_errors"] = sum(row["status"] == 0 for row in mine) - figures["timeouts"]
            figures["non_2xx"] = sum(row["status"] >= 300 for row in mine)
        raw.append(entry)
        p99 = latency(result.p99_ms, LOCUST_RESOLUTION_MS)
        say(f"  {result.requests_per_sec:,.0f} req/s, {result.failures} failed, p99 {p99}; "
            f"wrk /json {wrk_rps[-1] if wrk_rps else float('nan'):,.0f} req/s")  # fmt: skip
    (out / "load_raw.json").write_text(json.dumps(raw, indent=1))
    summary = compare.summarise_runs(raw, ["cluster"], [args.users])
    table = compare.markdown(summary, "python -m load cluster --scenarios load", "locust")
    per_host = ", ".join(f"{name} {statistics.mean(v):,.0f}" for name, v in hosts.items() if v)
    table += f"\n\nRequests per app host per round (from each host's /metrics): {per_host}\n"
    table += f"wrk /json beside locust: {', '.join(f'{r:,.0f}' for r in wrk_rps)} req/s\n"
    (out / "load_summary.md").write_text(table)
    compare.plot(summary, out, "locust")
    cell = summary["cells"][str(args.users)].get("cluster")
    if cell is None:
        return faults.Outcome("2 distributed load", "FAIL", "no round measured", {"raw": raw})
    spread = all(all(count > 0 for count in v) for v in hosts.values())
    verdict = "PASS" if cell["failures"] == 0 and spread else "FAIL"
    rps = cell["rps"]
    reason = (
        f"{rps['mean']:,.0f} req/s (95% CI {rps['ci_low']:,.0f}-{rps['ci_high']:,.0f}, {args.rounds} rounds), "
        f"p50 {latency(cell['p50_ms'], LOCUST_RESOLUTION_MS)}, p99 {latency(cell['p99_ms'], LOCUST_RESOLUTION_MS)}, "
        f"{cell['failures']} failed; per host {per_host}"
    )
    return faults.Outcome("2 distributed load (locust master+2 workers, wrk)", verdict, reason,
                          {"summary": summary, "per_host": hosts, "wrk_rps": wrk_rps})  # fmt: skip


# -- point 6: what a cluster costs per request ------------------------------------------------------


def _timed(
    host: str,
    port: int,
    method: str,
    path: str,
    count: int,
    body: dict[str, str] | None = None,
    ok: Callable[[int], bool] = lambda status: status < 400,
) -> list[float]:
    """Milliseconds of each of ``count`` sequential requests on one kept-alive connection (each status ``ok``)."""
    connection = http.client.HTTPConnection(host, port, timeout=10)
    payload = json.dumps(body).encode() if body else None
    headers = {"Content-Type": "application/json"} if body else {}
    times = []
    try:
        for _ in range(count):
            began = time.perf_counter()
            connection.request(method, path, body=payload, headers=headers)
            response = connection.getresponse()
            response.read()
            times.append((time.perf_counter() - began) * 1000)
            if not ok(response.status):
                raise RuntimeError(f"{method} {path} at {host}:{port} answered {response.status}")
    finally:
        connection.close()
    return times


def costs(cluster: Cluster, rounds: int = 5) -> faults.Outcome:
    """Per-request time through the balancer vs one host, through PgBouncer vs straight to PostgreSQL.

    ``rounds`` rounds, the contenders' order rotating; each figure is the median of all its requests.
    """
    host = cluster.app_names[0]
    direct: list[AiorestProcess] = []
    for port, extra in ((APP_PORT + 1, {}), (APP_PORT + 2, {"DATABASE_PREPARE": "0"})):
        env = {**cluster.app_env(), "DATABASE_URL": cluster.direct_dsn, "DATABASE_POOL_MAX": "8", **extra}
        env.pop("DATABASE_POOLER")
        env.pop("DATABASE_POOL_TOTAL")
        process = AiorestProcess("example_app.app:app", port=port, host=cluster.address(host),
                                 prefix=cluster.net.command(host, []), env=env, ready_path="/json",
                                 log_path=cluster.logs / f"direct-{port}.log")  # fmt: skip
        cluster.net.processes.append(process.launch())
        direct.append(process)
    shared = bool(faults.shared_limiter_supported() and cluster.config.rate_limit_store)
    if shared:  # the same app with its limits in memory, to time the shared store's round trip against
        env = cluster.app_env()
        env.pop("RATE_LIMIT_STORE")
        process = AiorestProcess("example_app.app:app", port=APP_PORT + 3, host=cluster.address(host),
                                 prefix=cluster.net.command(host, []), env=env, ready_path="/json",
                                 log_path=cluster.logs / f"memory-limits-{APP_PORT + 3}.log")  # fmt: skip
        cluster.net.processes.append(process.launch())
        direct.append(process)
    for process in direct:
        process.wait_serving(60)
    account = {"username": f"cluster-cost-{uuid.uuid4().hex[:8]}", "password": uuid.uuid4().hex}
    _timed(cluster.address("lb"), 80, "POST", "/users", 1, account)
    lb, app = (cluster.address("lb"), 80), (cluster.address(host), APP_PORT)
    contenders = {
        "/json one host": (*app, "GET", "/json", 2000, None),
        "/json via nginx": (*lb, "GET", "/json", 2000, None),
        "/db one host, PostgreSQL direct (prepared)": (cluster.address(host), APP_PORT + 1, "GET", "/db", 1000, None),
        "/db one host, PostgreSQL direct (not prepared)": (
            cluster.address(host),
            APP_PORT + 2,
            "GET",
            "/db",
            1000,
            None,
        ),  # fmt: skip
        "/db one host, via PgBouncer": (*app, "GET", "/db", 1000, None),
        "/db via nginx and PgBouncer": (*lb, "GET", "/db", 1000, None),
        # 2 a round: 20 logins from the harness's address in all, within a shared per-address limit
        "login one host": (*app, "POST", "/login", 2, account),
        "login via nginx": (*lb, "POST", "/login", 2, account),
    }
    found: dict[str, list[float]] = {name: [] for name in contenders}
    try:
        for number in range(rounds):
            say(f"costs round {number + 1}/{rounds}")
            names = list(contenders)
            for name in names[number % len(names) :] + names[: number % len(names)]:
                address, port, method, path, count, body = contenders[name]
                found[name] += _timed(address, port, method, path, count, body)
        if shared:  # last: it leaves the harness's address over its login limit for a minute
            found.update(_refused_logins(cluster, host))
    finally:
        for process in direct:
            process.kill()
    ms = {name: statistics.median(values) for name, values in found.items()}
    ratios = {
        "nginx hop on /json": ms["/json via nginx"] / ms["/json one host"],
        "nginx hop on /db": ms["/db via nginx and PgBouncer"] / ms["/db one host, via PgBouncer"],
        "PgBouncer hop on /db (both unprepared)": ms["/db one host, via PgBouncer"]
        / ms["/db one host, PostgreSQL direct (not prepared)"],
        "PgBouncer on /db vs direct prepared": ms["/db one host, via PgBouncer"]
        / ms["/db one host, PostgreSQL direct (prepared)"],
        "cluster /db vs one host direct prepared": ms["/db via nginx and PgBouncer"]
        / ms["/db one host, PostgreSQL direct (prepared)"],
        "nginx hop on a login": ms["login via nginx"] / ms["login one host"],
    }
    text = "; ".join(f"{name} {value:.2f}x" for name, value in ratios.items())
    limiter = "shared limiter round trip: not measured (no RATE_LIMIT_STORE in the example app)"
    if shared:
        store, memory = ms["refused login (429), shared store"], ms["refused login (429), limits in memory"]
        ratios["shared limiter on a refused login"] = store / memory
        limiter = (
            f"shared limiter ({cluster.config.rate_limit_store}) on a refused login (429, no hash): "
            f"{store:.2f} ms against {memory:.2f} ms in memory, {store / memory:.2f}x, {store - memory:+.2f} ms"
        )
    added = {
        "nginx on /json": ms["/json via nginx"] - ms["/json one host"],
        "nginx on /db": ms["/db via nginx and PgBouncer"] - ms["/db one host, via PgBouncer"],
        "PgBouncer on /db": ms["/db one host, via PgBouncer"] - ms["/db one host, PostgreSQL direct (not prepared)"],
    }
    text += "; added ms: " + ", ".join(f"{name} {value:+.2f}" for name, value in added.items())
    return faults.Outcome("6 per-request costs, cluster vs one host", "PASS", f"{text}; {limiter}",
                          {"median_ms": ms, "ratios": ratios, "added_ms": added, "rounds": rounds})  # fmt: skip


def _refused_logins(cluster: Cluster, host: str, count: int = 200) -> dict[str, list[float]]:
    """Milliseconds of logins refused by the limit (429: a check, no hash), shared store vs memory, on ``host``.

    An account gets 5 wrong passwords on each server, then ``count`` more, each answered 429.
    """
    found = {}
    for name, port in (("shared store", APP_PORT), ("limits in memory", APP_PORT + 3)):
        account = {"username": f"cluster-refused-{uuid.uuid4().hex[:8]}", "password": uuid.uuid4().hex}
        _timed(cluster.address("lb"), 80, "POST", "/users", 1, account)
        wrong = {**account, "password": "wrong-password"}
        address = cluster.address(host)
        _timed(address, port, "POST", "/login", 5, wrong, ok=lambda status: status in (401, 429))
        samples = _timed(address, port, "POST", "/login", count, wrong, ok=lambda status: status == 429)
        found[f"refused login (429), {name}"] = samples
    return found


# -- the run ------------------------------------------------------------------------------------------


def harness_login(cluster: Cluster) -> Any:
    account = {"username": f"cluster-redis-{uuid.uuid4().hex[:8]}", "password": uuid.uuid4().hex}
    _timed(cluster.address("lb"), 80, "POST", "/users", 1, account)

    def login() -> int:
        connection = http.client.HTTPConnection(cluster.address("lb"), 80, timeout=10)
        try:
            connection.request("POST", "/login", body=json.dumps(account), headers={"Content-Type": "application/json"})
            status = connection.getresponse().status
        except OSError:
            status = 0
        finally:
            connection.close()
        time.sleep(0.5)
        return status

    return login


def plot_timeline(outcome: faults.Outcome, path: Path) -> bool:
    if not outcome.timeline:
        return False
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    seconds = [t[0] for t in outcome.timeline]
    figure, (top, bottom) = plt.subplots(2, 1, figsize=(8, 5), sharex=True)
    top.plot(seconds, [t[1] for t in outcome.timeline], label="requests/s")
    top.plot(seconds, [t[2] for t in outcome.timeline], label="failed/s", color="red")
    top.legend()
    top.set_title(outcome.name)
    bottom.plot(seconds, [t[3] for t in outcome.timeline], color="purple")
    window = outcome.figures.get("fault_window_s")
    if window:
        for axes in (top, bottom):
            axes.axvspan(window[0], max(window[1], window[0] + 0.5), color="orange", alpha=0.3, label="fault")
        top.legend()
    bottom.set_ylabel("p99 ms")
    bottom.set_xlabel("second of the run")
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return True


def _each_outcome(
    chosen: list[str], steps: dict[str, Callable[[], faults.Outcome]], cluster: Cluster, began: float
) -> Iterator[tuple[str, faults.Outcome]]:
    """Each scenario's outcome as it comes; ``sessions`` gives one a session store."""
    for name in chosen:
        say(f"scenario {name} ({time.monotonic() - began:.0f} s in)")
        if name == "sessions":
            for store in cluster_sessions.STORES:
                yield f"sessions_{store}", cluster_sessions.sessions_across_hosts(cluster, store)
            cluster_sessions.use_session_store(cluster, "postgres")
        else:
            yield name, steps[name]()


def run(args: argparse.Namespace) -> int:
    chosen = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    unknown = set(chosen) - set(SCENARIOS)
    if unknown:
        raise SystemExit(f"unknown scenario(s) {sorted(unknown)}; choose from {', '.join(SCENARIOS)}")
    reason = unavailable_reason()
    missing = missing_tools()
    if reason or missing:
        print(f"SKIP cluster: {reason or 'missing ' + ', '.join(missing)}")
        return 2
    out = args.out / f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}"
    out.mkdir(parents=True)
    store = None if args.rate_limit_store == "none" else args.rate_limit_store
    config = ClusterConfig(app_hosts=args.app_hosts, workers=args.workers, rate_limit_store=store,
                           pool_per_host=args.pool_per_host, pgbouncer_pool=args.pgbouncer_pool)  # fmt: skip
    outcomes: list[faults.Outcome] = []
    status = 0
    began = time.monotonic()
    try:
        with Cluster(config, logs=out / "logs", progress=say) as cluster:
            say(f"connection budget: {config.budget()}")
            steps = {
                "load": lambda: load_scenario(cluster, args, out),
                "rolling": lambda: faults.rolling_deploy(cluster, args.users, args.duration, out / "rolling"),
                "kill": lambda: faults.kill_host(cluster, args.users, args.duration, out / "kill"),
                "cut": lambda: faults.cut_host(cluster, args.users, args.duration, out / "cut"),
                "pgbouncer": lambda: faults.restart_pgbouncer(cluster, args.users, args.duration, out / "pgbouncer"),
                "redis": lambda: faults.restart_redis(
                    cluster, args.users, args.duration, out / "redis", harness_login(cluster)
                ),  # fmt: skip
                "costs": lambda: costs(cluster),
            }
            for name, outcome in _each_outcome(chosen, steps, cluster, began):
                outcomes.append(outcome)
                print(f"{outcome.verdict} {outcome.name}: {outcome.reason}", flush=True)
                for window in ("before", "during", "after"):
                    figures = outcome.figures.get(window)
                    if figures:
                        print(f"     {window:6s} {figures['requests']:6d} requests, {figures['failed']} failed "
                              f"{figures['by_kind'] or ''}, p50 {latency(figures['p50_ms'])}, "
                              f"p99 {latency(figures['p99_ms'])}; {figures['retries']} sent again "
                              f"{figures['retries_by_request'] or ''}", flush=True)  # fmt: skip
                if plot_timeline(outcome, out / f"timeline_{name}.png"):
                    say(f"  plot: {out / f'timeline_{name}.png'}")
    except KeyboardInterrupt as exc:
        say(f"interrupted ({exc or 'Ctrl-C'}): the hosts are torn down, what was measured is written")
        status = 130
    finally:
        (out / "summary.json").write_text(json.dumps([o.__dict__ for o in outcomes], indent=1, default=str))
        lines = [f"| {o.verdict} | {o.name} | {o.reason} |" for o in outcomes]
        (out / "summary.md").write_text("| verdict | scenario | figures |\n|---|---|---|\n" + "\n".join(lines) + "\n")
    counts = Counter(o.verdict for o in outcomes)
    say(f"done in {time.monotonic() - began:.0f} s: {dict(counts)}; results in {out}")
    return status or (1 if counts.get("FAIL") else 0)


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _interrupt)
    return run(parse_args(sys.argv[1:] if argv is None else argv))

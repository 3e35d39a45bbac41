"""``python -m load live``: N WebSockets and, separately, N event streams held open on one process.

    python -m load live [--connections 10000] [--duration 10] [--rounds 5]
                        [--contenders aiorest,aiohttp,starlette,socketify] [--kinds ws,sse] [--smoke]

For each contender and kind, a fresh server (one process, pinned to CPU 0) and one client process
(pinned to CPU 1, load/live/client.py) that opens ``--connections`` of them. Measured:

- memory per idle connection: the server's RSS with them open less its RSS before, over their count;
- a broadcast (``POST /broadcast``) to all of them, ``--rounds`` times: each client's receive time less
  the payload's timestamp (same host, wall clock), pooled → p50/p99/max; and the server's loop lag
  during it, from a heartbeat coroutine that sleeps 10 ms and records how late it wakes;
- WebSockets only: echo messages/s over 64 new connections for ``--duration`` seconds.

The servers are in load/live/apps/ (the same four endpoints each; apps/heartbeat.py). socketify.py
runs only when it is installed (``pip install socketify``); without it, it is left out with a message.
Results: load/out/<time>-live/ (summary.json, summary.md, PNGs); progress lines on stderr.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import resource
import subprocess
import sys
import time
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any

from harness.processes import ServerError, ServerProcess, stop_process
from load.live.apps.heartbeat import INTERVAL, percentiles
from load.live.report import write_outputs

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
CONTENDERS: dict[str, list[str]] = {
    "aiorest": [
        *(PY, "-m", "aiorest", "run", "load.live.apps.aiorest_app:app", "--port", "{port}", "--log-level", "warning"),
        *("--max-connections", "30000", "--max-websockets", "30000", "--backlog", "4096"),
    ],
    "aiohttp": [PY, "-m", "load.live.apps.aiohttp_app", "--port", "{port}"],
    "starlette": [PY, "-m", "load.live.apps.starlette_app", "--port", "{port}"],
    "socketify": [PY, "-m", "load.live.apps.socketify_app", "--port", "{port}"],
}
NEEDS = {"aiorest": "aiorest", "aiohttp": "aiohttp", "starlette": "uvicorn", "socketify": "socketify"}
COLLECT_TIMEOUT = 30.0  # seconds a broadcast may take to reach every client


def progress(message: str) -> None:
    print(f"live: {message}", file=sys.stderr, flush=True)


def rss_of(pid: int) -> int:
    """A process's resident set size in bytes, read from /proc (the server's own figure is in /stats too)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def http(url: str, method: str = "GET") -> dict[str, Any]:
    data = b"" if method == "POST" else None
    with urllib.request.urlopen(urllib.request.Request(url, data=data, method=method), timeout=60) as response:
        return dict(json.loads(response.read()))


class Client:
    """The client process: a command line in, one JSON line out (load/live/client.py)."""

    def __init__(self, kind: str, port: int, connections: int, env: dict[str, str]) -> None:
        command = [PY, "-m", "load.live.client", kind, str(port), str(connections)]
        if os.path.exists("/usr/bin/taskset"):
            command = ["taskset", "-c", "1", *command]
        self.process = subprocess.Popen(
            command, cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )

    def ask(self, command: str | None = None) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        if command is not None:
            self.process.stdin.write(command + "\n")
            self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the client exited ({self.process.wait()}) before answering {command!r}")
        return dict(json.loads(line))

    def stop(self) -> None:
        if self.process.poll() is None:
            try:
                self.ask("quit")
            except (OSError, RuntimeError):
                pass
        stop_process(self.process, 10)


def wait_registered(url: str, kind: str, count: int, timeout: float = 60.0) -> int:
    """Until the server counts ``count`` clients of ``kind`` (or ``timeout``); the count it reached."""
    deadline = time.monotonic() + timeout
    while (registered := int(http(f"{url}/stats")[kind])) < count and time.monotonic() < deadline:
        time.sleep(0.2)
    return registered


def measure(name: str, kind: str, connections: int, rounds: int, duration: float) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    server = ServerProcess(f"{name}-{kind}", CONTENDERS[name], env, cpu=0)
    client: Client | None = None
    try:
        server.wait_ready("/stats")
        for _ in range(3):
            http(f"{server.url}/stats")
        time.sleep(0.5)
        before = rss_of(server.process.pid)
        started = time.monotonic()
        client = Client(kind, server.port, connections, env)
        opened = client.ask()
        registered = wait_registered(server.url, kind, opened["opened"])
        seconds_to_open = time.monotonic() - started
        time.sleep(1.0)
        held = rss_of(server.process.pid)
        per_connection = (held - before) / max(1, registered)
        progress(
            f"{name} {kind}: {registered} of {connections} open in {seconds_to_open:.1f} s, "
            f"{per_connection / 1024:.1f} KiB each (RSS {before / 2**20:.0f} → {held / 2**20:.0f} MiB)"
        )
        latencies: list[float] = []
        lags: list[float] = []
        received: list[int] = []
        for round_ in range(rounds):
            client.ask("expect")
            http(f"{server.url}/broadcast", "POST")
            got = client.ask(f"collect {COLLECT_TIMEOUT}")
            # The heartbeat asleep during the broadcast must wake before it is asked: its lateness then
            # is the broadcast's lag (a broadcast shorter than its sleep left no sample, at random).
            time.sleep(3 * INTERVAL)
            stats = http(f"{server.url}/stats")
            latencies += [us / 1000 for us in got["latencies_us"]]
            lags += stats["lag_ms"]["values"]
            received.append(len(got["latencies_us"]))
            progress(
                f"{name} {kind}: broadcast {round_ + 1}/{rounds} reached {received[-1]} of {got['alive']}, "
                f"p99 {percentiles([us / 1000 for us in got['latencies_us']])['p99'] or math.nan:.1f} ms, "
                f"loop lag max {stats['lag_ms']['max'] or math.nan:.1f} ms"
            )
            time.sleep(0.3)
        result: dict[str, Any] = {
            "contender": name,
            "kind": kind,
            "connections": connections,
            "opened": registered,
            "seconds_to_open": seconds_to_open,
            "rss_before": before,
            "rss_held": held,
            "rss_after": rss_of(server.process.pid),
            "bytes_per_connection": per_connection,
            "rounds": rounds,
            "received": received,
            "broadcast_ms": percentiles(latencies),
            "lag_ms": percentiles(lags),
        }
        if kind == "ws":
            result["echo"] = client.ask(f"echo {duration} 64")
            progress(f"{name} ws: echo {result['echo']['per_s']:.0f} messages/s over 64 connections")
        return result
    finally:
        if client is not None:
            client.stop()
        server.stop()


def available(names: list[str]) -> tuple[list[str], dict[str, str]]:
    """The contenders that can run here, and why each other one cannot."""
    missing = {n: f"{NEEDS[n]} is not installed" for n in names if importlib.util.find_spec(NEEDS[n]) is None}
    return [n for n in names if n not in missing], missing


def raise_nofile() -> int:
    """The soft limit of open files raised to the hard one: the servers and the client inherit it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        return hard
    return soft if hard != resource.RLIM_INFINITY else hard


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m load live", description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=10_000, help="connections held open (default 10000)")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of echo (default 10)")
    parser.add_argument("--rounds", type=int, default=5, help="broadcasts per contender and kind (default 5)")
    parser.add_argument("--contenders", default=",".join(CONTENDERS), help="comma-separated (default: all four)")
    parser.add_argument("--kinds", default="ws,sse", help="ws, sse or both (default ws,sse)")
    parser.add_argument("--smoke", action="store_true", help="a quick look: 200 connections, 1 s, 2 rounds")
    parser.add_argument("--out", type=Path, help="output folder (default load/out/<time>-live/)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.connections, args.duration, args.rounds = 200, 1.0, 2
    args.contenders = [c for c in args.contenders.split(",") if c]
    args.kinds = [k for k in args.kinds.split(",") if k]
    unknown = [c for c in args.contenders if c not in CONTENDERS] + [k for k in args.kinds if k not in ("ws", "sse")]
    if unknown:
        parser.error(f"unknown contender or kind: {', '.join(unknown)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    limit = raise_nofile()
    if limit < args.connections + 512:
        progress(f"open files are limited to {limit}: {args.connections} connections may not all open")
    names, skipped = available(args.contenders)
    for name, why in skipped.items():
        progress(f"{name} left out: {why}")
    results: list[dict[str, Any]] = []
    failures: dict[str, str] = dict(skipped)
    for name in names:
        for kind in args.kinds:
            try:
                results.append(measure(name, kind, args.connections, args.rounds, args.duration))
            except (ServerError, RuntimeError, OSError) as error:
                failures[f"{name} {kind}"] = str(error).splitlines()[0]
                progress(f"{name} {kind} failed: {failures[f'{name} {kind}']}")
    out = args.out or ROOT / "load" / "out" / f"{datetime.now():%Y%m%d-%H%M%S}-live"
    table = write_outputs(out, results, failures, vars(args) | {"nofile": limit})
    print(table)
    print(f"\nwritten: {out}")
    return 0 if results else 1

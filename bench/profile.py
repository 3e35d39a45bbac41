"""Where a server's CPU goes under load: py-spy samples, grouped by who spends them.

    python bench/profile.py db --endpoint /db --connections 256 --dsn postgresql://...
    python bench/profile.py core --endpoint /json --contender aiohttp

Starts one contender of a bench suite pinned to CPU 0 (PostgreSQL pinned to
CPU 1 for the db suite, as in ``bench/run.py``), drives it with wrk from CPU 1,
and samples it with ``py-spy record --nonblocking`` meanwhile. Each sample is
charged to the innermost Python frame that belongs to a known group (aiorest,
the example app, aiopg, aiohttp, the JSON codec, the event loop); time in C
code — psycopg2, libpq, httptools, the kernel's socket calls — counts for the
Python frame that called it, and uvloop's own polling and dispatch for the
frame that started the loop. The table shows each group's share of the samples
and, with the server's measured CPU time per request, its microseconds per
request. ``--native`` adds C frames, but py-spy must then stop the process for
each sample, and the stops land in system calls: ``read()`` then shows as most
of the time. Needs py-spy (``pip install -e ".[dev]"``) and ptrace rights
(root, or ``kernel.yama.ptrace_scope=0``).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.run import SUITES, cpu_seconds, suite_environment  # noqa: E402
from bench.wrk import WrkResult, require_wrk, run_wrk  # noqa: E402
from harness.postgres import postgres_pinned  # noqa: E402
from harness.processes import ServerProcess  # noqa: E402

# (group, pattern on a py-spy frame "function (file:line)"), first match wins, innermost frame first.
GROUPS: list[tuple[str, re.Pattern[str]]] = [
    # Without --native, time in uvloop's C code (polling, socket reads, callback
    # dispatch) has no Python frame of its own: it lands on the frame that
    # started the loop.
    ("event loop (uvloop/asyncio)", re.compile(r"^(Runner\.run|run_app|run_until_complete|run_forever) \(")),
    ("kernel: socket send/recv", re.compile(r"\b(__libc_)?(send\w*|write\w*|recv\w*|read)\b \(libc")),
    ("kernel: epoll", re.compile(r"epoll_wait|epoll_ctl")),
    ("libpq", re.compile(r"libpq")),
    ("psycopg2", re.compile(r"psycopg2|_psycopg")),
    ("aiopg", re.compile(r"aiopg/")),
    ("httptools (llhttp)", re.compile(r"httptools")),
    ("JSON codec", re.compile(r"ujson|orjson")),
    ("aiorest", re.compile(r"aiorest/")),
    ("example_app", re.compile(r"example_app/|bench/servers/")),
    ("aiohttp", re.compile(r"aiohttp/|yarl|multidict")),
    ("event loop (uvloop/asyncio)", re.compile(r"uvloop|asyncio/|_asyncio|libuv")),
]
INTERPRETER = "interpreter and other"


def group_of(stack: list[str]) -> str:
    for frame in reversed(stack):  # innermost first
        for name, pattern in GROUPS:
            if pattern.search(frame):
                return name
    return INTERPRETER


def summarise(raw: str) -> tuple[Counter[str], Counter[str], int]:
    """py-spy's raw (collapsed) output → samples per group, per leaf frame, and in all."""
    groups: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    total = 0
    for line in raw.splitlines():
        stack_text, _, count_text = line.rpartition(" ")
        if not stack_text or not count_text.isdigit():
            continue
        count = int(count_text)
        stack = stack_text.split(";")
        groups[group_of(stack)] += count
        leaves[stack[-1]] += count
        total += count
    return groups, leaves, total


def table(groups: Counter[str], total: int, us_per_request: float) -> str:
    lines = ["| who | share of samples | µs per request |", "|---|---|---|"]
    for name, count in groups.most_common():
        share = count / total
        lines.append(f"| {name} | {share:.1%} | {share * us_per_request:.1f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suite", choices=sorted(SUITES))
    parser.add_argument("--endpoint", default=None, help="default: the suite's first")
    parser.add_argument("--contender", default="aiorest")
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds sampled (wrk runs 2 s longer)")
    parser.add_argument("--rate", type=int, default=500, help="samples per second")
    parser.add_argument(
        "--native",
        action="store_true",
        help="native frames too (py-spy then stops the process per sample, which over-counts syscalls)",
    )
    parser.add_argument("--top", type=int, default=15, help="innermost frames listed")
    parser.add_argument("--dsn", default=os.environ.get("DATABASE_URL"), help="db suite: a PostgreSQL URL")
    args = parser.parse_args()
    require_wrk()
    contenders, paths = SUITES[args.suite]
    by_name = {c.name: c for c in contenders}
    if args.contender not in by_name:
        raise SystemExit(f"unknown contender {args.contender!r} (choose from {', '.join(by_name)})")
    endpoint = args.endpoint or paths[0]
    env = suite_environment(args.suite, args.dsn)
    server = ServerProcess(args.contender, by_name[args.contender].command, env)
    with postgres_pinned(1) if args.suite == "db" else nullcontext():
        try:
            server.wait_ready(endpoint)
            found = sample(server, endpoint, args.connections, args.seconds, args.rate, args.native)
        finally:
            server.stop()
    print_profile(found, f"{args.contender} {endpoint} c={args.connections}", args.top)


@dataclass(frozen=True)
class Profile:
    """py-spy's raw samples of a server under wrk's load, and what the server did meanwhile."""

    raw: str  # py-spy's collapsed stacks, one "frame;frame;... count" a line
    requests_per_s: float
    us_per_request: float  # the server's CPU time while sampled, per request


def sample(
    server: ServerProcess,
    endpoint: str,
    connections: int,
    seconds: float,
    rate: int = 500,
    native: bool = False,
    **wrk: Any,
) -> Profile:
    """Sample ``server`` with py-spy (on CPU 1) for ``seconds`` while wrk loads ``endpoint``.

    ``wrk`` goes to run_wrk (a Lua script and its arguments); a second of load is
    discarded first. SystemExit if py-spy is missing or fails.
    """
    py_spy = shutil.which("py-spy")
    if py_spy is None:
        raise SystemExit('py-spy is missing: pip install -e ".[dev]"')
    url = server.url + endpoint
    run_wrk(url, connections=connections, seconds=1, **wrk)  # warm-up
    print(
        f"profiling {server.name} {endpoint} at {connections} connections for {seconds:.0f} s ...",
        file=sys.stderr,
        flush=True,
    )
    result: list[WrkResult] = []
    load = threading.Thread(
        target=lambda: result.append(run_wrk(url, connections=connections, seconds=seconds + 2, **wrk))
    )
    load.start()
    with tempfile.TemporaryDirectory() as tmp:
        before = cpu_seconds([server.process.pid])
        out = Path(tmp) / "profile.txt"
        record = subprocess.run(
            [
                *(["taskset", "-c", "1"] if shutil.which("taskset") else []),
                py_spy,
                "record",
                "--pid",
                str(server.process.pid),
                *(["--native"] if native else ["--nonblocking"]),
                "--rate",
                str(rate),
                "--duration",
                str(round(seconds)),
                "--format",
                "raw",
                "--output",
                str(out),
            ],
            capture_output=True,
            text=True,
        )
        spent = cpu_seconds([server.process.pid]) - before
        load.join()
        if record.returncode != 0:
            raise SystemExit(f"py-spy failed: {record.stderr.strip()[-2000:]}")
        raw = out.read_text()
    requests_per_s = result[0].requests_per_sec if result else float("nan")
    return Profile(raw, requests_per_s, spent * 1e6 / (requests_per_s * seconds))


def print_profile(found: Profile, title: str, top: int) -> None:
    """The share and µs per request of each group of frames, then the ``top`` innermost frames."""
    groups, leaves, total = summarise(found.raw)
    if not total:
        raise SystemExit("py-spy recorded no sample (was the server idle?)")
    print(
        f"\n{title}: {found.requests_per_s:,.0f} requests/s, "
        f"{found.us_per_request:.1f} µs of server CPU per request, {total} samples\n"
    )
    print(table(groups, total, found.us_per_request))
    print(f"\ninnermost frames (top {top}):")
    for frame, count in leaves.most_common(top):
        print(f"  {count / total:6.1%}  {frame}")


if __name__ == "__main__":
    main()

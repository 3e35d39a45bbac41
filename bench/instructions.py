"""Instructions per request, counted by valgrind: a figure the machine's load cannot move.

Time per request on a shared machine drifts by tens of percent from one minute
to the next; the number of instructions the CPU executes for a request does not
(same Python, same hash seed). This runs ``bench.inprocess`` for aiorest and
for the ceiling's canned-response protocol under valgrind's cachegrind, twice
each with a different number of requests, and divides the difference by the
extra requests: start-up, imports and warm-up cancel out. A change worth 1% of
the framework's cost shows as such. It counts work, not time: cache misses and
the kernel's share of a real socket are not in it, so confirm a gain with
``bench/run.py``.

``--metrics``, ``--access-log PATH`` (``--access-log-format json``) and
``--blocked-loop-threshold SECONDS`` count a server started with those options
(see ``bench.inprocess``): against a run without them, the options' cost in
instructions. The access log's writer thread and the blocked-loop detector's
watchdog are counted too (valgrind counts every thread). ``--tracing RATIO``
counts a server tracing with OpenTelemetry (``bench.inprocess``), the batch
processor's thread and the spans' encoding included. ``--no-ceiling`` skips
the ceiling's runs.

    python -m bench.instructions [--endpoints /json,/plaintext] [--requests 2000,12000]
                                 [--metrics] [--access-log PATH [--access-log-format json]]
                                 [--blocked-loop-threshold SECONDS] [--tracing RATIO] [--no-ceiling]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from bench.inprocess import REQUESTS

ROOT = Path(__file__).resolve().parent.parent
_TOTAL = re.compile(r"I\s+refs:\s+([\d,]+)")


def count(endpoint: str, requests: int, *, ceiling: bool, options: Sequence[str] = ()) -> int:
    """Instructions executed by one ``bench.inprocess`` run of ``requests`` requests."""
    command = [
        "valgrind",
        "--tool=cachegrind",
        "--cache-sim=no",
        "--cachegrind-out-file=/dev/null",
        sys.executable,
        "-W",
        "ignore",
        "-m",
        "bench.inprocess",
        "--requests",
        str(requests),
        "--repeats",
        "1",
        "--endpoints",
        endpoint,
    ]
    if ceiling:
        command.append("--ceiling")
    command += options
    env = dict(os.environ, PYTHONHASHSEED="0", PYTHONPATH=str(ROOT))
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    found = _TOTAL.search(done.stderr)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"valgrind run failed ({done.returncode}): {done.stderr[-2000:]}")
    return int(found.group(1).replace(",", ""))


def per_request(low: tuple[int, int], high: tuple[int, int]) -> float:
    """Instructions per request from two ``(requests, instructions)`` runs."""
    (few, few_total), (many, many_total) = low, high
    return (many_total - few_total) / (many - few)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.instructions", description=__doc__.splitlines()[0])
    parser.add_argument("--endpoints", default=",".join(REQUESTS), help="comma-separated subset")
    parser.add_argument("--requests", default="2000,12000", help="the two request counts to difference")
    parser.add_argument("--metrics", action="store_true", help="count a server with metrics=True")
    parser.add_argument("--access-log", metavar="PATH", help="count a server with an access log written to PATH")
    parser.add_argument("--access-log-format", default="combined", choices=("combined", "json"))
    parser.add_argument("--blocked-loop-threshold", metavar="SECONDS", help="count a server with the detector on")
    parser.add_argument("--no-ceiling", action="store_true", help="skip the ceiling's runs")
    parser.add_argument("--tracing", metavar="RATIO", help="count a server tracing with OpenTelemetry, sampling RATIO")
    args = parser.parse_args(argv)
    options = ["--metrics"] if args.metrics else []
    if args.tracing is not None:
        options += ["--tracing", args.tracing]
    if args.access_log:
        options += ["--access-log", args.access_log, "--access-log-format", args.access_log_format]
    if args.blocked_loop_threshold:
        options += ["--blocked-loop-threshold", args.blocked_loop_threshold]
    if shutil.which("valgrind") is None:
        print("valgrind is not installed: apt-get install -y valgrind", file=sys.stderr)
        return 2
    few, many = (int(n) for n in args.requests.split(","))
    if not 0 < few < many:
        parser.error("--requests takes two counts, the smaller first")
    rows = []
    for endpoint in args.endpoints.split(","):
        figures: dict[str, float] = {}
        kinds = (("aiorest", False),) if args.no_ceiling else (("aiorest", False), ("ceiling", True))
        for name, is_ceiling in kinds:
            runs = []
            for requests in (few, many):
                print(f"{endpoint} {name}: {requests:,} requests under valgrind…", file=sys.stderr, flush=True)
                extra = () if is_ceiling else options
                runs.append((requests, count(endpoint, requests, ceiling=is_ceiling, options=extra)))
            figures[name] = per_request(runs[0], runs[1])
        rows.append((endpoint, figures["aiorest"], figures.get("ceiling")))
    if options:
        print(f"aiorest with {' '.join(options)}")
    print("| endpoint | aiorest instructions/request | ceiling | aiorest − ceiling |")
    print("|---|---|---|---|")
    for endpoint, aiorest, ceiling in rows:
        if ceiling is None:
            print(f"| {endpoint} | {aiorest:,.0f} | | |")
        else:
            print(f"| {endpoint} | {aiorest:,.0f} | {ceiling:,.0f} | {aiorest - ceiling:,.0f} |")
    print(f"Python {sys.version.split()[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

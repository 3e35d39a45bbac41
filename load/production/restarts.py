"""SIGHUPs under steady load on an aiorest of one's own app, counted: ``python -m load production restarts``.

    python -m load production restarts tests.apps.pid_app:app /pid --workers 2

Prints what the steady client saw (harness/steady.py: every failed request counted);
exits 1 if a request was lost.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Sequence

from harness.processes import AiorestProcess
from harness.restarts import sighups_under_load


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m load production restarts", description=__doc__.splitlines()[0])
    parser.add_argument("app", help="MODULE:APP")
    parser.add_argument("path", help="the path to load, e.g. /json")
    parser.add_argument("--workers", default="2")
    parser.add_argument("--sighups", type=int, default=2)
    parser.add_argument("--rate", type=float, default=400.0)
    parser.add_argument("--duration", type=float, default=10.0)
    args = parser.parse_args(argv)
    with AiorestProcess(args.app, "--workers", args.workers, ready_path=args.path) as upstream:
        result = asyncio.run(
            sighups_under_load(
                upstream, upstream.url + args.path, sighups=args.sighups, rate=args.rate, duration=args.duration
            )
        )
    print(json.dumps(result.summary(), indent=2))
    return 1 if result.failed else 0

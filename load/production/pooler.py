"""What PgBouncer in transaction mode costs on ``/db``: the example app (one worker) through it,
without prepared statements, against a direct connection with them (and without them, which splits
the cost between the extra hop and the statements no longer prepared).

    python -m load production pooler [--duration 10] [--rounds 3] [--dsn postgresql://...]

Without ``--dsn`` (or ``DATABASE_URL``) it starts a private PostgreSQL (pgserver). The three
contenders run in turn, interleaved, for ``rounds`` rounds of ``duration`` seconds each
(wrk, loopback); requests/s are summed over the rounds, and the ratios printed against the
direct, prepared contender. ``measure()`` returns the same figures as a dict.

PgBouncer itself is started by ``harness.pgbouncer.run_pgbouncer``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

from harness.pgbouncer import database_name, run_pgbouncer
from harness.postgres import migrate, server_url
from harness.processes import ServerProcess

WRK = shutil.which("wrk") or "/usr/bin/wrk"
ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def _postgres(dsn: str | None) -> Iterator[str]:
    """``dsn``, or ``$DATABASE_URL``, or a private pgserver for this run; migrated."""
    with nullcontext(dsn) if dsn else server_url() as url:
        migrate(url)
        yield url


def wrk(url: str, duration: float, connections: int) -> tuple[int, int]:
    """(requests, errors) of one wrk run: errors are non-2xx/3xx answers and socket errors."""
    output = subprocess.run(
        [WRK, "-t1", f"-c{connections}", f"-d{max(1, round(duration))}s", "--timeout", "10s", url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found = re.search(r"(\d+) requests in", output)
    if found is None:
        raise RuntimeError(f"unexpected wrk output: {output}")
    errors = sum(int(n) for n in re.findall(r"Non-2xx or 3xx responses: (\d+)", output))
    socket_errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output)
    if socket_errors:
        errors += sum(int(n) for n in socket_errors.groups())
    return int(found.group(1)), errors


def measure(
    duration: float = 10,
    rounds: int = 3,
    connections: int = 64,
    dsn: str | None = None,
    pool_size: int = 16,
) -> dict[str, float]:
    """/db requests/s of the example app (one worker, a pool of ``pool_size``) in three setups.

    Keys: ``pgbouncer_rps`` (transaction mode, statements not prepared), ``direct_prepared_rps``,
    ``direct_unprepared_rps``, their ratios ``pgbouncer_vs_direct`` and
    ``unprepared_vs_prepared`` (both against direct prepared), ``errors`` (all runs), ``seconds``
    (per contender). The contenders alternate within each round, so a machine that slows down
    during the run slows them all alike.
    """
    with _postgres(dsn) as server, run_pgbouncer(server, pool_size=pool_size) as pooled:
        contenders = {
            "pgbouncer": (pooled.format(database=database_name(server)), {"DATABASE_POOLER": "transaction"}),
            "direct_prepared": (server, {}),
            "direct_unprepared": (server, {"DATABASE_PREPARE": "0"}),
        }
        requests = dict.fromkeys(contenders, 0)
        errors = 0
        for _ in range(rounds):
            for name, (url, extra) in contenders.items():
                env = {key: value for key, value in os.environ.items() if not key.startswith("DATABASE_")}
                env.update(
                    DATABASE_URL=url,
                    DATABASE_POOL_MAX=str(pool_size),
                    DATABASE_POOL_MIN=str(pool_size),
                    PYTHONPATH=str(ROOT),
                    **extra,
                )
                app = ServerProcess(
                    name, [sys.executable, "-m", "aiorest", "run", "example_app.app:app", "--port", "{port}"], env
                )
                try:
                    app.wait_ready("/db")
                    wrk(f"{app.url}/db", 1, connections)  # warm: every connection open and its statement prepared
                    count, failed = wrk(f"{app.url}/db", duration, connections)
                finally:
                    app.stop()
                requests[name] += count
                errors += failed
    seconds = rounds * max(1, round(duration))
    rps = {name: count / seconds for name, count in requests.items()}
    return {
        "pgbouncer_rps": rps["pgbouncer"],
        "direct_prepared_rps": rps["direct_prepared"],
        "direct_unprepared_rps": rps["direct_unprepared"],
        "pgbouncer_vs_direct": rps["pgbouncer"] / rps["direct_prepared"],
        "unprepared_vs_prepared": rps["direct_unprepared"] / rps["direct_prepared"],
        "errors": errors,
        "seconds": seconds,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m load production pooler", description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=10, help="seconds per contender and round (default 10)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    parser.add_argument("--connections", type=int, default=64, help="wrk connections (default 64)")
    parser.add_argument("--dsn", help="a PostgreSQL URL (default $DATABASE_URL, else a private pgserver)")
    args = parser.parse_args(argv)
    figures = measure(args.duration, args.rounds, args.connections, args.dsn)
    print(f"/db, example app, 1 worker, pool 16, wrk -c{args.connections}, {args.rounds} interleaved rounds")
    print(f"  direct, prepared statements      {figures['direct_prepared_rps']:9.0f} requests/s   1.00")
    print(
        f"  direct, not prepared             {figures['direct_unprepared_rps']:9.0f} requests/s"
        f"   {figures['unprepared_vs_prepared']:.2f}"
    )
    print(
        f"  PgBouncer transaction mode       {figures['pgbouncer_rps']:9.0f} requests/s"
        f"   {figures['pgbouncer_vs_direct']:.2f}"
    )
    print(f"  errors: {figures['errors']}")

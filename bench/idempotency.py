"""What an Idempotency-Key costs a write: the example app's ``POST /notes`` with and without one.

The example app (its ``PostgresIdempotencyStore``) in process, on uvloop, behind aiorest's
server on loopback, one request at a time over one keep-alive connection, logged in with a
bearer token: ``POST /notes`` without a key, with a new key each (the request runs in a
transaction with its key: BEGIN, the lock, the look-up, the handler, the answer kept, COMMIT),
and the same key again (the answer replayed: no handler). Interleaved rounds; prints
microseconds per request (mean, standard deviation, 95% CI, median) and the paired ratios.
PostgreSQL: ``--dsn`` (default ``$DATABASE_URL``), in a database of its own, created and dropped.

    python -m bench.idempotency [--rounds 30] [--requests 200] [--dsn DSN]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import uuid
from collections.abc import Awaitable, Callable

import uvloop

from aiorest.db import Database
from aiorest.testing import TestClient
from bench.limiter import _scratch_database, interleaved
from bench.stats import median, paired_ratio, summarise
from example_app import create_app


async def main(rounds: int, requests: int, dsn: str) -> None:
    scratch, drop = await _scratch_database(dsn)
    client = TestClient(create_app(Database(scratch, min_size=2, max_size=4)))
    await client.start()
    try:
        account = {"username": f"bench-{uuid.uuid4().hex[:8]}", "password": uuid.uuid4().hex}
        async with client.post("/users", json=account) as response:
            assert response.status == 201, await response.text()
        async with client.post("/tokens", json=account) as response:
            token = (await response.json())["token"]
        auth = {"Authorization": f"Bearer {token}"}
        replayed_key = {**auth, "Idempotency-Key": str(uuid.uuid4())}

        async def post(headers: dict[str, str]) -> None:
            async with client.post("/notes", json={"title": "bench"}, headers=headers) as response:
                assert response.status == 201, await response.text()
                await response.read()

        async def without_key(n: int) -> None:
            for _ in range(n):
                await post(auth)

        async def new_key(n: int) -> None:
            for _ in range(n):
                await post({**auth, "Idempotency-Key": str(uuid.uuid4())})

        async def same_key(n: int) -> None:
            for _ in range(n):
                await post(replayed_key)

        runs: dict[str, Callable[[int], Awaitable[None]]] = {
            "POST /notes, no key": without_key,
            "POST /notes, a new key": new_key,
            "POST /notes, a key seen (replayed)": same_key,
        }
        names = list(runs)
        load = os.getloadavg()
        samples = await interleaved(runs, rounds, requests, warm_up=50)
        print(f"# POST /notes with and without an Idempotency-Key, µs ({rounds} rounds of {requests}, interleaved)\n")
        print(f"{platform.node()}, {os.cpu_count()} cores, Python {platform.python_version()}, uvloop;")
        print("the example app in process, PostgreSQL on loopback, one request at a time.\n")
        print(f"Load average at the start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}.\n")
        print("| request | mean µs | sd | 95% CI | median |")
        print("|---|---:|---:|---|---:|")
        for name in names:
            s, middle = summarise(samples[name]), median(samples[name])
            print(f"| {name} | {s.mean:.0f} | {s.std:.0f} | {s.ci_low:.0f} – {s.ci_high:.0f} | {middle:.0f} |")
        print("\nPaired per round, against the request without a key:\n")
        print("| ratio | mean | 95% CI |")
        print("|---|---:|---|")
        for name in names[1:]:
            r = paired_ratio(samples[name], samples[names[0]])
            print(f"| {name} / no key | {r.mean:.2f} | {r.ci_low:.2f} – {r.ci_high:.2f} |")
    finally:
        await client.close()
        await drop()


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--dsn", default=os.environ.get("DATABASE_URL"))
    args = parser.parse_args()
    if not args.dsn:
        sys.exit("no --dsn and no DATABASE_URL")
    uvloop.install()
    asyncio.run(main(args.rounds, args.requests, args.dsn))


if __name__ == "__main__":
    cli()

"""What one rate limit check costs, per store: in memory, in Redis, in PostgreSQL (issue 30, point 3).

Times ``RateLimit.hit`` (the in-memory, synchronous path, unchanged), ``await RateLimit.ahit``
in memory, in a :class:`~aiorest.security.RedisLimitStore` and in a
:class:`~aiorest.security.PostgresLimitStore`, and a whole login check (``await
LoginRateLimiter.acheck``: the address's limit, then the account's) in each store, beside a
bare round trip to each (``PING``, ``SELECT 1``) for scale, one check at a time on uvloop,
in interleaved rounds; prints microseconds per check (mean, standard deviation, 95% CI over
the rounds, and the median) as a Markdown table.

Redis: ``--redis URL``, else a redis-server of its own on a free port. PostgreSQL: ``--dsn``
(default ``$DATABASE_URL``), in a database of its own that it creates and drops; left out
without one. The figures are a round trip on this machine's loopback: across hosts, add the
network's.

    python -m bench.limiter [--rounds 30] [--checks 2000] [--redis URL] [--dsn DSN]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import uvloop

from aiorest.db import Database, migrate
from aiorest.security import LimitStore, LoginRateLimiter, PostgresLimitStore, RateLimit, RedisLimitStore
from bench.stats import median, paired_ratio, summarise
from harness.processes import ServerError
from harness.redis import RedisServer

KEYS = 1000  # distinct keys the checks cycle over, under a limit none of them reaches


def _limit(store: LimitStore | None) -> RateLimit:
    return RateLimit(10**9, 3600, max_entries=10**6, store=store, name=f"bench:{uuid.uuid4().hex}")


def _login(store: LimitStore | None) -> LoginRateLimiter:
    per = (10**9, 3600.0)
    return LoginRateLimiter(per_account=per, per_address=per, max_entries=10**6, store=store, name=uuid.uuid4().hex)


def contenders(stores: dict[str, LimitStore | None]) -> dict[str, Callable[[int], Awaitable[None]]]:
    """name -> run(n): n checks, one after another."""
    runs: dict[str, Callable[[int], Awaitable[None]]] = {}
    memory = _limit(None)

    async def memory_hit(n: int) -> None:
        hit = memory.hit
        for i in range(n):
            hit(f"k{i % KEYS}")

    runs["memory: hit (sync)"] = memory_hit
    for name, store in stores.items():
        limit, login = _limit(store), _login(store)

        async def ahit(n: int, limit: RateLimit = limit) -> None:
            for i in range(n):
                await limit.ahit(f"k{i % KEYS}")

        async def acheck(n: int, login: LoginRateLimiter = login) -> None:
            for i in range(n):
                await login.acheck(f"user{i % KEYS}", f"10.0.{i % 7}.{i % KEYS % 250}")

        runs[f"{name}: await ahit"] = ahit
        runs[f"{name}: await acheck (login: 2 limits)"] = acheck
        if isinstance(store, RedisLimitStore):

            async def ping(n: int, client: Any = store.redis) -> None:
                for _ in range(n):
                    await client.ping()

            runs["redis: PING (a bare round trip)"] = ping
        elif isinstance(store, PostgresLimitStore):

            async def select(n: int, database: Database = store.database) -> None:
                for _ in range(n):
                    await database.fetchval("SELECT 1")

            runs["postgres: SELECT 1 (a bare round trip)"] = select
    return runs


async def interleaved(
    runs: dict[str, Callable[[int], Awaitable[None]]], rounds: int, n: int, warm_up: int
) -> dict[str, list[float]]:
    """µs per call of each run over ``rounds`` rounds of ``n``, each round in another order, after a warm-up."""
    names = list(runs)
    for name in names:  # a warm-up round each: connections, scripts loaded, statements prepared
        await runs[name](min(n, warm_up))
    samples: dict[str, list[float]] = {name: [] for name in names}
    for round_number in range(rounds):
        order = names[round_number % len(names) :] + names[: round_number % len(names)]
        for name in order:
            started = time.perf_counter()
            await runs[name](n)
            samples[name].append((time.perf_counter() - started) / n * 1e6)
    return samples


async def _scratch_database(dsn: str) -> tuple[str, Callable[[], Awaitable[None]]]:
    """A new database beside the one ``dsn`` names, and how to drop it."""
    name = f"aiorest_bench_limiter_{os.getpid()}"
    admin = Database(dsn, min_size=1, max_size=1)
    await admin.open()
    await admin.execute(f"CREATE DATABASE {name}")
    parts = urlsplit(dsn)
    scratch = urlunsplit(parts._replace(path=f"/{name}"))

    async def drop() -> None:
        await admin.execute(f"DROP DATABASE IF EXISTS {name}")
        await admin.close()

    return scratch, drop


async def main(rounds: int, checks: int, redis_url: str, dsn: str | None) -> None:
    stores: dict[str, LimitStore | None] = {"memory": None, "redis": RedisLimitStore(redis_url)}
    database, drop = None, None
    if dsn:
        scratch, drop = await _scratch_database(dsn)
        database = Database(scratch, min_size=1, max_size=1)
        await database.open()
        await migrate(database, "aiorest:ratelimits")
        stores["postgres"] = PostgresLimitStore(database)
    try:
        runs = contenders(stores)
        names = list(runs)
        load = os.getloadavg()
        samples = await interleaved(runs, rounds, checks, warm_up=200)
        print(f"# One rate limit check, µs ({rounds} rounds of {checks} checks, interleaved)\n")
        print(f"{platform.node()}, {platform.processor() or platform.machine()}, {os.cpu_count()} cores,")
        print(f"Python {platform.python_version()}, uvloop, Redis and PostgreSQL on loopback.\n")
        print(f"Load average at the start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}.\n")
        print("| check | mean µs | sd | 95% CI | median |")
        print("|---|---:|---:|---|---:|")
        for name in names:
            s = summarise(samples[name])
            low, high = s.ci_low, s.ci_high
            print(f"| {name} | {s.mean:.2f} | {s.std:.2f} | {low:.2f} – {high:.2f} | {median(samples[name]):.2f} |")
        print("\nPaired per round, a check against a bare round trip to its store (the steadier figure here):\n")
        print("| ratio | mean | 95% CI |")
        print("|---|---:|---|")
        for store, bare in (
            ("redis", "redis: PING (a bare round trip)"),
            ("postgres", "postgres: SELECT 1 (a bare round trip)"),
        ):
            if bare not in samples:
                continue
            for check in (f"{store}: await ahit", f"{store}: await acheck (login: 2 limits)"):
                r = paired_ratio(samples[check], samples[bare])
                print(f"| {check} / {bare.split(' (')[0]} | {r.mean:.2f} | {r.ci_low:.2f} – {r.ci_high:.2f} |")
    finally:
        for store in stores.values():
            if store is not None:
                await store.close()
        if database is not None:
            await database.close()
        if drop is not None:
            await drop()


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--checks", type=int, default=2000)
    parser.add_argument("--redis", help="a Redis URL (default: a redis-server of its own)")
    parser.add_argument("--dsn", default=os.environ.get("DATABASE_URL"), help="PostgreSQL (default $DATABASE_URL)")
    args = parser.parse_args()
    if not args.dsn:
        print("no --dsn and no DATABASE_URL: PostgreSQL left out", file=sys.stderr)
    if args.redis:
        uvloop.run(main(args.rounds, args.checks, args.redis, args.dsn))
        return
    try:
        with RedisServer() as redis:
            uvloop.run(main(args.rounds, args.checks, redis.url, args.dsn))
    except ServerError as exc:
        sys.exit(f"redis-server: {exc}")


if __name__ == "__main__":
    cli()

"""The example app as several servers of several workers sharing one store (issue 30, points 3 and 4):
the login limits hold across all of them, a login made on one is valid on all, a logout seen by all
at once; with Redis or PostgreSQL; and a limit store that stops answers 503 or lets through, never 500.

Two ``aiorest run --workers 2`` parents on two ports, every request on a new connection, alternating
between them: four processes, each counting and caching nothing of its own that matters here.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import aiohttp
import pytest

from harness.fixtures import RedisServer
from harness.processes import AiorestProcess

PASSWORD = "correct horse battery"


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


@contextmanager
def servers(database_url: str, count: int = 2, **env: str) -> Iterator[list[AiorestProcess]]:
    """``count`` example apps of 2 workers each on one database, configured by ``env``."""
    environment = dict(os.environ, DATABASE_URL=database_url, DATABASE_POOL_MAX="3", DATABASE_POOL_MIN="1", **env)
    with ExitStack() as stack:
        started = []
        for _ in range(count):  # one after the other: the first applies the migrations
            process = AiorestProcess("example_app.app:app", "--workers", "2", env=environment, ready_path="/json")
            started.append(stack.enter_context(process))
        yield started


class Client:
    """Requests from one loopback address, each on a new connection, to the servers in turn."""

    def __init__(self, servers: list[AiorestProcess], address: str) -> None:
        self.servers = servers
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(local_addr=(address, 0), force_close=True, limit=0)
        )
        self.turn = 0

    async def send(self, method: str, path: str, *, server: int | None = None, **options: Any) -> tuple[int, Any]:
        if server is None:
            server, self.turn = self.turn % len(self.servers), self.turn + 1
        async with self.session.request(method, self.servers[server].url + path, **options) as response:
            body = await response.read()
            self.last = response
            return response.status, body

    async def close(self) -> None:
        await self.session.close()


def credentials(name: str, password: str = PASSWORD) -> dict[str, Any]:
    return {"json": {"username": name, "password": password}}


def new_name() -> str:
    return "u" + uuid.uuid4().hex[:12]


async def limits_hold_across_processes(processes: list[AiorestProcess]) -> None:
    first, second = Client(processes, "127.0.0.2"), Client(processes, "127.0.0.3")
    try:
        name = new_name()
        assert (await first.send("POST", "/users", **credentials(name)))[0] == 201
        statuses = []
        for attempt in range(12):  # both addresses, both servers, a new connection (a worker) each time
            client = (first, second)[attempt % 2]
            status, _ = await client.send("POST", "/login", server=(attempt // 2) % 2, **credentials(name, "wrong!!!"))
            statuses.append(status)
            if status == 429:
                assert 1 <= int(client.last.headers["Retry-After"]) <= 60
        assert statuses == [401] * 5 + [429] * 7  # 5 reached the password check, then 429 everywhere
        assert (await first.send("POST", "/login", **credentials(name)))[0] == 429  # even the right password
        assert (await second.send("POST", "/tokens", **credentials(name)))[0] == 429

        # 20 attempts at once over every process: the store counts atomically, exactly 5 get checked
        other = new_name()
        assert (await first.send("POST", "/users", **credentials(other)))[0] == 201
        burst = await asyncio.gather(
            *(client.send("POST", "/login", **credentials(other, "wrong!!!")) for client in (first, second) * 10)
        )
        assert sorted(status for status, _ in burst) == [401] * 5 + [429] * 15
    finally:
        await first.close()
        await second.close()


async def sessions_hold_across_processes(processes: list[AiorestProcess]) -> None:
    client = Client(processes, "127.0.0.4")
    try:
        name = new_name()
        assert (await client.send("POST", "/users", **credentials(name)))[0] == 201
        status, _ = await client.send("POST", "/login", server=0, **credentials(name))
        assert status == 200
        cookie = client.last.cookies["session"].value
        sent = {"headers": {"Cookie": f"session={cookie}"}}
        for _ in range(8):  # valid on every process
            status, body = await client.send("GET", "/me", **sent)
            assert status == 200 and name.encode() in body
        assert (await client.send("POST", "/logout", server=1, **sent))[0] == 204
        for _ in range(8):  # seen by every process, from the next request on
            assert (await client.send("GET", "/me", **sent))[0] == 401

        status, body = await client.send("POST", "/tokens", server=0, **credentials(name))
        assert status == 201
        bearer = {"headers": {"Authorization": f"Bearer {json.loads(body)['token']}"}}
        for _ in range(4):
            assert (await client.send("GET", "/me", **bearer))[0] == 200
        assert (await client.send("DELETE", "/tokens/current", server=1, **bearer))[0] == 204
        for _ in range(4):
            assert (await client.send("GET", "/me", **bearer))[0] == 401
    finally:
        await client.close()


async def test_with_redis_limits_and_sessions_hold_across_processes(database_url, redis_server) -> None:
    with servers(database_url, RATE_LIMIT_STORE=redis_server.url, SESSION_STORE=redis_server.url) as processes:
        await limits_hold_across_processes(processes)
        await sessions_hold_across_processes(processes)
        assert all("Traceback" not in process.log() for process in processes)


async def test_with_postgresql_limits_and_sessions_hold_across_processes(database_url) -> None:
    with servers(database_url, RATE_LIMIT_STORE="postgres", SESSION_STORE="postgres") as processes:
        await limits_hold_across_processes(processes)
        await sessions_hold_across_processes(processes)
        assert all("Traceback" not in process.log() for process in processes)


async def test_in_memory_each_process_counts_on_its_own(database_url) -> None:
    # why the stores exist: the default counts per process, so two servers let 10 through, not 5
    with servers(database_url) as processes:
        client = Client(processes, "127.0.0.2")
        try:
            name = new_name()
            assert (await client.send("POST", "/users", server=0, **credentials(name)))[0] == 201
            statuses = [
                (await client.send("POST", "/login", server=attempt % 2, **credentials(name, "wrong!!!")))[0]
                for attempt in range(12)
            ]
        finally:
            await client.close()
    assert statuses.count(401) > 5


async def test_a_limit_store_that_stops_fails_logins_closed_and_registrations_open(database_url) -> None:
    with RedisServer() as redis, servers(database_url, count=1, RATE_LIMIT_STORE=redis.url) as processes:
        client = Client(processes, "127.0.0.2")
        try:
            name = new_name()
            assert (await client.send("POST", "/users", **credentials(name)))[0] == 201
            redis.stop()
            for _ in range(4):  # every worker: 503 with Retry-After, the error's JSON, never a 500
                status, body = await client.send("POST", "/login", **credentials(name))
                assert status == 503 and client.last.headers["Retry-After"] == "1"
                assert b"too many login attempts: the limit cannot be checked now" in body
                assert b"Traceback" not in body
            assert (await client.send("POST", "/tokens", **credentials(name)))[0] == 503
            assert (await client.send("POST", "/users", **credentials(new_name())))[0] == 201  # open
            redis.start()  # back, empty: the limits count again
            statuses = [(await client.send("POST", "/login", **credentials(name, "wrong!!!")))[0] for _ in range(6)]
            assert statuses == [401] * 5 + [429]
            assert (await client.send("POST", "/login", **credentials(name)))[0] == 429
        finally:
            await client.close()
        log = processes[0].log()
    assert "rate limit store unavailable: Redis: ConnectionError" in log
    assert "Traceback" not in log

"""/healthz and /readyz: alive, ready with the database up, not ready when it is unreachable or while draining."""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from aiorest import App, PostgresSessionStore, Server, SessionMiddleware
from aiorest.db import Database

ROOT = Path(__file__).resolve().parents[2]


@asynccontextmanager
async def serving(app: App, **options: Any) -> AsyncIterator[aiohttp.ClientSession]:
    server = Server(app, port=0, **options)
    await server.start()
    try:
        async with aiohttp.ClientSession(server.url) as session:
            yield session
    finally:
        await server.stop(timeout=2)


async def get(session: aiohttp.ClientSession, path: str) -> tuple[int, Any, Any]:
    async with session.get(path) as response:
        return response.status, response.headers, await response.json()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # nobody listens on it once closed


async def test_healthz_and_readyz_with_the_database_up(database_url):
    app = App()
    Database(database_url, min_size=1, max_size=2).setup(app)
    async with serving(app, health=True) as session:
        assert (await get(session, "/healthz"))[::2] == (200, {"status": "ok"})
        assert (await get(session, "/readyz"))[::2] == (200, {"status": "ready", "checks": {"database": "ok"}})
        async with session.head("/healthz") as response:
            assert response.status == 200


async def test_readyz_is_200_while_every_connection_of_the_pool_is_busy(database_url):
    app = App()
    db = Database(database_url, min_size=1, max_size=2, acquire_timeout=5)
    db.setup(app)
    app.add_middleware(SessionMiddleware(PostgresSessionStore(db)))  # a store on the same pool: not queued either
    async with serving(app, health=True) as session:
        release = asyncio.Event()

        async def hold() -> None:
            async with db.connection() as conn:
                await conn.fetchval("SELECT 1")
                await release.wait()

        holders = [asyncio.create_task(hold()) for _ in range(2)]
        await asyncio.sleep(0.2)
        assert db.idle == 0 and db.in_use == 2
        # answered while both connections stay taken: not queued behind them (busy, not down)
        checks = {"database": "ok", "session store": "ok"}
        assert (await get(session, "/readyz"))[::2] == (200, {"status": "ready", "checks": checks})
        assert db.in_use == 2
        release.set()
        await asyncio.gather(*holders)


async def test_readyz_is_503_when_the_database_is_unreachable_and_the_check_is_cached(caplog):
    app = App()
    dsn = f"postgresql://postgres@127.0.0.1:{closed_port()}/postgres?connect_timeout=1&sslmode=disable"
    Database(dsn, min_size=0, max_size=2).setup(app)  # opens nothing: the app starts
    async with serving(app, health=True) as session:
        assert (await get(session, "/healthz"))[0] == 200  # alive all the same
        status, headers, body = await get(session, "/readyz")
        assert (status, headers["Retry-After"]) == (503, "1")
        assert body["error"]["message"] == "not ready: the database is unreachable"
        assert body["error"]["details"] == {"database": "unreachable"}
        assert "Traceback" not in str(body)
        # a storm of probes within the second: one check, the cached answer
        begin = time.monotonic()
        results = await asyncio.gather(*(get(session, "/readyz") for _ in range(50)))
        assert {status for status, _, _ in results} == {503}
        assert time.monotonic() - begin < 5  # a breakage guard, generous on purpose: probes do not pile up
    warnings = [r for r in caplog.records if "database is unreachable" in r.getMessage()]
    assert len(warnings) == 1


async def test_health_routes_are_off_by_default_and_cannot_shadow_the_apps():
    app = App()

    @app.get("/healthz")
    async def own(request):
        return {"own": True}

    async with serving(app) as session:
        assert (await get(session, "/healthz"))[::2] == (200, {"own": True})
        assert (await get(session, "/readyz"))[0] == 404
    with pytest.raises(ValueError, match="'/healthz'"):
        await Server(app, port=0, health=True).start()


@pytest.mark.slow  # a process of its own (the fast tier runs in-process only)
def test_readyz_is_503_while_the_server_drains_after_sigterm():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-m", "aiorest", "run", "tests.apps.observe_app:app", "--port", str(port), "--health"]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=5)
                break
            except OSError:
                assert time.monotonic() < deadline and process.poll() is None, "the server did not start"
                time.sleep(0.05)
        with sock:
            # a slow request in flight, a probe pipelined behind it: answered during the drain
            sock.sendall(b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert b" 200 " in sock.recv(4096).split(b"\r\n")[0] + b" "
            sock.sendall(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\nGET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
            time.sleep(0.3)
            process.send_signal(signal.SIGTERM)
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        answers = data.split(b"HTTP/1.1 ")[1:]
        assert [answer[:3] for answer in answers] == [b"200", b"503"], data
        assert b"shutting down" in answers[1] and b"Retry-After: 1" in answers[1]
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


async def test_the_probes_check_what_they_are_given_not_what_the_app_state_holds(database_url):
    """HealthProbes take the draining flag and the database as arguments; Database.setup sets app.database."""
    from aiorest.ops.health import HealthProbes

    app = App()
    db = Database(database_url, min_size=1, max_size=2)
    db.setup(app)
    assert app.database is db
    app.state.db = object()  # not a database: a lookup in app.state would fail on it
    draining = [False]
    probes = HealthProbes(lambda: draining[0], database=app.database)
    app.add_route("GET", "/ready", probes.readyz)
    async with serving(app) as session:
        assert (await get(session, "/ready"))[::2] == (200, {"status": "ready", "checks": {"database": "ok"}})
        draining[0] = True
        status, headers, body = await get(session, "/ready")
        assert status == 503 and "shutting down" in body["error"]["message"]
    await probes.close()

"""PostgreSQL ending connections: a restart under load gets 200s and 503s only, one log line, no
traceback, and the pool full again; a connection reset with its last message fails at once.

A private PostgreSQL (pgserver) listens on TCP, as most deployments do: over
TCP a connection attempt can fail while it waits to write, which is where
aiopg left readers and writers on closed sockets.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path

import pytest
import uvloop

from aiorest import App, Request
from aiorest.db import Database, DatabaseUnavailable
from aiorest.testing import TestClient
from harness.ports import free_port
from tests.rawclient import get, read_response

ROOT = Path(__file__).resolve().parents[2]
POOL = 8
APP = f"""
from aiorest import App
from aiorest.db import Database

app = App()
db = Database(min_size={POOL}, max_size={POOL}, acquire_timeout=1, application_name="aiorest-restart")
db.setup(app)


@app.get("/one")
async def one(request):
    return await db.fetchone("SELECT 1 AS one")


@app.get("/pool")
async def pool(request):
    return {{"size": db.size, "idle": db.idle}}
"""
LOST_LINE = re.compile(r"WARNING aiorest\.db: lost (\d+) connections? to PostgreSQL: .+; reconnecting$")
NOISE = ("Traceback", "Unclosed", "ResourceWarning", "never retrieved", "Exception ignored", "RuntimeError")


class Postgres:
    """A private PostgreSQL that a test may restart: ``url`` on 127.0.0.1, ``socket_url`` on its unix socket."""

    def __init__(self, directory: str) -> None:
        self.pgserver = pytest.importorskip("pgserver")
        self.directory = directory
        self.server = self.pgserver.get_server(directory, cleanup_mode="delete")
        port = free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
        self.socket_url = f"postgresql://postgres@/postgres?host={directory}&port={port}"
        self._pg_ctl("-o", f"-h 127.0.0.1 -p {port} -k {directory}", "restart")

    def restart(self) -> None:
        self._pg_ctl("-m", "fast", "restart")

    def _pg_ctl(self, *args: str) -> None:
        log = f"{self.directory}/log"
        self.pgserver.pg_ctl(["-w", "-l", log, *args], pgdata=self.directory, user=self.server.system_user, timeout=30)


@pytest.fixture
def postgres() -> Iterator[Postgres]:
    # Not under pytest's tmp_path: pgserver's user must reach the data folder,
    # and a pytest run starting meanwhile makes /tmp/pytest-of-<user> private again.
    with tempfile.TemporaryDirectory(prefix="aiorest-restart-pg-") as directory:
        server = Postgres(directory)
        try:
            yield server
        finally:
            server.server.cleanup()


async def pool_state(port: int) -> dict[str, int]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(get("/pool"))
        state: dict[str, int] = json.loads((await read_response(reader)).body)
        return state
    finally:
        writer.close()


async def test_a_restart_under_load_gives_200_or_503_one_log_line_and_a_full_pool(postgres, tmp_path):
    (tmp_path / "restart_app.py").write_text(APP)
    port = free_port()
    log = tmp_path / "server.log"
    env = {**os.environ, "DATABASE_URL": postgres.url, "PYTHONWARNINGS": "default", "PYTHONPATH": str(ROOT)}
    with log.open("wb") as stderr:
        server = subprocess.Popen(
            [sys.executable, "-m", "aiorest", "run", "restart_app:app", "--port", str(port)],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        async with asyncio.timeout(10):
            while True:
                assert server.poll() is None, log.read_text()
                with suppress(OSError):
                    if (await pool_state(port))["size"] == POOL:
                        break
                await asyncio.sleep(0.05)

        answers: Counter[int] = Counter()
        no_retry_after = 0
        restarted = asyncio.Event()
        after_restart: Counter[int] = Counter()

        async def client() -> None:
            nonlocal no_retry_after
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            try:
                deadline = None
                while deadline is None or time.monotonic() < deadline:
                    if deadline is None and restarted.is_set():
                        deadline = time.monotonic() + 1.5
                    writer.write(get("/one"))
                    response = await read_response(reader)
                    answers[response.status] += 1
                    if restarted.is_set():
                        after_restart[response.status] += 1
                    if response.status == 503 and response.header("retry-after") is None:
                        no_retry_after += 1
            finally:
                writer.close()

        clients = [asyncio.create_task(client()) for _ in range(32)]
        await asyncio.sleep(1.0)
        await asyncio.to_thread(postgres.restart)
        restarted.set()
        async with asyncio.timeout(15):
            await asyncio.gather(*clients)

        assert set(answers) <= {200, 503}, answers
        assert no_retry_after == 0
        assert answers[503] > 0, f"the restart went unnoticed: {answers}"
        assert after_restart[200] > 0, f"no recovery after the restart: {after_restart}"
        async with asyncio.timeout(5):
            while await pool_state(port) != {"size": POOL, "idle": POOL}:
                await asyncio.sleep(0.05)
        await asyncio.sleep(0.6)  # past the delay of the line that counts the losses
    finally:
        server.send_signal(signal.SIGINT)
        try:
            await asyncio.to_thread(server.wait, 10)
        except subprocess.TimeoutExpired:
            server.kill()  # the log below says what it was waiting for
            server.wait()
    text = log.read_text()
    assert server.returncode == 0, text
    assert not [noise for noise in NOISE if noise in text], text
    warnings = [line for line in text.splitlines() if " WARNING " in line or " ERROR " in line]
    assert len(warnings) == 1 and LOST_LINE.search(warnings[0]), text
    assert int(LOST_LINE.search(warnings[0]).group(1)) >= POOL, text


async def test_requests_one_at_a_time_through_a_restart_get_200_or_503(postgres):
    app = App()
    db = Database(postgres.socket_url, min_size=2, max_size=4, acquire_timeout=1)
    db.setup(app)

    @app.get("/one")
    async def one(request: Request) -> dict[str, int]:
        return {"one": await db.fetchval("SELECT 1")}

    async with TestClient(app) as client:
        async with client.get("/one") as response:
            assert response.status == 200
        restarting = asyncio.create_task(asyncio.to_thread(postgres.restart))
        statuses = []
        while not restarting.done():
            async with client.get("/one") as response:
                statuses.append(response.status)
                assert response.status in (200, 503), await response.text()  # never a 500
            await asyncio.sleep(0.02)
        await restarting
        for _ in range(5):  # back by itself, no manual step
            async with client.get("/one") as response:
                assert response.status == 200
        assert statuses, "no request was made while PostgreSQL restarted"


RESETTING_POSTGRES = r"""
# Just enough of PostgreSQL's protocol to connect and run SET; any other statement is
# answered as by a server shutting down, with FATAL 57P01, and the socket is reset.
import socket, struct, threading, time

def message(kind, body):
    return kind + struct.pack("!i", len(body) + 4) + body

def serve(sock):
    sock.recv(1024)  # the startup message
    parameters = {"server_version": "16.2", "client_encoding": "UTF8", "DateStyle": "ISO, MDY"}
    status = b"".join(message(b"S", f"{name}\0{value}\0".encode()) for name, value in parameters.items())
    sock.sendall(message(b"R", struct.pack("!i", 0)) + status + message(b"Z", b"I"))
    while query := sock.recv(1024):
        if b"SET statement_timeout" in query:
            sock.sendall(message(b"C", b"SET\0") + message(b"Z", b"I"))
            continue
        time.sleep(0.05)  # the client waits for the answer on its event loop
        sock.sendall(message(b"E", b"SFATAL\0VFATAL\0C57P01\0Mterminating connection\0\0"))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        break
    sock.close()  # a reset, right behind the message

listener = socket.create_server(("127.0.0.1", 0))
print(listener.getsockname()[1], flush=True)
while True:
    threading.Thread(target=serve, args=(listener.accept()[0],), daemon=True).start()
"""


@pytest.mark.parametrize("new_loop", [asyncio.new_event_loop, uvloop.new_event_loop], ids=["asyncio", "uvloop"])
def test_a_connection_reset_with_its_last_message_fails_at_once(new_loop):
    # uvloop (libuv) stops watching such a socket without a callback: the
    # statement in flight used to wait for its statement timeout.
    # The server is a process of its own: locust, imported by another test
    # module, patches this one's threads into greenlets, which uvloop never runs.
    server = subprocess.Popen([sys.executable, "-c", RESETTING_POSTGRES], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        url = f"postgresql://postgres@127.0.0.1:{int(server.stdout.readline())}/postgres?sslmode=disable&gssencmode=disable"

        async def query() -> float:
            # min_size=0: the pool's capacity check at open is a query this server cannot answer.
            db = Database(url, min_size=0, max_size=1, statement_timeout=30, prepare=False)
            await db.open()
            try:
                began = time.monotonic()
                with pytest.raises(DatabaseUnavailable):
                    await db.fetchval("SELECT 1")
                return time.monotonic() - began
            finally:
                await db.close()

        with asyncio.Runner(loop_factory=new_loop) as runner:
            # A breakage guard, generous for a busy host: at once, not at the 30 s statement timeout.
            assert runner.run(query()) < 15
    finally:
        server.kill()
        server.wait()
        server.stdout.close()

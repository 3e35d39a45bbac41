"""The command line: ``python -m aiorest run module:app`` in a real subprocess."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from tests.wire import fetch, get

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def aiorest(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "aiorest",
        *args,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


@asynccontextmanager
async def running(process: asyncio.subprocess.Process) -> AsyncIterator[asyncio.subprocess.Process]:
    """The process, killed on the way out if a failed test left it running."""
    try:
        yield process
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def stop(process: asyncio.subprocess.Process, sig: int, timeout: float) -> bytes:
    """Send ``sig``, wait for the exit, and return what the process wrote to stdout and stderr."""
    process.send_signal(sig)
    async with asyncio.timeout(timeout):
        stdout, stderr = await process.communicate()
    return (stdout or b"") + (stderr or b"")


async def wait_until_accepting(process: asyncio.subprocess.Process, port: int, timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while True:
            assert process.returncode is None, f"the server exited with {process.returncode}"
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                await asyncio.sleep(0.02)
                continue
            writer.close()
            return


async def test_run_serves_the_app_and_stops_cleanly_on_sigterm():
    port = free_port()
    process = await aiorest("run", "examples.hello:app", "--port", str(port), "--log-level", "warning")
    async with running(process):
        await wait_until_accepting(process, port)
        index, note = await fetch(port, get("/") + get("/notes/1"), count=2)
        assert index.status == 200
        assert json.loads(index.body) == {"message": "Hello, World!"}
        assert json.loads(note.body) == {"id": 1, "text": "hello"}
        output = await stop(process, signal.SIGTERM, timeout=5)
        assert process.returncode == 0, output.decode()
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", port)


async def test_sigint_stops_the_server_too():
    port = free_port()
    process = await aiorest("run", "examples.hello:app", "--port", str(port), "--log-level", "warning")
    async with running(process):
        await wait_until_accepting(process, port)
        await stop(process, signal.SIGINT, timeout=5)
        assert process.returncode == 0


SCRIPT = Path(sys.executable).parent / "aiorest"


def test_console_script_is_installed():
    (entry_point,) = entry_points(group="console_scripts", name="aiorest")
    assert entry_point.value == "aiorest.cli:main"
    assert SCRIPT.is_file()
    assert shutil.which("aiorest") is not None


async def test_console_script_runs_the_cli():
    process = await asyncio.create_subprocess_exec(
        str(SCRIPT), "run", "--help", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=ROOT
    )
    async with asyncio.timeout(10):
        stdout, _ = await process.communicate()
    assert process.returncode == 0
    assert b"MODULE:APP" in stdout and b"--port" in stdout


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("nomodule:app", "cannot import 'nomodule'"),
        ("examples.hello:nope", "module 'examples.hello' has no attribute 'nope'"),
        ("examples.hello", "expected MODULE:APP"),
        ("examples.hello:NOTES", "examples.hello:NOTES is a dict, not an aiorest.App"),
    ],
    ids=["no-module", "no-attribute", "no-colon", "not-an-app"],
)
async def test_bad_app_spec_exits_nonzero_with_a_message(spec, message):
    process = await aiorest("run", spec, "--port", str(free_port()))
    async with asyncio.timeout(10):
        stdout, stderr = await process.communicate()
    assert process.returncode != 0
    assert message in stderr.decode()
    assert "Traceback" not in stderr.decode()
    assert stdout == b""


async def test_python_m_example_app_runs_on_a_private_postgresql_and_stops_it_on_sigterm(tmp_path):
    # The README's run command on a machine with no DATABASE_URL: pgserver in the temp directory.
    env = {name: value for name, value in os.environ.items() if name != "DATABASE_URL"}
    env["TMPDIR"] = str(tmp_path)  # a data folder of its own, not the one the suite may share
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "example_app",
        "--port",
        str(port),
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    data = tmp_path / f"aiorest-pgdata-{os.getuid()}"
    async with running(process):
        await wait_until_accepting(process, port, timeout=120)  # initdb, migrations and seed first
        db, fortunes = await fetch(port, get("/db") + get("/fortunes"), count=2)
        assert db.status == 200 and set(json.loads(db.body)) == {"id", "randomNumber"}
        assert fortunes.status == 200 and b"<table>" in fortunes.body
        assert (data / "postmaster.pid").exists()
        output = await stop(process, signal.SIGTERM, timeout=60)
        assert process.returncode == 0, output.decode()
    text = output.decode()
    assert "using an embedded PostgreSQL" in text and f"http://127.0.0.1:{port}/" in text
    assert not (data / "postmaster.pid").exists(), "PostgreSQL was left running"
    assert not (ROOT / "pgdata").exists()

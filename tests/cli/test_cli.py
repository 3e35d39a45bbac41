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

from aiorest import __version__ as aiorest_version
from harness.ports import free_port
from tests.app.test_lifecycle import backends, create_table_world, wait_for_no_backends
from tests.rawclient import fetch, get

ROOT = Path(__file__).resolve().parents[2]


async def python(
    *args: str, cwd: Path = ROOT, env: dict[str, str] | None = None, merge: bool = False
) -> asyncio.subprocess.Process:
    """``python args`` in a subprocess, its stdout and stderr piped (stderr into stdout with ``merge``)."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        *args,
        cwd=cwd,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT if merge else asyncio.subprocess.PIPE,
    )


async def aiorest(*args: str) -> asyncio.subprocess.Process:
    return await python("-m", "aiorest", *args)


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
    process = await aiorest("run", "tests.apps.hello_app:app", "--port", str(port), "--log-level", "warning")
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
    process = await aiorest("run", "tests.apps.hello_app:app", "--port", str(port), "--log-level", "warning")
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
        ("tests.apps.hello_app:nope", "module 'tests.apps.hello_app' has no attribute 'nope'"),
        ("tests.apps.hello_app", "expected MODULE:APP"),
        ("tests.apps.hello_app:NOTES", "tests.apps.hello_app:NOTES is a dict, not an aiorest.App"),
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


@pytest.mark.parametrize("count", ["0", "-2"])
async def test_workers_below_one_is_a_usage_error(count):
    process = await aiorest("run", "tests.apps.hello_app:app", "--port", str(free_port()), "--workers", count)
    async with asyncio.timeout(10):
        _, stderr = await process.communicate()
    assert process.returncode == 2
    assert f"--workers: must be at least 1, got {count}" in stderr.decode() and "Traceback" not in stderr.decode()


async def test_python_m_example_app_runs_on_a_private_postgresql_and_stops_it_on_sigterm(tmp_path):
    # The README's run command on a machine with no DATABASE_URL: pgserver in the temp directory.
    env = {name: value for name, value in os.environ.items() if name not in ("DATABASE_URL", "XDG_RUNTIME_DIR")}
    env["TMPDIR"] = str(tmp_path)  # a data folder of its own, not the one the suite may share
    port = free_port()
    process = await python("-m", "example_app", "--port", str(port), env=env, merge=True)
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
    assert "using an embedded PostgreSQL" in text and f"aiorest serving on http://127.0.0.1:{port}" in text
    # what a newcomer reads: the data is there; no platformdirs warning, no pgserver chatter at exit
    applied = "0001_create_sessions, 1001_create_rate_limits, 2001_create_idempotency, 0001_notes"
    assert f"database ready: migrations applied: {applied}" in text, text
    assert "seeded with 10000 World rows and 12 fortunes" in text, text
    assert "Warning" not in text and "INFO pgserver" not in text, text
    assert not (data / "postmaster.pid").exists(), "PostgreSQL was left running"
    assert not (ROOT / "pgdata").exists()


# -- a startup that fails ----------------------------------------------------------------------------

FAILING_APP = '''
"""Opens a pool, then a startup hook fails: the table it creates exists already."""
import asyncio
import os
import sys
from pathlib import Path

from aiorest import App
from aiorest.db import Database

app = App()
db = Database(os.environ["DATABASE_URL"], min_size=3, application_name="failing-startup")
db.setup(app)


async def create_world(app):
    if os.environ.get("STARTUP_MARKER"):  # the signal tests: wait here until stopped
        Path(os.environ["STARTUP_MARKER"]).touch()
        await asyncio.sleep(60)
    await db.execute("CREATE TABLE world (id int)")


app.on_startup.append(create_world)

if __name__ == "__main__":
    app.run(port=int(sys.argv[1]))
'''

NOISE = ("Traceback", "Unclosed", "ResourceWarning", "Task was destroyed", "Exception ignored")


def warnings_shown(**extra: str) -> dict[str, str]:
    """The environment of a subprocess that shows every warning, with ``extra`` set."""
    env = {name: value for name, value in os.environ.items() if name != "PYTHONTRACEMALLOC"}
    env.update(PYTHONWARNINGS="default", **extra)
    return env


@pytest.mark.parametrize("how", ["aiorest run", "app.run"])
async def test_a_failing_startup_exits_1_with_one_error_line_and_leaves_nothing_open(how, tmp_path, database_url):
    create_table_world(database_url)
    (tmp_path / "failing_app.py").write_text(FAILING_APP)
    port = str(free_port())
    command = (
        ["-m", "aiorest", "run", "failing_app:app", "--port", port]
        if how == "aiorest run"
        else ["failing_app.py", port]
    )
    process = await python("-W", "default", *command, cwd=tmp_path, env=warnings_shown(DATABASE_URL=database_url))
    async with running(process), asyncio.timeout(30):
        _, stderr = await process.communicate()
    text = stderr.decode()
    assert process.returncode == 1, text
    errors = [line for line in text.splitlines() if " ERROR " in line]
    assert len(errors) == 1, text
    assert 'DuplicateTable: relation "world" already exists' in errors[0], text
    # The error's notes, in one parenthesis: where PostgreSQL refused it, then which hook raised it.
    assert "(SQLSTATE 42P07 in the statement: CREATE TABLE world" in errors[0], text
    assert "; raised in the startup hook " in errors[0] and errors[0].endswith(".create_world)"), text
    assert not [noise for noise in NOISE if noise in text], text
    await wait_for_no_backends(database_url, "failing-startup")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_a_signal_during_startup_undoes_it_and_exits_cleanly(sig, tmp_path, database_url):
    (tmp_path / "failing_app.py").write_text(FAILING_APP)
    marker = tmp_path / "starting"
    process = await python(
        *("-W", "default", "-m", "aiorest", "run", "failing_app:app", "--port", str(free_port())),
        cwd=tmp_path,
        env=warnings_shown(DATABASE_URL=database_url, STARTUP_MARKER=str(marker)),
    )
    async with running(process):
        async with asyncio.timeout(20):
            while not marker.exists():
                assert process.returncode is None
                await asyncio.sleep(0.05)
        assert backends(database_url, "failing-startup") == 3
        output = await stop(process, sig, timeout=10)
    text = output.decode()
    assert process.returncode == 0, text
    assert "stopped during startup" in text and " ERROR " not in text, text
    assert not [noise for noise in NOISE if noise in text], text
    await wait_for_no_backends(database_url, "failing-startup")


async def test_python_m_example_app_that_cannot_listen_exits_1_and_stops_its_postgresql(tmp_path):
    env = warnings_shown(TMPDIR=str(tmp_path))
    env.pop("DATABASE_URL", None)
    # initdb and the migrations first, in a run of their own: pgserver gives its first
    # `pg_ctl start` 10 s, and when that fails (a loaded machine) it logs without our format
    # and exits 1: 0 ERROR lines, the flake this test had. Then PostgreSQL starts warm.
    prepare = await python("-m", "example_app", "migrate", env=env, merge=True)
    async with running(prepare), asyncio.timeout(120):
        output, _ = await prepare.communicate()
    assert prepare.returncode == 0, output.decode()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        process = await python("-W", "default", "-m", "example_app", "--port", str(port), env=env, merge=True)
        async with running(process), asyncio.timeout(120):  # initdb, migrations and seed first
            output, _ = await process.communicate()
    text = output.decode()
    assert "database ready" in text, f"the embedded PostgreSQL did not start:\n{text}"
    assert "http://" not in text, text  # no address announced before the bind that failed
    assert process.returncode == 1, text
    errors = [line for line in text.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and "startup failed" in errors[0] and "address already in use" in errors[0], text
    assert not [noise for noise in NOISE if noise in text], text
    assert not (tmp_path / f"aiorest-pgdata-{os.getuid()}" / "postmaster.pid").exists(), "PostgreSQL was left running"


def test_timeouts_come_from_the_environment_and_must_be_positive(monkeypatch):
    from aiorest.cli import _parser

    monkeypatch.setenv("AIOREST_GRACEFUL_TIMEOUT", "12.5")
    monkeypatch.setenv("AIOREST_START_TIMEOUT", "7")
    args = _parser().parse_args(["run", "x:y"])
    assert (args.graceful_timeout, args.start_timeout) == (12.5, 7.0)
    assert _parser().parse_args(["run", "x:y", "--graceful-timeout", "3"]).graceful_timeout == 3.0  # the flag wins
    monkeypatch.setenv("AIOREST_START_TIMEOUT", "0")
    with pytest.raises(SystemExit, match="AIOREST_START_TIMEOUT=.0. is not valid: must be positive"):
        _parser()


async def test_python_m_example_app_help_is_plain_text():
    process = await python("-m", "example_app", "--help")
    async with asyncio.timeout(10):
        stdout, _ = await process.communicate()
    text = stdout.decode()
    assert process.returncode == 0 and "DATABASE_URL" in text and "port to serve on" in text
    assert "``" not in text and ":func:" not in text  # reStructuredText is for the docs


async def test_aiorest_version_and_log_level_help():
    process = await aiorest("--version")
    async with asyncio.timeout(10):
        stdout, _ = await process.communicate()
    assert process.returncode == 0 and stdout.decode() == f"aiorest {aiorest_version}\n"
    process = await aiorest("run", "--help")
    async with asyncio.timeout(10):
        stdout, _ = await process.communicate()
    help_text = " ".join(stdout.decode().split())
    assert "--log-level {debug,info,warning,error} level of the server's log (default info)" in help_text

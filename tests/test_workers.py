"""Several worker processes on one port (``aiorest run --workers N``)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def get_pid(port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/pid", timeout=2) as response:
        return int(json.loads(response.read())["pid"])


@pytest.fixture
def workers(tmp_path):
    port = free_port()
    log = (tmp_path / "workers.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "aiorest", "run", "tests.apps.pid_app:app", "--port", str(port), "--workers", "2"],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 15
    while True:
        try:
            get_pid(port)
            break
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                process.wait()
                log.close()
                raise AssertionError(f"workers did not start: {(tmp_path / 'workers.log').read_text()}") from None
            time.sleep(0.1)
    yield process, port
    if process.poll() is None:
        process.terminate()  # graceful: the parent stops its workers
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    log.close()


def test_two_workers_share_the_port_and_stop_on_sigterm(workers):
    process, port = workers
    pids = {get_pid(port) for _ in range(60)}
    assert len(pids) == 2 and process.pid not in pids
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=10) == 0
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_a_dead_worker_is_replaced(workers):
    process, port = workers
    pids = {get_pid(port) for _ in range(60)}
    victim = pids.pop()
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            seen = {get_pid(port) for _ in range(30)}
        except OSError:  # a connection the kernel handed to the dying worker
            continue
        if len(seen) == 2 and victim not in seen:
            break
        time.sleep(0.2)
    else:
        raise AssertionError("the killed worker was not replaced")


def test_workers_die_with_a_killed_parent(workers):
    process, port = workers
    pids = {get_pid(port) for _ in range(60)}
    process.kill()  # SIGKILL: the parent cannot forward anything
    process.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        time.sleep(0.1)
    assert not any(_alive(pid) for pid in pids), "workers outlived their parent"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] != "Z"


ONE_WORKER_FAILS = '''
"""The first worker to start fails in its startup hook; the others start. Each logs its lifespan to a file."""
import contextlib
import os
from pathlib import Path

from aiorest import App

EVENTS = Path(os.environ["EVENTS"])


@contextlib.asynccontextmanager
async def lifespan(app):
    with EVENTS.open("a") as events:
        events.write(f"enter {os.getpid()}\\n")
    try:
        yield
    finally:
        with EVENTS.open("a") as events:
            events.write(f"exit {os.getpid()}\\n")


async def maybe_fail(app):
    try:
        os.close(os.open(os.environ["CHOSEN"], os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return
    raise RuntimeError("this worker was chosen to fail")


app = App(lifespan=lifespan, on_startup=[maybe_fail])
'''


def test_a_worker_that_fails_to_start_stops_the_others_and_the_parent_exits_1(tmp_path):
    (tmp_path / "one_fails.py").write_text(ONE_WORKER_FAILS)
    events = tmp_path / "events"
    env = {name: value for name, value in os.environ.items() if name != "PYTHONTRACEMALLOC"}
    env.update(PYTHONWARNINGS="default", EVENTS=str(events), CHOSEN=str(tmp_path / "chosen"))
    command = [sys.executable, "-m", "aiorest", "run", "one_fails:app", "--port", str(free_port()), "--workers", "3"]
    process = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        _, stderr = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    text = stderr.decode()
    assert process.returncode == 1, text
    errors = [line for line in text.splitlines() if " ERROR " in line]
    assert len(errors) == 2, text
    assert (
        "RuntimeError: this worker was chosen to fail" in errors[0] and "startup hook one_fails.maybe_fail" in errors[0]
    )
    assert "failed to start" in errors[1], text
    assert "Traceback" not in text and "Unclosed" not in text, text
    events_seen = [line.split() for line in events.read_text().splitlines()]
    entered = [pid for what, pid in events_seen if what == "enter"]
    exited = [pid for what, pid in events_seen if what == "exit"]
    # No worker was started again, and every worker that entered its lifespan left it (one
    # stopped by the parent before it got that far enters nothing).
    assert 1 <= len(entered) <= 3 and sorted(entered) == sorted(exited), events_seen

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

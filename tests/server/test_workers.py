"""Several worker processes on one port (``aiorest run --workers N``)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from harness.ports import free_port
from harness.processes import AiorestProcess

ROOT = Path(__file__).resolve().parents[2]


def get_pid(port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/pid", timeout=2) as response:
        return int(json.loads(response.read())["pid"])


@pytest.fixture
def workers(tmp_path):
    with AiorestProcess("tests.apps.pid_app:app", "--workers", "2", ready_path="/pid") as server:
        yield server.process, server.port


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
"""The second worker to start fails in its startup hook; the others start. Each logs its lifespan to a file."""
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
    """The first worker to get here (worker 0, which starts alone) passes, the second fails, the others pass."""
    for marker in ("FIRST", "CHOSEN"):
        try:
            os.close(os.open(os.environ[marker], os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            continue
        if marker == "CHOSEN":
            raise RuntimeError("this worker was chosen to fail")
        return


app = App(lifespan=lifespan, on_startup=[maybe_fail])
'''


def test_a_worker_that_fails_to_start_stops_the_others_and_the_parent_exits_1(tmp_path):
    (tmp_path / "one_fails.py").write_text(ONE_WORKER_FAILS)
    events = tmp_path / "events"
    env = {name: value for name, value in os.environ.items() if name != "PYTHONTRACEMALLOC"}
    env.update(
        PYTHONWARNINGS="default", EVENTS=str(events), FIRST=str(tmp_path / "first"), CHOSEN=str(tmp_path / "chosen")
    )
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
    # One line, from the parent, with the reason the worker sent it.
    assert len(errors) == 1, text
    assert re.search(
        r"worker [12] \(pid \d+\) failed to start: RuntimeError: this worker was chosen to fail "
        r"\(raised in the startup hook one_fails.maybe_fail\): stopping the workers$",
        errors[0],
    ), text
    assert "Traceback" not in text and "Unclosed" not in text, text
    events_seen = [line.split() for line in events.read_text().splitlines()]
    entered = [pid for what, pid in events_seen if what == "enter"]
    exited = [pid for what, pid in events_seen if what == "exit"]
    # No worker was started again, and every worker that entered its lifespan left it (one
    # stopped by the parent before it got that far enters nothing).
    assert 2 <= len(entered) <= 3 and sorted(entered) == sorted(exited), events_seen


# -- the parent binds, the workers import -----------------------------------------------------

SLOW_APP = """
import asyncio
import os

from aiorest import App

app = App()


@app.get("/pid")
async def pid(request):
    env = os.environ
    return {"pid": os.getpid(), "workers": request.app.state.worker_processes, "listen_fds": env.get("LISTEN_FDS")}


@app.get("/slow")
async def slow(request):
    await asyncio.sleep(float(request.query["s"]))
    return {"pid": os.getpid()}
"""


def slow_app(tmp_path: Path, *args: str, unix: str | None = None) -> AiorestProcess:
    (tmp_path / "slow_app.py").write_text(SLOW_APP)
    return AiorestProcess("slow_app:app", *args, unix=unix, cwd=tmp_path, ready_path="/pid")


def test_an_app_that_cannot_be_imported_is_reported_once_and_the_parent_exits_1(tmp_path):
    server = AiorestProcess("nomodule:app", "--workers", "2", cwd=tmp_path)
    with pytest.raises(RuntimeError, match="exited with 1"):
        server.start(timeout=20)
    log = server.log()
    errors = [line for line in log.splitlines() if " ERROR " in line]
    assert len(errors) == 1, log
    assert (
        "worker 0 (pid" in errors[0] and "failed to start: cannot import 'nomodule': ModuleNotFoundError" in errors[0]
    )
    assert "worker 1" not in log and "Traceback" not in log, log


def test_the_parent_checks_the_app_spec_without_importing_it(tmp_path):
    # The module would print if imported: the parent must not, and a bad spec stops it before any fork.
    (tmp_path / "noisy.py").write_text("print('imported')\nfrom aiorest import App\napp = App()\n")
    result = subprocess.run(
        [sys.executable, "-m", "aiorest", "run", "noisy", "--workers", "2", "--port", str(free_port())],
        cwd=tmp_path,
        capture_output=True,
        timeout=10,
    )
    assert result.returncode == 1 and b"expected MODULE:APP" in result.stderr and b"imported" not in result.stdout


def test_workers_serve_a_unix_socket_and_know_their_count(tmp_path):
    path = str(tmp_path / "aiorest.sock")
    with slow_app(tmp_path, "--workers", "2", unix=path) as server:
        answers = [json.loads(server.get("/pid")[1]) for _ in range(40)]
        # One socket, one queue: whichever worker is first takes a connection (not always both, one at a time).
        assert {answer["pid"] for answer in answers} <= server.worker_pids()
        assert len(server.worker_pids()) == 2
        assert {answer["workers"] for answer in answers} == {2}
        assert oct(os.stat(path).st_mode & 0o777) == "0o666"
        assert server.stop() == 0
    assert not os.path.exists(path)


def test_a_second_parent_on_a_served_unix_socket_exits_1_and_leaves_it_to_the_first(tmp_path):
    path = str(tmp_path / "aiorest.sock")
    with slow_app(tmp_path, "--workers", "1", unix=path) as first:
        command = [sys.executable, "-m", "aiorest", "run", "slow_app:app", "--workers", "1", "--unix", path]
        second = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=10)
        assert second.returncode == 1, second.stderr
        assert f"cannot listen on unix:{path}: [Errno 98] a server listens on {path} already" in second.stderr
        assert json.loads(first.get("/pid")[1])["pid"] in first.worker_pids()
    assert not os.path.exists(path)


# -- SIGTERM: every request already received is answered -----------------------------------------


def _send(port: int, path: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    return sock


def _answer(sock: socket.socket) -> bytes:
    """Read one response (a small JSON body whose length the head gives)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed after {data!r}")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(re.search(rb"Content-Length: (\d+)", head).group(1))
    while len(body) < length:
        body += sock.recv(65536)
    return head


def test_sigterm_answers_the_slow_requests_in_flight_on_every_worker_and_exits_in_time(tmp_path):
    with slow_app(tmp_path, "--workers", "2", "--graceful-timeout", "30") as server:
        idle = _send(server.port, "/pid")
        assert _answer(idle).startswith(b"HTTP/1.1 200")  # kept alive, idle
        slow = [_send(server.port, "/slow?s=1.5") for _ in range(8)]
        time.sleep(0.5)  # all in their handlers
        began = time.monotonic()
        server.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        idle.sendall(b"GET /pid HTTP/1.1\r\nHost: x\r\n\r\n")  # on a connection idle when the signal came
        heads = [_answer(sock) for sock in [idle, *slow]]
        assert all(head.startswith(b"HTTP/1.1 200") and b"Connection: close" in head for head in heads), heads
        assert server.process.wait(40) == 0
        took = time.monotonic() - began
        for sock in [idle, *slow]:
            assert sock.recv(1) == b""  # closed once answered
            sock.close()
    # The slow requests need 1 s more; idle connections are kept 2 s. A breakage guard, generous
    # for a busy host: the server exits once they are answered, not at the end of its 30 s grace.
    assert took < 15, took
    assert " ERROR " not in server.log(), server.log()


def test_sigterm_with_a_request_longer_than_the_grace_period_exits_in_time(tmp_path):
    with slow_app(tmp_path, "--workers", "2", "--graceful-timeout", "1") as server:
        stuck = _send(server.port, "/slow?s=30")
        time.sleep(0.3)
        began = time.monotonic()
        assert server.stop(timeout=10) == 0
        took = time.monotonic() - began
        with pytest.raises(ConnectionError):
            _answer(stuck)
        stuck.close()
    # A breakage guard, generous for a busy host: the workers stop at the 1 s grace, not at the
    # parent's SIGKILL (grace + 10 s) nor at the end of the 30 s request.
    assert took < 8, took


async def test_stop_answers_the_connections_waiting_in_the_listen_backlog():
    # Connected and sent before the server took them (the loop did not run between):
    # closing the listening socket would reset them.
    from aiorest import App, Server

    app = App()

    @app.get("/")
    async def index(request):
        return {"ok": True}

    server = Server(app, host="127.0.0.1", port=0)
    await server.start()
    waiting = [_send(server.port, "/") for _ in range(5)]
    await server.stop(timeout=5)
    for sock in waiting:
        sock.settimeout(5)
        head = _answer(sock)
        assert head.startswith(b"HTTP/1.1 200") and b"Connection: close" in head
        sock.close()


# -- a signal right after a fork ----------------------------------------------------------------------

# A worker that is slow to get going after its fork (a loaded machine): 1 s before any of its code runs.
SLOW_FORK = (
    "import os, sys, time; os.register_at_fork(after_in_child=lambda: time.sleep(1));"
    " from aiorest.cli import main; main(sys.argv[3:])"
)


def test_sigterm_right_after_a_worker_is_forked_stops_it_at_once(tmp_path):
    # SIGTERM during a reload, while the new worker is not yet its own: the parent's
    # handler, still in place in the child, must not swallow the parent's SIGTERM.
    (tmp_path / "slow_app.py").write_text(SLOW_APP)
    server = AiorestProcess(
        "slow_app:app",
        *("--workers", "1", "--graceful-timeout", "1"),
        cwd=tmp_path,
        ready_path="/pid",
        python=("-c", SLOW_FORK),
    )
    with server:
        server.send_signal(signal.SIGHUP)
        server.wait_for_log("starting", count=2)  # the new worker is forked, asleep
        began = time.monotonic()
        assert server.stop(timeout=20) == 0
        took = time.monotonic() - began
        log = server.log()
    # Not left serving until the parent's SIGKILL (--graceful-timeout + 10 s = 11 s); a breakage
    # guard, generous for a busy host.
    assert took < 9, log
    assert " ERROR " not in log and "SIGKILL" not in log, log


def test_a_worker_that_keeps_dying_is_restarted_later_each_time():
    with AiorestProcess("tests.apps.pid_app:app", "--workers", "1", ready_path="/pid") as server:
        for death in range(1, 4):
            victim = json.loads(server.get("/pid")[1])["pid"]
            os.kill(victim, signal.SIGKILL)
            # its successor serves, as the parent knows (a worker serves a moment before it says so)
            server.wait_for_log(") serves", count=death)
        log = server.log()
        assert "worker 0 restarts in 0.5 s (2 deaths within a minute)" in log, log
        assert "worker 0 restarts in 1 s (3 deaths within a minute)" in log, log
        assert log.count("worker 0 restarts in") == 2  # the first death: at once
        assert server.stop() == 0

"""Serving a socket aiorest inherits: ``--fd N``, and systemd's socket activation (``LISTEN_FDS``)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys

import pytest

from harness.processes import AiorestProcess
from tests.server.test_workers import SLOW_APP

# What systemd does before it runs the service: the socket as fd 3, LISTEN_FDS and, once the
# process exists, LISTEN_PID set to its pid (exec keeps the pid).
AS_SYSTEMD = (
    "import os, sys; fd = int(sys.argv[1]); os.dup2(fd, 3); os.close(fd);"
    " os.environ.update(LISTEN_FDS='1', LISTEN_PID=os.environ.get('LISTEN_PID') or str(os.getpid()));"
    " os.execv(sys.executable, [sys.executable, *sys.argv[2:]])"
)


def listening(kind: str, tmp_path) -> socket.socket:
    if kind == "tcp":
        sock = socket.create_server(("127.0.0.1", 0))
    else:
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(tmp_path / "activated.sock"))
        sock.listen()
    sock.set_inheritable(True)
    return sock


def where(sock: socket.socket) -> dict[str, object]:
    """The AiorestProcess arguments that make its requests reach ``sock``."""
    if sock.family == socket.AF_UNIX:
        return {"unix": sock.getsockname()}
    return {"port": sock.getsockname()[1]}


@pytest.mark.parametrize("workers", [(), ("--workers", "2")], ids=["one process", "two workers"])
@pytest.mark.parametrize("kind", ["tcp", "unix"])
def test_socket_activation_serves_the_socket_systemd_passed(tmp_path, kind, workers):
    (tmp_path / "slow_app.py").write_text(SLOW_APP)
    with listening(kind, tmp_path) as sock:
        # --port / --unix name the socket aiorest is given: binding it again would fail.
        server = AiorestProcess(
            "slow_app:app",
            *workers,
            **where(sock),
            cwd=tmp_path,
            ready_path="/pid",
            python=("-c", AS_SYSTEMD, str(sock.fileno())),
            pass_fds=[sock.fileno()],
        )
        with server:
            answers = [json.loads(server.get("/pid")[1]) for _ in range(10)]
            # Not passed on: a process the app starts must not take the socket for its own.
            assert {answer["listen_fds"] for answer in answers} == {None}
            if workers:
                assert {answer["pid"] for answer in answers} <= server.worker_pids()
                assert {answer["workers"] for answer in answers} == {2}
            else:
                assert {answer["pid"] for answer in answers} == {server.pid}
            assert server.stop() == 0
        log = server.log()
        assert "Traceback" not in log and " ERROR " not in log, log
        if kind == "unix":
            assert os.path.exists(sock.getsockname()), "the socket systemd owns was removed"
        # The socket outlives the service, as systemd's does: connections wait in its queue.
        with socket.socket(sock.family) as client:
            client.connect(sock.getsockname())


def test_listen_fds_for_another_process_is_ignored_and_unset(tmp_path):
    (tmp_path / "slow_app.py").write_text(SLOW_APP)
    with listening("tcp", tmp_path) as sock:
        env = {**os.environ, "LISTEN_PID": "1"}  # not aiorest: it binds its own port
        server = AiorestProcess(
            "slow_app:app",
            "--workers",
            "2",
            cwd=tmp_path,
            env=env,
            ready_path="/pid",
            python=("-c", AS_SYSTEMD, str(sock.fileno())),
            pass_fds=[sock.fileno()],
        )
        with server:
            assert server.port != sock.getsockname()[1]
            assert json.loads(server.get("/pid")[1])["listen_fds"] is None


@pytest.mark.parametrize("workers", [(), ("--workers", "2")], ids=["one process", "two workers"])
def test_fd_serves_an_inherited_socket(tmp_path, workers):
    (tmp_path / "slow_app.py").write_text(SLOW_APP)
    with listening("tcp", tmp_path) as sock:
        fd = str(sock.fileno())
        server = AiorestProcess(
            "slow_app:app",
            "--fd",
            fd,
            *workers,
            **where(sock),
            cwd=tmp_path,
            ready_path="/pid",
            pass_fds=[sock.fileno()],
        )
        with server:
            assert json.loads(server.get("/pid")[1])["pid"] in {server.pid} | server.worker_pids()
            assert server.stop() == 0


def test_fd_that_is_not_a_listening_socket_is_refused(tmp_path):
    with open(tmp_path / "file", "w") as file:
        fd = file.fileno()
        command = [sys.executable, "-m", "aiorest", "run", "x:app", "--fd", str(fd), "--port", "1"]
        result = subprocess.run(command, capture_output=True, pass_fds=[fd], timeout=10)
    assert result.returncode == 1
    assert f"fd {fd} is not a socket" in result.stderr.decode(), result.stderr
    with socket.socket() as unbound:
        command[command.index("--fd") + 1] = str(unbound.fileno())
        result = subprocess.run(command, capture_output=True, pass_fds=[unbound.fileno()], timeout=10)
    assert result.returncode == 1
    assert "is not a listening stream socket" in result.stderr.decode(), result.stderr


def test_the_parent_tells_systemd_it_is_ready_reloading_and_stopping(tmp_path):
    # Type=notify: systemd reads datagrams on $NOTIFY_SOCKET; only the parent speaks (NotifyAccess=main).
    (tmp_path / "slow_app.py").write_text(SLOW_APP)
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as notify:
        notify.bind(str(tmp_path / "notify"))
        notify.settimeout(20)
        env = {**os.environ, "NOTIFY_SOCKET": str(tmp_path / "notify")}
        with AiorestProcess("slow_app:app", "--workers", "2", cwd=tmp_path, env=env, ready_path="/pid") as server:
            assert notify.recv(4096).decode() == "READY=1\nSTATUS=2 workers serving"
            assert json.loads(server.get("/pid")[1])["pid"] in server.worker_pids()
            server.send_signal(signal.SIGHUP)
            assert notify.recv(4096).decode().startswith("RELOADING=1\nMONOTONIC_USEC=")
            assert notify.recv(4096).decode() == "READY=1\nSTATUS=2 workers serving"
            assert server.stop() == 0
            assert notify.recv(4096).decode() == "STOPPING=1"
        with pytest.raises(TimeoutError):  # nothing else: not from the workers either
            notify.settimeout(0.3)
            notify.recv(4096)

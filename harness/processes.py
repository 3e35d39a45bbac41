"""Servers as subprocesses: start one, wait until it serves, signal it, stop it.

``AiorestProcess`` is ``aiorest run``, for the tests and load scenarios that need
real aiorest processes (reloads, drains, upstreams behind nginx)::

    with AiorestProcess("myapp:app", "--workers", "2", cwd=app_dir) as upstream:
        ... upstream.url ...                 # http://127.0.0.1:<free port>
        upstream.send_signal(signal.SIGHUP)
        upstream.wait_for_log("reload done")
    # stopped (SIGTERM, then SIGKILL if it hangs), even when the block raised

Its output goes to a log file (``log_path``, or one in a temporary folder
removed with the object, at the latest at exit); ``log()`` reads it. The process runs in a new session of its own, so a
terminal's signals do not reach it, and ``stop()`` or ``kill()`` end it by pid.

``ServerProcess`` is any server command (aiorest, a baseline, a peer framework),
pinned to a CPU, for measurements: ``bench/`` and ``python -m load compare``.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from harness.ports import free_port

ROOT = Path(__file__).resolve().parent.parent

__all__ = ["AiorestProcess", "ServerError", "ServerProcess", "children_of", "descendants", "http_get", "stop_process"]


def stop_process(process: subprocess.Popen[Any], timeout: float, sig: int = signal.SIGTERM) -> int:
    """Send ``sig`` (unless it has exited), wait ``timeout`` s, then SIGKILL it; its exit status."""
    if process.poll() is None:
        process.send_signal(sig)
    try:
        return process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait()


def _parents() -> dict[int, int]:
    """Every live process's parent, zombies excepted, read from /proc."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            parents[int(entry.name)] = int(fields[1])
    return parents


def children_of(pid: int) -> set[int]:
    """The pids of the processes whose parent is ``pid``, zombies excepted."""
    return {child for child, parent in _parents().items() if parent == pid}


def descendants(pid: int) -> list[int]:
    """Every live process whose parent chain leads to ``pid``."""
    parents = _parents()
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        children = [child for child, ppid in parents.items() if ppid == parent]
        found += children
        frontier += children
    return found


def http_get(
    port: int | None, path: str = "/", *, unix: str | None = None, timeout: float = 2.0, host: str = "127.0.0.1"
) -> tuple[int, bytes]:
    """One ``GET path`` on a new connection (TCP on host:port, or the unix socket): (status, body)."""
    family = socket.AF_UNIX if unix else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(unix or (host, port))
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 "):
        raise ConnectionError(f"not an HTTP response: {data[:80]!r}")
    return int(head.split(b" ", 2)[1]), body


class AiorestProcess:
    """``python -m aiorest run APP [args]`` in a subprocess, on ``port`` (a free one by default) or ``unix``.

    ``ready_path`` is requested until it is answered (any status) to tell that
    the server serves: with ``--workers`` the parent listens before a worker
    does, so a connection that succeeds proves nothing.

    ``host`` is the address it binds (``--host``) and is reached at; ``prefix`` goes
    before the command, e.g. ``ip netns exec NS`` to run it in a network namespace
    (a prefix that execs the command, so that ``pid`` is still aiorest's).
    """

    def __init__(
        self,
        app: str,
        *args: str,
        port: int | None = None,
        unix: str | None = None,
        cwd: str | Path = ROOT,
        env: Mapping[str, str] | None = None,
        log_path: str | Path | None = None,
        ready_path: str = "/",
        pass_fds: Sequence[int] = (),
        python: Sequence[str] = (),
        host: str = "127.0.0.1",
        prefix: Sequence[str] = (),
    ) -> None:
        self.unix = unix
        self.host = host
        self.port = None if unix else (port or free_port())
        where = ["--unix", unix] if unix else ["--port", str(self.port)]
        if host != "127.0.0.1" and not unix:
            where += ["--host", host]
        self.command = [*prefix, sys.executable, *python, "-m", "aiorest", "run", app, *where, *args]
        self.cwd = Path(cwd)
        self.env = dict(os.environ if env is None else env)
        self.env.setdefault("PYTHONPATH", str(ROOT))
        if log_path:
            self.log_path = Path(log_path)
        else:
            folder = tempfile.mkdtemp(prefix="aiorest-proc-")
            self.log_path = Path(folder) / "aiorest.log"
            weakref.finalize(self, shutil.rmtree, folder, ignore_errors=True)  # log() reads it until then
        self.ready_path = ready_path
        self.pass_fds = tuple(pass_fds)
        self.process: subprocess.Popen[bytes] | None = None
        self._workers = int(args[args.index("--workers") + 1]) if "--workers" in args else 0
        self._info_logged = not ({"warning", "error"} & set(args))

    @property
    def url(self) -> str:
        """``http://HOST:<port>``, or ``http+unix://<percent-encoded path>`` (harness.steady's form)."""
        if self.unix:
            from urllib.parse import quote

            return "http+unix://" + quote(self.unix, safe="")
        return f"http://{self.host}:{self.port}"

    @property
    def upstream(self) -> str:
        """This process as an nginx upstream server: ``HOST:PORT`` or ``unix:PATH``."""
        return f"unix:{self.unix}" if self.unix else f"{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        assert self.process is not None, "not started"
        return self.process.pid

    def start(self, timeout: float = 20.0) -> AiorestProcess:
        """Start the process and wait until ``ready_path`` is answered; raise, with the log, if it is not."""
        self.launch()
        try:
            self.wait_serving(timeout)
        except BaseException:
            self.kill()  # no process left behind: __exit__ does not run when __enter__ raised
            raise
        return self

    def launch(self) -> subprocess.Popen[bytes]:
        """Start the process without waiting (several at once: ``wait_serving`` each after)."""
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.command,
                cwd=self.cwd,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=self.pass_fds,
                start_new_session=True,
            )
        return self.process

    def wait_serving(self, timeout: float = 20.0) -> None:
        """Wait until ``ready_path`` is answered, and with ``--workers`` until every worker serves.

        That is logged at level INFO; with ``--log-level warning`` or ``error``, this waits only
        until every worker exists (the last one started may not serve yet).
        """
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.get(self.ready_path)
                if self._workers:  # one serves: all do once the parent says so (or, unsaid, once all exist)
                    if self._info_logged:
                        self.wait_for_log("workers serving", timeout=deadline - time.monotonic())
                    elif len(self.worker_pids()) < self._workers:
                        raise ConnectionError("not all workers are there yet")
                return
            except OSError:
                if self.returncode is not None:
                    raise RuntimeError(f"aiorest exited with {self.returncode}:\n{self.log()}") from None
                if time.monotonic() > deadline:
                    raise RuntimeError(f"aiorest did not serve within {timeout} s:\n{self.log()}") from None
                time.sleep(0.05)

    def get(self, path: str = "/", timeout: float = 2.0) -> tuple[int, bytes]:
        """One ``GET path`` on a new connection: (status, body)."""
        return http_get(self.port, path, unix=self.unix, timeout=timeout, host=self.host)

    @property
    def returncode(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def send_signal(self, signum: int) -> None:
        """Send ``signum`` to the aiorest process (the parent, with ``--workers``)."""
        if self.returncode is None:
            os.kill(self.pid, signum)

    def worker_pids(self) -> set[int]:
        """The pids of the processes whose parent is this one (its workers), zombies excepted."""
        return children_of(self.pid)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def wait_for_log(self, text: str, *, count: int = 1, timeout: float = 20.0) -> str:
        """Wait until ``text`` occurs ``count`` times in the log; return the log."""
        deadline = time.monotonic() + timeout
        while (log := self.log()).count(text) < count:
            if self.returncode is not None or time.monotonic() > deadline:
                raise AssertionError(f"{text!r} not logged {count} time(s):\n{log}")
            time.sleep(0.05)
        return log

    def stop(self, signum: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        """Send ``signum`` (SIGTERM: a graceful stop) and wait for the exit; SIGKILL past ``timeout``."""
        if self.process is None:
            return 0
        self.send_signal(signum)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def kill(self) -> None:
        """SIGKILL the process (its workers follow: they get SIGTERM when their parent dies)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def __enter__(self) -> AiorestProcess:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if self.returncode is None:
            try:
                self.stop(timeout=15)
            except subprocess.TimeoutExpired:
                pass


class ServerError(RuntimeError):
    """A server did not start, or died."""


class ServerProcess:
    """``command`` with ``{port}`` filled in, pinned to ``cpu``; ``stop`` releases everything."""

    def __init__(
        self, name: str, command: list[str], env: dict[str, str], cpu: int | None = 0, cwd: Path = ROOT
    ) -> None:
        self.name = name
        self.port = free_port()
        command = [part.replace("{port}", str(self.port)) for part in command]
        if cpu is not None and shutil.which("taskset"):
            command = ["taskset", "-c", str(cpu), *command]
        self._log = tempfile.TemporaryFile(mode="w+")
        self.process = subprocess.Popen(command, cwd=cwd, env=env, stdout=self._log, stderr=subprocess.STDOUT)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        self._log.seek(0)
        return self._log.read()[-4000:]

    def wait_ready(self, path: str, timeout: float = 60.0) -> None:
        """Poll ``path`` until it answers 200; ServerError if the process dies or time runs out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServerError(f"{self.name} exited with {self.process.returncode}:\n{self.output()}")
            try:
                with urllib.request.urlopen(f"{self.url}{path}", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                time.sleep(0.1)
        output = self.output()  # before stop, which closes the log
        self.stop()
        raise ServerError(f"{self.name} did not answer {path} within {timeout:.0f} s:\n{output}")

    def stop(self) -> None:
        """SIGTERM (a graceful stop), then SIGKILL after 20 s."""
        stop_process(self.process, 20)
        self._log.close()

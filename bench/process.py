"""A server under test, as a subprocess: started pinned to a CPU, awaited, stopped."""

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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


class ServerError(RuntimeError):
    """A server did not start, or died."""


def postgres_pids() -> list[int]:
    """This machine's PostgreSQL processes: the postmaster, its helpers and backends."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() in ("postgres", "postmaster"):
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


@contextmanager
def postgres_pinned(cpu: int) -> Iterator[None]:
    """Pin this machine's PostgreSQL to ``cpu`` (with the load generator), off the server's core.

    Unpinned, a backend woken by the server's query often runs on the server's
    core and preempts it: measured on /db at 1,000 connections, a third of the
    server's samples sat in the send() that woke it. New backends inherit the
    postmaster's CPU set. If nothing can be pinned (not root, or no local
    PostgreSQL) it says so on stderr and the run goes on; every process is
    given all CPUs back afterwards.
    """
    pinned = []
    for pid in postgres_pids():
        try:
            os.sched_setaffinity(pid, {cpu})
        except OSError:
            continue
        pinned.append(pid)
    if not pinned:
        print(f"cannot pin PostgreSQL to CPU {cpu} (needs root): it may share the server's core", file=sys.stderr)
    try:
        yield
    finally:
        everywhere = set(range(os.cpu_count() or 1))
        for pid in postgres_pids():  # backends started meanwhile included
            try:
                os.sched_setaffinity(pid, everywhere)
            except OSError:
                continue


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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
        self.stop()
        raise ServerError(f"{self.name} did not answer {path} within {timeout:.0f} s:\n{self.output()}")

    def stop(self) -> None:
        """SIGTERM (a graceful stop), then SIGKILL after 20 s."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()


def redis_answers(port: int) -> bool:
    """Whether a Redis on 127.0.0.1:port answers PING."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """A ``redis-server`` of one's own on 127.0.0.1 and a free port, without persistence.

    ``stop()`` and ``start()`` keep the port, so a client sees the same Redis go and
    come back (empty). A context manager: started on entry, stopped on exit.
    """

    def __init__(self) -> None:
        if shutil.which("redis-server") is None:
            raise ServerError("redis-server is not installed (Debian package redis-server)")
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        command = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
        for _ in range(100):
            if redis_answers(self.port):
                return self
            time.sleep(0.05)
        self.stop()
        raise ServerError(f"redis-server did not answer on port {self.port}")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)
            self.process = None

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

"""A ``redis-server`` of one's own, on 127.0.0.1 and a free port, for tests and benchmarks.

The machine's Redis (6379) is shared: a test that stops Redis stops only one it started.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time

from harness.ports import free_port
from harness.processes import ServerError


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

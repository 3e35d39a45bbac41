"""A server under test, as a subprocess: started pinned to a CPU, awaited, stopped."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


class ServerError(RuntimeError):
    """A server did not start, or died."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServerProcess:
    """``command`` with ``{port}`` filled in, pinned to ``cpu``; ``stop`` releases everything."""

    def __init__(self, name: str, command: list[str], env: dict[str, str], cpu: int | None = 0) -> None:
        self.name = name
        self.port = free_port()
        command = [part.replace("{port}", str(self.port)) for part in command]
        if cpu is not None and shutil.which("taskset"):
            command = ["taskset", "-c", str(cpu), *command]
        self._log = tempfile.TemporaryFile(mode="w+")
        self.process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT)

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

"""The servers a load run compares, started fresh for each round."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Target:
    name: str
    command: list[str]  # "{port}" and "{pool}" are filled in


TARGETS = {
    "aiorest": Target(
        "aiorest",
        [
            sys.executable,
            "-m",
            "aiorest",
            "run",
            "example_app:app",
            "--port",
            "{port}",
            "--log-level",
            "warning",
            "--backlog",
            "16384",
        ],
    ),
    "threaded": Target(
        "threaded",
        [
            sys.executable,
            "-m",
            "load.baseline.flask_app",
            "--port",
            "{port}",
            "--threads",
            "{pool}",
            "--pool",
            "{pool}",
        ],
    ),
    "stdlib": Target(
        "stdlib", [sys.executable, "-m", "load.baseline.stdlib_app", "--port", "{port}", "--pool", "{pool}"]
    ),
}


class ServerError(RuntimeError):
    """A server did not start, or died."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class RunningServer:
    """One target's process, pinned to CPU 0; ``stop`` releases everything."""

    def __init__(self, target: Target, dsn: str, pool: int, cpu: int | None = 0) -> None:
        self.target = target
        self.port = free_port()
        self.lag_file: Path | None = None
        command = [part.replace("{port}", str(self.port)).replace("{pool}", str(pool)) for part in target.command]
        if target.name == "aiorest":
            self.lag_file = Path(tempfile.mkstemp(prefix="aiorest-lag-", suffix=".json")[1])
            command += ["--loop-lag-report", str(self.lag_file)]
        if cpu is not None:
            command = ["taskset", "-c", str(cpu), *command]
        env = {**os.environ, "DATABASE_URL": dsn, "DATABASE_POOL_MIN": str(pool), "DATABASE_POOL_MAX": str(pool)}
        self._log = tempfile.TemporaryFile(mode="w+")
        self.process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        self._log.seek(0)
        return self._log.read()[-4000:]

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServerError(f"{self.target.name} exited with {self.process.returncode}:\n{self.output()}")
            try:
                with urllib.request.urlopen(f"{self.url}/db", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        raise ServerError(f"{self.target.name} did not answer /db within {timeout:.0f} s:\n{self.output()}")

    def stop(self) -> dict[str, float] | None:
        """Stop the server; returns aiorest's event-loop lag report, if any."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
        if self.lag_file is None:
            return None
        try:
            import json

            return dict(json.loads(self.lag_file.read_text() or "null") or {})
        except (OSError, ValueError):
            return None
        finally:
            self.lag_file.unlink(missing_ok=True)

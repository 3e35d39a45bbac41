"""The servers a load run compares, started fresh for each round."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from harness.processes import ServerError, ServerProcess

__all__ = ["TARGETS", "Target", "RunningServer", "ServerError"]


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


class RunningServer(ServerProcess):
    """One target, pinned to CPU 0, on ``dsn`` with a pool of ``pool``; aiorest also reports its loop lag."""

    def __init__(self, target: Target, dsn: str, pool: int, cpu: int | None = 0) -> None:
        command = [part.replace("{pool}", str(pool)) for part in target.command]
        self.lag_file: Path | None = None
        if target.name == "aiorest":
            self.lag_file = Path(tempfile.mkstemp(prefix="aiorest-lag-", suffix=".json")[1])
            command += ["--loop-lag-report", str(self.lag_file)]
        env = {**os.environ, "DATABASE_URL": dsn, "DATABASE_POOL_MIN": str(pool), "DATABASE_POOL_MAX": str(pool)}
        super().__init__(target.name, command, env, cpu)

    def stop_and_report(self) -> dict[str, float] | None:
        """Stop the server; returns aiorest's event-loop lag report, if any."""
        self.stop()
        if self.lag_file is None:
            return None
        try:
            report = json.loads(self.lag_file.read_text() or "null")
        except (OSError, ValueError):
            return None
        finally:
            self.lag_file.unlink(missing_ok=True)
        return dict(report) if report else None

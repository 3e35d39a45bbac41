"""Event-loop lag: how late a periodic timer fires, the cost of scheduling under load."""

from __future__ import annotations

import asyncio
import json
import statistics
from collections import deque
from collections.abc import Callable
from pathlib import Path

__all__ = ["LoopLagMonitor"]


class LoopLagMonitor:
    """A timer every ``interval`` seconds that records how late it fires.

    Keeps the last ``max_samples`` samples (a bounded deque), enough for
    percentiles over a load run of many minutes at the default interval.
    ``on_sample`` is also called with each one (in seconds): the metrics observe it.
    """

    def __init__(
        self, interval: float = 0.01, max_samples: int = 100_000, on_sample: Callable[[float], None] | None = None
    ) -> None:
        self.interval = interval
        self.on_sample = on_sample
        self.samples: deque[float] = deque(maxlen=max_samples)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._expected = 0.0

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._expected = loop.time() + self.interval
        self._handle = loop.call_at(self._expected, self._fire)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _fire(self) -> None:
        assert self._loop is not None
        now = self._loop.time()
        lag = max(0.0, now - self._expected)
        self.samples.append(lag)
        if self.on_sample is not None:
            self.on_sample(lag)
        self._expected = now + self.interval
        self._handle = self._loop.call_at(self._expected, self._fire)

    def report(self) -> dict[str, float]:
        """Lateness in milliseconds: p50, p99, max, and the sample count."""
        if not self.samples:
            return {"count": 0, "p50_ms": 0.0, "p99_ms": 0.0, "max_ms": 0.0}
        ordered = sorted(self.samples)
        return {
            "count": len(ordered),
            "p50_ms": statistics.median(ordered) * 1000,
            "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000,
            "max_ms": ordered[-1] * 1000,
        }

    def write(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.report()))

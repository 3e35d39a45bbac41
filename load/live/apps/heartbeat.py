"""What every live server shares: the broadcast payload, the loop-lag heartbeat, the figures of ``GET /stats``.

Each server serves ``/ws`` (registers for the broadcast and echoes what it receives), ``/sse`` (an
event stream registered for the broadcast, a comment first so that its head goes out at once),
``POST /broadcast`` (one message, ``time.time_ns()`` as text, to every registered client) and
``GET /stats`` (registered clients, RSS, and the loop's lag since the last broadcast began).
Stdlib only: the servers import it, each on its own loop.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

INTERVAL = 0.010  # the heartbeat's sleep: its lateness on waking is the loop's lag
SAMPLES = 100_000  # lag samples kept (1000 s of them at most), oldest dropped first
QUEUE = 64  # an event stream's messages not yet written; past it the stream is dropped


def percentiles(values: Sequence[float]) -> dict[str, float | None]:
    """n, p50, p99 and max of ``values`` (nearest rank); None for none (JSON has no NaN)."""
    ordered = sorted(values)
    if not ordered:
        return {"n": 0, "p50": None, "p99": None, "max": None}

    def rank(q: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]

    return {"n": len(ordered), "p50": rank(0.50), "p99": rank(0.99), "max": ordered[-1]}


def rss() -> int:
    """This process's resident set size, in bytes."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def payload() -> str:
    """A broadcast message: the wall clock in ns, which clients on this host subtract from their own."""
    return str(time.time_ns())


class Heartbeat:
    """Sleeps ``INTERVAL`` over and over and records how late it wakes (ms), with when it woke."""

    def __init__(self) -> None:
        self.lags: deque[tuple[float, float]] = deque(maxlen=SAMPLES)
        self.since = time.monotonic()
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self.run())

    async def run(self) -> None:
        while True:
            start = time.monotonic()
            await asyncio.sleep(INTERVAL)
            woke = time.monotonic()
            self.lags.append((woke, (woke - start - INTERVAL) * 1000))

    def mark(self) -> None:
        """A broadcast begins: ``stats`` reports the lag from here on."""
        self.since = time.monotonic()

    def stats(self, **clients: int) -> dict[str, Any]:
        lags = [lag for woke, lag in self.lags if woke >= self.since]
        return {**clients, "rss": rss(), "lag_ms": {**percentiles(lags), "values": [round(lag, 3) for lag in lags]}}


def offer_all(streams: set[asyncio.Queue[str]], message: str) -> None:
    """Queue ``message`` for every event stream without waiting; a stream whose queue is full is dropped."""
    for queue in list(streams):
        try:
            queue.put_nowait(message)
        except asyncio.QueueFull:
            streams.discard(queue)

"""How often the parent restarts a worker that died while serving: at most ``limit`` times a minute, and
not in a tight loop (see supervisor.py's doc for the whole process model)."""

from __future__ import annotations

import time
from collections import deque

__all__ = ["RestartBudget"]


class RestartBudget:
    """The deaths of the last minute: each one asks for a delay before the restart, or None (too many)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.deaths: deque[float] = deque(maxlen=limit + 1)  # past limit + 1, the answer is None anyway

    def died(self) -> float | None:
        """A worker died now: seconds before its restart (0 for the first of the minute, then 0.5 s,
        doubling, at most 10 s), or None if more than ``limit`` died within a minute."""
        now = time.monotonic()
        self.deaths.append(now)
        while self.deaths and now - self.deaths[0] > 60:
            self.deaths.popleft()
        if len(self.deaths) > self.limit:
            return None
        return 0.0 if len(self.deaths) <= 1 else min(10.0, 0.5 * 2 ** (len(self.deaths) - 2))

    def __len__(self) -> int:
        return len(self.deaths)

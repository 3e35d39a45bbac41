"""Sweep: expired rows deleted now and then, by whichever request comes when it is due.

The PostgreSQL stores (sessions, rate limits, idempotency keys) keep rows that
expire; each deletes a batch of expired ones at most every ``every`` seconds per
process. A sweep is housekeeping: the request that happens to run it has done its
own work already, so a sweep that fails is logged (once per burst) and never
raised into that request's answer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from .bursts import BurstLog, failing
from .errors import first_line

__all__ = ["Sweep"]

logger = logging.getLogger("aiorest.error")


class Sweep:
    """Runs ``sweep()`` at most every ``every`` seconds (the first time ``every`` after it is made)."""

    def __init__(self, what: str, every: float) -> None:
        self.every = every
        self._last = time.monotonic()
        self._failures = BurstLog(logger, failing(f"sweeping {what} failed", "failures"), every=10.0)

    async def __call__(self, sweep: Callable[[], Awaitable[object]]) -> None:
        """Sweep if it is due; a failure is logged, not raised."""
        now = time.monotonic()
        if now - self._last <= self.every:
            return
        self._last = now  # first: a failing sweep is not retried by every request that follows
        try:
            await sweep()
        except Exception as exc:
            self._failures.note(first_line(exc))

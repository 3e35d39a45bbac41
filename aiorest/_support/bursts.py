"""BurstLog: a warning that comes once per burst of events, with their count, not once an event."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

__all__ = ["BurstLog", "failing"]


class BurstLog:
    """Counts events and logs them as one WARNING line per burst.

    ``message(count, reason)`` words the line; ``reason`` is the first event's since
    the last line. Lines are at least ``every`` seconds apart, so a lasting failure
    cannot flood the log: an event within ``every`` of the last line is counted in
    the next one.

    With ``delay`` 0 the line is logged at the event that may log it: the first
    event of a burst is heard at once, and the events counted meanwhile with the
    next event past ``every`` (or at :meth:`flush`). With ``delay`` > 0 the line waits
    ``delay`` seconds (on the running loop) to count the whole burst: a database
    restart ends every connection within milliseconds, and one line says how many.
    """

    def __init__(
        self, logger: logging.Logger, message: Callable[[int, str], str], *, every: float, delay: float = 0.0
    ) -> None:
        self._logger = logger
        self._message = message
        self.every = every
        self.delay = delay
        self.count = 0  # events not yet logged
        self._reason = ""
        self._last = float("-inf")  # time.monotonic() of the last line
        self._pending: asyncio.TimerHandle | None = None

    def note(self, reason: str = "") -> None:
        """One event; logs the line now, or later, if it is due."""
        self.count += 1
        if not self._reason:
            self._reason = reason
        if self.delay <= 0:
            if time.monotonic() >= self._last + self.every:
                self.flush()
        elif self._pending is None:
            wait = max(self.delay, self._last + self.every - time.monotonic())
            self._pending = asyncio.get_running_loop().call_later(wait, self.flush)

    def flush(self) -> None:
        """Log what was counted, now (if anything was)."""
        if self._pending is not None:
            self._pending.cancel()
            self._pending = None
        if not self.count:
            return
        self._last = time.monotonic()
        count, self.count = self.count, 0
        reason, self._reason = self._reason, ""
        self._logger.warning("%s", self._message(count, reason))


def failing(what: str, events: str) -> Callable[[int, str], str]:
    """A BurstLog message for a dependency that is down: ``"<what>: <reason> (N more <events> since ...)"``."""

    def message(count: int, reason: str) -> str:
        more = f" ({count - 1} more {events} since the last warning)" if count > 1 else ""
        return f"{what}: {reason}{more}"

    return message

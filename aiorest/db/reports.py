"""What a pool tells the log: connections lost, requests turned away, connections refused.

Each is one line per burst: a restart ends every connection within
milliseconds, so the line waits ``_REPORT_DELAY`` to count the burst; and at
most one line per ``_REPORT_GAP``, so a flapping server or a lasting overload
cannot flood the log (each line counts every event since the previous one).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from .._support.bursts import BurstLog
from .._support.errors import first_line
from .sizing import plural

__all__ = ["PoolReports", "ReportedPool", "logger"]

logger = logging.getLogger("aiorest.db")

_REPORT_DELAY = 0.5
_REPORT_GAP = 10.0


def _burst_log(message: Callable[[int, str], str]) -> BurstLog:
    return BurstLog(logger, message, every=_REPORT_GAP, delay=_REPORT_DELAY)


class ReportedPool(Protocol):
    """What the lines say of the pool (a Pool has it)."""

    @property
    def closed(self) -> bool: ...

    acquire_timeout: float
    max_size: int
    workers: int


class PoolReports:
    """The pool's three counted log lines; each message reads the pool's settings when it is written."""

    def __init__(self, pool: ReportedPool) -> None:
        self.losses = _burst_log(
            lambda count, reason: (
                f"lost {plural(count, 'connection')} to PostgreSQL: {reason}"
                + ("" if pool.closed else "; reconnecting")
            )
        )
        self.timeouts = _burst_log(
            lambda count, reason: (
                f"database pool exhausted: {plural(count, 'request')} got 503 after waiting"
                f" {pool.acquire_timeout:g} s for a connection (pool max {pool.max_size} per worker ×"
                f" {plural(pool.workers, 'worker')}); raise the pool size if PostgreSQL has room, or acquire_timeout"
            )
        )
        self.refusals = _burst_log(
            lambda count, reason: (
                f"PostgreSQL refused {plural(count, 'new connection')}, requests got 503: {reason}; the pools of every"
                f" worker and host, with its other clients, need more than its max_connections"
            )
        )

    def refused(self, exc: BaseException) -> None:
        """Count a connection PostgreSQL refused for lack of slots: max_connections, or a role's or database's limit.

        (Refusals while it restarts are the lost connections' line's story.)
        """
        reason = first_line(exc)
        if any(sign in reason for sign in ("too many clients", "too many connections", "slots are reserved")):
            self.refusals.note(reason)

    def flush(self) -> None:
        for tally in (self.losses, self.timeouts, self.refusals):
            tally.flush()

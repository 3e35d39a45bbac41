"""A rolling reload: on SIGHUP, the workers replaced one at a time, each new one serving before the
old one of its slot is told to stop (see supervisor.py's doc for the whole process model)."""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Protocol

from .notify import Notifier
from .worker import Worker

logger = logging.getLogger("aiorest.server")

__all__ = ["RollingReload", "Supervising"]


class Supervising(Protocol):
    """What a reload needs of the supervisor that runs it."""

    count: int
    serving: dict[int, Worker]  # slot -> the worker that serves it
    notify: Notifier

    def spawn(self, number: int, purpose: str) -> Worker: ...
    def tell_to_stop(self, worker: Worker) -> None: ...


class RollingReload:
    """One reload: the slots still to replace, the new worker starting for one of them."""

    def __init__(self, supervisor: Supervising) -> None:
        self._supervisor = supervisor
        self.slots = deque(range(supervisor.count))
        self.replacing: Worker | None = None
        self.replaced = 0
        self.again = False  # another SIGHUP came during this one
        self.started = time.monotonic()
        logger.info("SIGHUP: replacing the %d workers one at a time", supervisor.count)
        supervisor.notify(f"RELOADING=1\nMONOTONIC_USEC={time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000}")

    def next(self) -> bool:
        """Start the new worker of the next slot; False: every slot is replaced, the reload is done."""
        supervisor = self._supervisor
        if self.slots:
            self.replacing = supervisor.spawn(self.slots.popleft(), "reload")
            return True
        serving = supervisor.serving
        logger.info(
            "reload done: %d workers serving (pids %s)", len(serving), " ".join(str(w.pid) for w in serving.values())
        )
        supervisor.notify(f"READY=1\nSTATUS={len(serving)} workers serving")
        return False

    def serves(self, worker: Worker) -> None:
        """The new ``worker`` serves: it takes its slot, and the old worker of the slot is told to stop."""
        assert self.replacing is worker
        supervisor = self._supervisor
        old = supervisor.serving.get(worker.number)
        supervisor.serving[worker.number] = worker
        self.replacing = None
        self.replaced += 1
        if old is not None:
            logger.info("reload: worker %d (pid %d) serves; stopping pid %d", worker.number, worker.pid, old.pid)
            supervisor.tell_to_stop(old)
        else:
            logger.info("reload: worker %d (pid %d) serves", worker.number, worker.pid)

    def failed(self, worker: Worker, reason: str) -> None:
        """The new ``worker`` could not start (``reason``): the reload ends; the workers serving go on."""
        self.replacing = None
        serving = self._supervisor.serving
        old = sum(1 for w in serving.values() if w.purpose != "reload" or w.started < self.started)
        new = len(serving) - old
        kept = f"keeping the {old} old workers" if not new else f"keeping {old} old and {new} new workers"
        logger.error(
            "reload failed: new worker %d (pid %d) could not start: %s: %s", worker.number, worker.pid, reason, kept
        )
        self._supervisor.notify(f"READY=1\nSTATUS=reload failed: {kept}")

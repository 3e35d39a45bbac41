"""A rolling reload: the workers replaced one at a time, each new one serving before the old one of its
slot is told to stop (see supervisor.py's doc for the whole process model). A reload has a cause, which
names it in the log: SIGHUP here, a change of the code under ``aiorest run --reload`` (watch.py)."""

from __future__ import annotations

import logging
import selectors
import time
from collections import deque
from typing import Protocol

from .notify import Notifier
from .worker import Worker

logger = logging.getLogger("aiorest.server")

__all__ = ["Cause", "ChangeSource", "RollingReload", "Sighup", "Supervising", "pids"]


class Supervising(Protocol):
    """What a reload needs of the supervisor that runs it."""

    count: int
    serving: dict[int, Worker]  # slot -> the worker that serves it
    notify: Notifier

    def spawn(self, number: int, purpose: str) -> Worker: ...
    def tell_to_stop(self, worker: Worker) -> None: ...


class Cause:
    """Why a reload happens: its name in the log (``"SIGHUP"``), when it came, what the log says at the end."""

    name = ""

    def __init__(self) -> None:
        self.since = time.monotonic()  # when it came

    def elapsed(self) -> float:
        """Seconds since it came."""
        return time.monotonic() - self.since

    def done(self, serving: dict[int, Worker]) -> None:
        """The reload is over: every slot serves the new code."""
        raise NotImplementedError

    def failed(self, worker: Worker, reason: str, old: int, new: int) -> None:
        """A new worker could not start: ``old`` old and ``new`` new workers still serve."""
        raise NotImplementedError


def pids(serving: dict[int, Worker]) -> str:
    """The pids of the workers serving, for a log line."""
    return " ".join(str(worker.pid) for worker in serving.values())


class ChangeSource(Protocol):
    """A hook of the supervisor that says when the code changed (watch.py's ``Watcher``)."""

    watching: bool  # False once it has gone: no change will come

    def watch(self, selector: selectors.BaseSelector) -> None: ...  # registers its file, itself as the data
    def read(self) -> Cause | None: ...  # its file is readable: a change, or None (not a whole one yet)
    def nothing_serves(self, worker: Worker, reason: str) -> None: ...  # the next change starts it again


class Sighup(Cause):
    """A reload asked for by SIGHUP."""

    name = "SIGHUP"

    def done(self, serving: dict[int, Worker]) -> None:
        logger.info("reload done in %.2f s: %d workers serving (pids %s)", self.elapsed(), len(serving), pids(serving))

    def failed(self, worker: Worker, reason: str, old: int, new: int) -> None:
        kept = f"keeping the {old} old workers" if not new else f"keeping {old} old and {new} new workers"
        logger.error(
            "reload failed: new worker %d (pid %d) could not start: %s: %s", worker.number, worker.pid, reason, kept
        )


class RollingReload:
    """One reload: the slots still to replace, the new worker starting for one of them."""

    def __init__(self, supervisor: Supervising, cause: Cause) -> None:
        self._supervisor = supervisor
        self.cause = cause
        self.slots = deque(range(supervisor.count))
        self.replacing: Worker | None = None
        self.replaced = 0
        self.again: Cause | None = None  # another cause came during this one: a reload follows
        self.started = time.monotonic()
        count = supervisor.count
        logger.info(
            "%s: %s",
            cause.name,
            "replacing the worker" if count == 1 else f"replacing the {count} workers one at a time",
        )
        supervisor.notify(f"RELOADING=1\nMONOTONIC_USEC={time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000}")

    def next(self) -> bool:
        """Start the new worker of the next slot; False: every slot is replaced, the reload is done."""
        supervisor = self._supervisor
        if self.slots:
            self.replacing = supervisor.spawn(self.slots.popleft(), "reload")
            return True
        self.cause.done(supervisor.serving)
        supervisor.notify(f"READY=1\nSTATUS={len(supervisor.serving)} workers serving")
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
        self.cause.failed(worker, reason, old, len(serving) - old)
        self._supervisor.notify(f"READY=1\nSTATUS=reload failed: {len(serving)} workers serving")

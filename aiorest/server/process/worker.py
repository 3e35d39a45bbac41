"""A worker: its side of the fork (forget the parent's state, die with it, report, serve), and the
record the parent keeps of it (``Worker``)."""

from __future__ import annotations

import ctypes
import logging
import os
import selectors
import signal
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import NoReturn

logger = logging.getLogger("aiorest.server")

__all__ = ["MAX_REASON", "Serve", "Worker", "be_worker", "signal_worker", "stop_with_parent"]

PR_SET_PDEATHSIG = 1
MAX_REASON = 1000  # bytes of a worker's failure reason: one write to a pipe, under PIPE_BUF

Serve = Callable[[Callable[[], object], Callable[[str], object]], None]


@dataclass(eq=False)
class Worker:
    """A worker as the parent sees it (supervisor.py)."""

    number: int  # its slot, 0 .. count - 1
    pid: int
    pipe: int | None  # the read end of its report pipe, until EOF
    started: float
    ready: bool = False
    report: bytes = b""
    stopping: float = 0.0  # when it was told to stop
    purpose: str = "start"  # "start" (the first start), "restart" or "reload"

    @property
    def reason(self) -> str:
        return self.report[1:].decode("utf-8", "replace") if self.report[:1] == b"F" else ""


def be_worker(
    serve: Serve,
    report: int,
    mask: set[int | signal.Signals],
    inherited: Iterable[int],
    selector: selectors.BaseSelector,
    parent: int,
) -> NoReturn:
    """In the forked worker (its signals blocked): forget the parent's state, then serve."""
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
        signal.signal(signum, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # the parent's signal (a terminal's hangup reaches both)
    signal.set_wakeup_fd(-1)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # a SIGTERM sent meanwhile ends it now
    for fd in inherited:
        os.close(fd)
    selector.close()
    stop_with_parent(parent)

    def ready() -> None:
        os.write(report, b"R")

    def failed(reason: str) -> None:
        os.write(report, b"F" + reason.encode("utf-8", "replace")[:MAX_REASON])

    code = 0
    try:
        serve(ready, failed)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
    except BaseException:
        logger.exception("worker failed")
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def stop_with_parent(parent: int) -> None:
    """Ask Linux to SIGTERM this worker if the parent dies (even by SIGKILL): no orphans."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: the parent's SIGTERM handler still stops workers
        return
    if os.getppid() != parent:  # the parent died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


def signal_worker(pid: int, signum: int) -> None:
    """Send ``signum`` to a worker, which may have exited already."""
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass

"""Several worker processes on one port: prefork with SO_REUSEPORT.

One process uses one core. ``aiorest run app:app --workers 4`` forks four
processes; each binds the port with SO_REUSEPORT and the kernel spreads new
connections between them. The parent forwards SIGTERM/SIGINT, waits for the
workers to finish their requests in flight, and restarts a worker that dies
while serving (at most ``max_restarts`` times a minute, then it gives up and
stops all). A worker that exits before it serves failed to start: starting it
again would fail the same way, so the parent stops the others and exits with 1.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
import time
from collections import deque
from collections.abc import Callable

logger = logging.getLogger("aiorest.server")
_PR_SET_PDEATHSIG = 1

__all__ = ["run_workers"]


def run_workers(
    count: int,
    serve: Callable[[Callable[[], object]], None],
    *,
    max_restarts: int = 10,
    on_exit: Callable[[int], None] | None = None,
) -> int:
    """Run ``serve(ready)`` in ``count`` forked processes until SIGTERM/SIGINT; returns an exit code.

    ``serve`` calls ``ready()`` once its worker serves; ``on_exit(pid)`` is called
    when a worker has exited (the metrics forget its live gauges).
    """
    if count < 1:
        raise ValueError(f"workers must be at least 1, got {count}")
    children: dict[int, tuple[int, int]] = {}  # pid -> worker number, read end of its ready pipe
    restarts: deque[float] = deque()
    stopping = False

    def spawn(number: int) -> None:
        ready_read, ready_write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the worker
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            _stop_with_parent(parent)
            os.close(ready_read)
            for _, other in children.values():
                os.close(other)
            code = 0
            try:
                serve(lambda: os.write(ready_write, b"!"))
            except SystemExit as exc:  # run() has said why: a startup that failed
                code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
            except BaseException:
                logger.exception("worker %d failed", number)
                code = 1
            finally:
                os._exit(code)
        os.close(ready_write)
        os.set_blocking(ready_read, False)
        children[pid] = (number, ready_read)

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True
        for pid in children:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    parent = os.getpid()
    for number in range(count):
        spawn(number)
    logger.info("aiorest: starting %d workers (pids %s)", count, sorted(children))
    exit_code = 0
    while children:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            break
        if pid not in children:
            continue
        number, ready_read = children.pop(pid)
        if on_exit is not None:
            on_exit(pid)
        served = _said_ready(ready_read)
        if stopping:
            continue
        code = os.waitstatus_to_exitcode(status)
        if not served:
            logger.error("worker %d (pid %d) failed to start (exit status %d): stopping the workers", number, pid, code)
            exit_code = 1
            stop(signal.SIGTERM, None)
            continue
        logger.error("worker %d (pid %d) exited with %d", number, pid, code)
        now = time.monotonic()
        restarts.append(now)
        while restarts and now - restarts[0] > 60:
            restarts.popleft()
        if len(restarts) > max_restarts:
            logger.error("workers keep dying: stopping")
            exit_code = 1
            stop(signal.SIGTERM, None)
            continue
        spawn(number)
    sys.stdout.flush()
    return exit_code


def _said_ready(ready_read: int) -> bool:
    """Whether a worker that has exited wrote to its ready pipe (non-blocking read), which is closed."""
    try:
        return os.read(ready_read, 1) != b""
    except BlockingIOError:  # nothing written, and a process it forked still holds the write end
        return False
    finally:
        os.close(ready_read)


def _stop_with_parent(parent: int) -> None:
    """Ask Linux to SIGTERM this worker if the parent dies (even by SIGKILL): no orphans."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: the parent's SIGTERM handler still stops workers
        return
    if os.getppid() != parent:  # the parent died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)

"""Several worker processes on one listening socket, a parent that supervises them, reloads.

``aiorest run app:app --workers 4``: the parent binds the listening socket (or
takes the one systemd passed), then forks four workers. Each worker inherits
the socket and imports the app itself, after the fork: the parent never
imports the user's code, so a worker started later runs the code on disk then.
All workers accept from the one socket's queue, so a worker that closes its
copy (it stops) leaves nothing behind in a queue of its own.

The parent:

- starts one worker first, then, once it serves, the others: an app that
  cannot start is reported once, and the parent exits with 1;
- on SIGHUP replaces the workers one at a time (after the first start, if it
  comes during it): a new worker starts and serves before the old one is
  told to stop (SIGTERM: it drains, see
  :meth:`aiorest.Server.stop`). A new worker that cannot start (it exits, or
  is not ready within ``start_timeout``) ends the reload, logged in one ERROR
  line; the workers still serving go on;
- restarts a worker that dies while serving (at most ``max_restarts`` times a
  minute, then it stops all and exits with 1);
- on SIGTERM or SIGINT tells every worker to stop, closes its copy of the
  socket, waits for them (SIGKILL for one still there ``stop_timeout`` seconds
  later) and exits with 0;
- given a ``watcher`` (``aiorest run --reload``, watch.py), reloads as on SIGHUP
  when the code changes, and waits for the next change when nothing can serve.

Each worker reports through a pipe: ``R`` once it serves, or ``F`` and the
reason it could not start. How many they are reaches each worker's server
through its configuration (``ServerConfig.workers``, which ``serve`` passes on).
"""

from __future__ import annotations

import logging
import os
import selectors
import signal
import socket
import sys
import time
from collections.abc import Callable

from .notify import Notifier
from .reload import Cause, ChangeSource, RollingReload, Sighup
from .restarts import RestartBudget
from .worker import MAX_REASON, Serve, Worker, be_worker, signal_worker

logger = logging.getLogger("aiorest.server")
_HANDLED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD)  # the parent's signals

__all__ = ["run_workers"]


def run_workers(
    count: int,
    serve: Serve,
    *,
    listener: socket.socket | None = None,
    max_restarts: int = 10,
    start_timeout: float = 60.0,
    stop_timeout: float = 40.0,
    on_exit: Callable[[int], object] | None = None,
    watcher: ChangeSource | None = None,
) -> int:
    """Run ``serve(ready, failed)`` in ``count`` forked workers until SIGTERM/SIGINT; returns an exit code.

    ``serve`` runs in the worker: it calls ``ready()`` once it serves, or
    ``failed(reason)`` (one line) if it cannot start, then returns or raises.
    ``listener``, the socket the workers serve, is closed in the parent when
    it stops. SIGHUP replaces the workers one at a time (see the module's doc).
    ``on_exit(pid)`` is called when a worker has exited (the metrics forget its live gauges).
    ``watcher``: a change of the code reloads too (see the module's doc).
    """
    if count < 1:
        raise ValueError(f"workers must be at least 1, got {count}")
    return _Supervisor(count, serve, listener, max_restarts, start_timeout, stop_timeout, on_exit, watcher).run()


class _Supervisor:
    def __init__(
        self,
        count: int,
        serve: Serve,
        listener: socket.socket | None,
        max_restarts: int,
        start_timeout: float,
        stop_timeout: float,
        on_exit: Callable[[int], object] | None = None,
        watcher: ChangeSource | None = None,
    ) -> None:
        self.count = count
        self.serve = serve
        self.listener = listener
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.on_exit = on_exit
        self.workers: dict[int, Worker] = {}  # pid -> every worker alive, draining ones included
        self.serving: dict[int, Worker] = {}  # slot -> the worker that serves it (or starts for it)
        self.all_started = False
        self.reload_after_start: Cause | None = None  # a SIGHUP (or a change) came while they started
        self.stopping = False
        self.exit_code = 0
        self.reload: RollingReload | None = None
        self.restarts = RestartBudget(max_restarts)
        self.pending: dict[int, float] = {}  # slot -> when the restart of its worker, which died, is due
        self.selector = selectors.DefaultSelector()
        self.wake = (-1, -1)  # the pipe set_wakeup_fd writes signal numbers to
        self.parent = os.getpid()
        self.notify = Notifier.from_environment()  # systemd's Type=notify, when it asks for it
        self.watcher = watcher

    # -- the loop --------------------------------------------------------------------------

    def run(self) -> int:
        wake_read, wake_write = os.pipe()
        os.set_blocking(wake_read, False)
        os.set_blocking(wake_write, False)
        self.selector.register(wake_read, selectors.EVENT_READ)
        self.wake = (wake_read, wake_write)
        previous_wakeup = signal.set_wakeup_fd(wake_write, warn_on_full_buffer=False)
        previous = {signum: signal.signal(signum, _noted) for signum in _HANDLED}
        try:
            if self.watcher is not None:
                self.watcher.watch(self.selector)
            self.spawn(0, "start")
            while (
                self.workers
                or self.pending
                or (self.watcher is not None and self.watcher.watching and not self.stopping)
            ):
                timeout = self._next_deadline() - time.monotonic()
                for key, _ in self.selector.select(max(0.0, timeout)):
                    if key.fd == wake_read:
                        self._signals(os.read(wake_read, 256))
                    elif key.data is self.watcher:
                        self._begin_reload(self.watcher.read())
                    else:
                        self._read_report(key.data)
                self._reap()
                self._check_deadlines()
        finally:
            signal.set_wakeup_fd(previous_wakeup)
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            self.selector.close()
            os.close(wake_read)
            os.close(wake_write)
            self._close_listener()
        sys.stdout.flush()
        return self.exit_code

    def _signals(self, received: bytes) -> None:
        for signum in received:
            if signum in (signal.SIGTERM, signal.SIGINT):
                if not self.stopping:
                    logger.info("%s: stopping the workers", signal.Signals(signum).name)
                self._stop_all()
            elif signum == signal.SIGHUP:
                self._begin_reload(Sighup())

    def _next_deadline(self) -> float:
        deadlines = [time.monotonic() + 1.0, *self.pending.values()]
        for worker in self.workers.values():
            if worker.stopping:
                deadlines.append(worker.stopping + self.stop_timeout)
            elif not worker.ready:
                deadlines.append(worker.started + self.start_timeout)
        return min(deadlines)

    def _check_deadlines(self) -> None:
        now = time.monotonic()
        for number, due in list(self.pending.items()):
            if now >= due:
                del self.pending[number]
                if not self.stopping and number not in self.serving:
                    self.spawn(number, "restart")
        for worker in list(self.workers.values()):
            if worker.stopping and now - worker.stopping > self.stop_timeout:
                logger.error(
                    "worker %d (pid %d) still running %g s after SIGTERM: SIGKILL",
                    worker.number,
                    worker.pid,
                    self.stop_timeout,
                )
                signal_worker(worker.pid, signal.SIGKILL)
                worker.stopping = float("inf")  # killed once
            elif not worker.ready and not worker.stopping and now - worker.started > self.start_timeout:
                self.tell_to_stop(worker)
                self._forget(worker)
                self._not_started(worker, f"not ready within {self.start_timeout:g} s")

    # -- workers ----------------------------------------------------------------------------

    def spawn(self, number: int, purpose: str) -> Worker:
        self.pending.pop(number, None)  # a reload's worker takes the slot of one due to restart
        report_read, report_write = os.pipe()
        # Until the child has set its own handlers, the parent's would catch a signal
        # sent to it (a SIGTERM from a stop right after the fork) and drop it: the
        # signals wait, blocked, and reach the child once it has its own.
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, _HANDLED)
        try:
            pid = os.fork()
        except BaseException:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            os.close(report_read)
            os.close(report_write)
            raise
        if pid == 0:
            os.close(report_read)
            # the pipes of the signals, of the workers and of the watcher
            fds = {*self.wake, *(key.fd for key in self.selector.get_map().values())}
            be_worker(self.serve, report_write, mask, fds, self.selector, self.parent)  # never returns
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        os.close(report_write)
        os.set_blocking(report_read, False)
        worker = Worker(number, pid, report_read, time.monotonic(), purpose=purpose)
        self.selector.register(report_read, selectors.EVENT_READ, worker)
        self.workers[pid] = worker
        if purpose != "reload":
            self.serving[number] = worker
        logger.info("worker %d (pid %d) starting", number, pid)
        return worker

    def _read_report(self, worker: Worker) -> None:
        assert worker.pipe is not None
        try:
            data = os.read(worker.pipe, MAX_REASON + 1)
        except BlockingIOError:
            return
        if not data:  # EOF: the worker (and all it forked) closed it
            self.selector.unregister(worker.pipe)
            os.close(worker.pipe)
            worker.pipe = None
            return
        worker.report = (worker.report + data)[: MAX_REASON + 1]
        if data[:1] == b"R" and not worker.ready and not worker.stopping:
            worker.ready = True
            self._serves(worker)

    def _reap(self) -> None:
        while self.workers:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            worker = self.workers.pop(pid, None)
            if worker is None:
                continue
            if worker.pipe is not None:  # what it wrote before it exited
                self._read_report(worker)
                if worker.pipe is not None:
                    self.selector.unregister(worker.pipe)
                    os.close(worker.pipe)
                    worker.pipe = None
            if self.on_exit is not None:
                try:
                    self.on_exit(pid)
                except Exception:  # the supervisor must go on supervising
                    logger.exception("the worker exit hook failed for pid %d", pid)
            self._exited(worker, os.waitstatus_to_exitcode(status))

    def _forget(self, worker: Worker) -> None:
        """``worker`` no longer serves its slot."""
        if self.serving.get(worker.number) is worker:
            del self.serving[worker.number]

    def _exited(self, worker: Worker, code: int) -> None:
        self._forget(worker)
        if worker.stopping:
            logger.info("worker %d (pid %d) exited with %d", worker.number, worker.pid, code)
            return
        if not worker.ready:
            self._not_started(worker, worker.reason or f"exit status {code}")
            return
        logger.error("worker %d (pid %d) exited with %d while serving", worker.number, worker.pid, code)
        if self.stopping:
            return
        delay = self.restarts.died()
        if delay is None:
            logger.error("workers keep dying (%d restarts within a minute): stopping", len(self.restarts))
            self.exit_code = 1
            self._stop_all()
            return
        if delay:  # a worker that keeps dying is not restarted in a tight loop
            logger.info(
                "worker %d restarts in %g s (%d deaths within a minute)", worker.number, delay, len(self.restarts)
            )
            self.pending[worker.number] = time.monotonic() + delay
        else:
            self.spawn(worker.number, "restart")

    def _serves(self, worker: Worker) -> None:
        """``worker`` said it serves."""
        if self.stopping:
            return
        if worker.purpose == "reload":
            assert self.reload is not None
            self.reload.serves(worker)
            self._continue_reload()
        elif not self.all_started:
            if worker.number == 0 and len(self.serving) == 1:
                for number in range(1, self.count):
                    self.spawn(number, "start")
            if len(self.serving) == self.count and all(w.ready for w in self.serving.values()):
                self.all_started = True
                pids = " ".join(str(w.pid) for w in self.serving.values())
                logger.info("%d workers serving (pids %s)", self.count, pids)
                self.notify(f"READY=1\nSTATUS={self.count} workers serving")
                if self.reload_after_start is not None:
                    self._begin_reload(self.reload_after_start)
        else:
            logger.info("worker %d (pid %d) serves", worker.number, worker.pid)

    def _not_started(self, worker: Worker, reason: str) -> None:
        """``worker`` exited before it served, or took too long: ``reason`` says why."""
        if self.stopping:
            return
        if worker.purpose == "reload":
            reload, self.reload = self.reload, None
            assert reload is not None
            reload.failed(worker, reason)
            if reload.again is not None:
                self._begin_reload(reload.again)
        elif self.watcher is not None and not self.serving:  # the next change starts it
            self.all_started = True
            self.watcher.nothing_serves(worker, reason)
        elif worker.purpose == "restart" and self.serving:
            logger.error(
                "worker %d (pid %d) could not be restarted: %s: %d workers left serving; SIGHUP starts it again",
                worker.number,
                worker.pid,
                reason,
                len(self.serving),
            )
        else:
            logger.error(
                "worker %d (pid %d) failed to start: %s: stopping the workers", worker.number, worker.pid, reason
            )
            self.exit_code = 1
            self._stop_all()

    # -- reloads and stops ------------------------------------------------------------------

    def _begin_reload(self, cause: Cause | None) -> None:
        if self.stopping or cause is None:
            return
        if not self.all_started:  # the first workers may have imported the code before it changed
            if self.reload_after_start is None:
                logger.info("%s while the workers start: a reload follows once they serve", cause.name)
                self.reload_after_start = cause
            return
        if self.reload is not None:
            if self.reload.again is None:
                logger.info("%s during a reload: another reload follows it", cause.name)
                self.reload.again = cause
            return
        self.reload = RollingReload(self, cause)
        self._continue_reload()

    def _continue_reload(self) -> None:
        reload = self.reload
        assert reload is not None
        if not reload.next():
            self.reload = None
            if reload.again is not None:
                self._begin_reload(reload.again)

    def tell_to_stop(self, worker: Worker) -> None:
        if not worker.stopping:
            worker.stopping = time.monotonic()
            signal_worker(worker.pid, signal.SIGTERM)

    def _stop_all(self) -> None:
        self.pending.clear()
        if not self.stopping:
            self.notify("STOPPING=1")
        self.stopping = True
        for worker in self.workers.values():
            self.tell_to_stop(worker)
        self._close_listener()

    def _close_listener(self) -> None:
        # The workers hold their copies while they drain; new connections are
        # refused once the last one is closed, not left waiting in a queue.
        if self.listener is not None:
            self.listener.close()
            self.listener = None


def _noted(signum: int, frame: object) -> None:
    """The handler of the signals the parent waits for: set_wakeup_fd hands it their numbers."""

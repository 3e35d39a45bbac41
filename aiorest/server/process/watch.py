"""``aiorest run --reload``: the app's files watched, a change reloading the worker as SIGHUP does.

The parent forks its workers, so it keeps no thread: watchfiles runs in a process of
its own, a fresh interpreter (_watching.py), which writes a JSON line to a pipe for
each batch of changes. The supervisor selects on the pipe (the hook
:class:`~.reload.ChangeSource`) and reloads:
the new worker imports the code on disk and serves before the old one is told to
stop, so the socket, bound once in the parent, refuses no connection. A new worker
that cannot start leaves the old one serving; the log says so, and the next change
tries again.
"""

from __future__ import annotations

import json
import logging
import os
import selectors
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from .reload import Cause, pids
from .worker import Worker

logger = logging.getLogger("aiorest.server")

__all__ = ["DEFAULT_EXCLUDES", "DEFAULT_INCLUDES", "WatchOptions", "Watcher", "watchfiles_available"]

#: The files whose change reloads, always (``--reload-include`` adds to them).
DEFAULT_INCLUDES = ("*.py",)
#: Files and directories whose change never reloads (``--reload-exclude`` adds to them): hidden ones
#: (.git, .venv, an editor's .name.swp), compiled Python, backups (name~) and editors' temporary files (~name).
DEFAULT_EXCLUDES = (".*", "*.py[cod]", "*~", "~*", "__pycache__")
MAX_LINE = 256 * 1024  # a report longer than this (it never is: 100 paths at most) is dropped
START_TIMEOUT = 30.0  # seconds the watching process has to say it watches
SHOWN = 3  # paths named in the log line of a change; the others are counted


def watchfiles_available() -> bool:
    try:
        import watchfiles  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass(frozen=True)
class WatchOptions:
    """What ``--reload`` watches: ``dirs`` (recursively), the files matching one of ``includes``
    and, in their path below the directory watched, no part matching one of ``excludes``."""

    dirs: tuple[str, ...]
    includes: tuple[str, ...] = DEFAULT_INCLUDES
    excludes: tuple[str, ...] = DEFAULT_EXCLUDES

    @classmethod
    def of(cls, dirs: Iterable[str], includes: Iterable[str] = (), excludes: Iterable[str] = ()) -> WatchOptions:
        """The options with the defaults and the given ones (duplicates once), each directory absolute."""
        absolute = dict.fromkeys(os.path.abspath(d) for d in dirs)
        for directory in absolute:
            if not os.path.isdir(directory):
                raise ValueError(f"--reload-dir {directory}: not a directory")
        return cls(
            tuple(absolute),
            tuple(dict.fromkeys([*DEFAULT_INCLUDES, *includes])),
            tuple(dict.fromkeys([*DEFAULT_EXCLUDES, *excludes])),
        )


class Watcher:
    """The parent's side: the watching process, its pipe, what it reported (a :class:`~.reload.ChangeSource`)."""

    def __init__(self, options: WatchOptions) -> None:
        self.options = options
        self.process: subprocess.Popen[bytes] | None = None
        self.selector: selectors.BaseSelector | None = None
        self.buffer = b""
        self.watching = False

    def start(self) -> None:
        """Start the watching process and wait until it watches: a change from then on reloads (it is started
        before the first worker imports the app). RuntimeError if it does not come to watch."""
        argument = json.dumps({**vars(self.options), "parent": os.getpid()})
        program = str(Path(__file__).with_name("_watching.py"))
        self.process = subprocess.Popen(
            [sys.executable, "-P", program, argument], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE
        )
        assert self.process.stdout is not None
        ready = _read_line(self.process.stdout.fileno(), START_TIMEOUT)
        if json.loads(ready or "{}").get("ready") is not True:
            self.close()
            raise RuntimeError(f"the watching process did not start watching {', '.join(self.options.dirs)}")
        os.set_blocking(self.process.stdout.fileno(), False)
        self.watching = True
        dirs = ", ".join(_shown(d) for d in self.options.dirs)
        includes, excludes = " ".join(self.options.includes), " ".join(self.options.excludes)
        logger.info("reload: watching %s (%s, not %s)", dirs, includes, excludes)

    def watch(self, selector: selectors.BaseSelector) -> None:
        assert self.process is not None and self.process.stdout is not None
        self.selector = selector
        selector.register(self.process.stdout.fileno(), selectors.EVENT_READ, self)

    def read(self) -> Changes | None:
        """What the watching process wrote: a change (logged), or None (not a whole line yet, or it has gone)."""
        assert self.process is not None and self.process.stdout is not None and self.selector is not None
        try:
            data = os.read(self.process.stdout.fileno(), 65536)
        except BlockingIOError:
            return None
        if not data:
            self.selector.unregister(self.process.stdout.fileno())
            self.watching = False
            logger.error("reload: the watching process exited: changes no longer reload the code; restart aiorest run")
            return None
        *lines, self.buffer = (self.buffer + data).split(b"\n")
        if len(self.buffer) > MAX_LINE:
            logger.warning("reload: the watching process wrote a line past %d bytes: dropped", MAX_LINE)
            self.buffer = b""
        paths: list[str] = []
        more = 0
        for line in lines:
            report = json.loads(line)
            paths += report.get("paths", [])
            more += report.get("more", 0)
        if not paths:
            return None
        paths = sorted({_shown(path) for path in paths})
        more += max(0, len(paths) - SHOWN)
        logger.info("changed: %s%s", ", ".join(paths[:SHOWN]), f" and {more} more" if more else "")
        return Changes()

    def nothing_serves(self, worker: Worker, reason: str) -> None:
        logger.warning(
            "worker %d (pid %d) could not start%s: nothing serves; waiting for a change to start it again",
            worker.number,
            worker.pid,
            _why(worker, reason),
        )

    def close(self) -> None:
        """Stop the watching process (it ignores SIGTERM, meant for the parent, and holds nothing: SIGKILL)."""
        process, self.process = self.process, None
        if process is None:
            return
        process.kill()
        process.wait()
        assert process.stdout is not None
        process.stdout.close()


class Changes(Cause):
    """A reload asked for by a change of the code."""

    name = "a change"

    def done(self, serving: dict[int, Worker]) -> None:
        logger.info(
            "reloaded in %.2f s (from the change seen to the new code serving, pid %s)", self.elapsed(), pids(serving)
        )

    def failed(self, worker: Worker, reason: str, old: int, new: int) -> None:
        told = _why(worker, reason)
        if old + new:
            logger.warning(
                "reload failed: new worker %d (pid %d) could not start%s: still serving the code from before the"
                " change; waiting for the next change",
                worker.number,
                worker.pid,
                told,
            )
        else:
            logger.warning(
                "reload failed: new worker %d (pid %d) could not start%s: nothing serves; waiting for the next change",
                worker.number,
                worker.pid,
                told,
            )


def _read_line(fd: int, timeout: float) -> bytes:
    """The first line written to ``fd`` (blocking) within ``timeout`` seconds; b"" if none came."""
    line = b""
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while not line.endswith(b"\n") and selector.select(deadline - time.monotonic()):
            byte = os.read(fd, 1)  # one at a time: what follows the line stays in the pipe
            if not byte:
                break
            line += byte
    return line


def _why(worker: Worker, reason: str) -> str:
    """Why ``worker`` could not start, in a log line: a reason it reported, it logged with its traceback."""
    return " (the error above)" if worker.reason else f": {reason}"


def _shown(path: str) -> str:
    """``path`` relative to the current directory when it is below it."""
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative

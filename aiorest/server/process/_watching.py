"""The watching process of ``aiorest run --reload`` (watch.py starts it): ``python -P _watching.py JSON``.

Run by its path, it imports nothing of aiorest (it starts in a few tens of
milliseconds): only the standard library and watchfiles. It writes JSON lines
to stdout: ``{"ready": true}`` once it watches, then ``{"paths": [...], "more":
N}`` for each batch of changes wanted (watchfiles waits until the files are
quiet for 50 ms, so a burst of writes is one batch). SIGINT and SIGTERM sent to
the whole group (Ctrl-C, ``timeout``, ``kill -- -PGID``) are for the parent, which
stops its workers, then this process (SIGKILL: it holds nothing); it also stops
by itself within 50 ms once the parent has gone.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Sequence
from fnmatch import fnmatchcase
from pathlib import PurePath

MAX_PATHS = 100  # paths of one batch written; past it, a count


def wanted(path: str, dirs: Sequence[str], includes: Sequence[str], excludes: Sequence[str]) -> bool:
    """Whether a change of ``path`` reloads: its name (or its path below the directory watched, for a glob
    with a ``/``) matches one of ``includes``, and no part of that path one of ``excludes``."""
    relative = PurePath(path)
    for directory in dirs:
        if relative.is_relative_to(directory):
            relative = relative.relative_to(directory)
            break
    for pattern in excludes:
        if any(fnmatchcase(part, pattern) for part in relative.parts) or ("/" in pattern and relative.match(pattern)):
            return False
    return any(relative.match(pattern) for pattern in includes)


class _ParentWatch:
    """The stop event watchfiles polls every 50 ms once it watches: the first poll says so to the parent,
    and the event is set once the parent has gone."""

    def __init__(self, parent: int) -> None:
        self.parent = parent
        self.told = False

    def is_set(self) -> bool:
        if not self.told:
            self.told = True
            _write({"ready": True})
        return os.getppid() != self.parent


def _write(report: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(report) + "\n")
    sys.stdout.flush()


def main(argument: str) -> None:
    settings = json.loads(argument)
    for signum in (signal.SIGINT, signal.SIGTERM):  # for the parent, which stops this one once it has stopped
        signal.signal(signum, signal.SIG_IGN)
    import watchfiles

    dirs, includes, excludes = settings["dirs"], settings["includes"], settings["excludes"]

    def changed(change: watchfiles.Change, path: str) -> bool:
        return wanted(path, dirs, includes, excludes)

    stop = _ParentWatch(settings["parent"])
    for changes in watchfiles.watch(*dirs, watch_filter=changed, stop_event=stop, raise_interrupt=False):
        paths = sorted({path for _, path in changes})
        _write({"paths": paths[:MAX_PATHS], "more": max(0, len(paths) - MAX_PATHS)})


if __name__ == "__main__":
    main(sys.argv[1])

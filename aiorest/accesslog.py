"""The access log: one line per answered request, written by a thread so that the loop never waits.

The loop's share is small and never blocks: when a request is answered it
puts a tuple of what it knows (the time, the client, the request line, status,
body bytes, duration, route template, request id, the raw headers) in a
bounded queue; when the queue is full the record is dropped and counted, and
a warning says how many were dropped, at most once every ten seconds. A
writer thread takes records off the queue, formats them — in the combined
format, or as JSON lines — and writes them in batches, one write and one
flush for as many records as were waiting.

It does not go through ``logging``: a LogRecord, a handler's lock and a flush
per line would cost the loop (or, under the GIL, the process) several times
what this costs, for a log that has a fixed shape anyway.

Every value a client sent is escaped (combined: ``"``, ``\\``, control and
non-ASCII bytes as ``\\xHH``, as nginx does; JSON: the encoder's escapes), so
that no client can end a line or a field early and forge another.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import queue
import select
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from .requestid import format_request_id

if TYPE_CHECKING:
    from .request import Request

__all__ = ["AccessLog", "FORMATS"]

logger = logging.getLogger("aiorest.access")

FORMATS = ("combined", "json")
_REPORT_EVERY = 10.0  # seconds between two warnings about dropped records
_BATCH = 512  # records taken off the queue at a time
_PIPE_BUF = select.PIPE_BUF  # a write to a pipe at most this long is atomic
_STOP = None

_monotonic = time.monotonic
_time = time.time

# Bytes a client sent, shown in a combined line: printable ASCII as is, the rest as \xHH.
_ESCAPES = {code: f"\\x{code:02X}" for code in range(256) if code < 0x20 or code >= 0x7F or chr(code) in '"\\'}
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def _escape(value: bytes) -> str:
    return value.decode("latin-1").translate(_ESCAPES)


class AccessLog:
    """Writes a line for each answered request to ``target`` (a path, or ``-`` for stdout).

    ``format`` is ``"combined"`` or ``"json"``; at most ``queue_size`` records
    wait for the writer; past that they are dropped and counted in ``dropped``.
    Call :meth:`start` on the serving loop's thread, :meth:`stop` to write
    what is queued and end the writer.
    """

    def __init__(self, target: str = "-", format: str = "combined", *, queue_size: int = 10_000) -> None:
        if format not in FORMATS:
            raise ValueError(f"access log format must be one of {', '.join(FORMATS)}, got {format!r}")
        if queue_size < 1:
            raise ValueError(f"access log queue_size must be at least 1, got {queue_size}")
        self.target = target
        self.format = format
        self.queue_size = queue_size
        self.dropped = 0
        self._reported = 0  # drops already reported
        self._report_at = 0.0
        self._queue: queue.SimpleQueue[tuple[Any, ...] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._fd: int | None = None

    def start(self) -> None:
        """Open the target and start the writer thread."""
        if self._thread is not None:
            return
        if self.target == "-":
            try:
                self._fd = os.dup(sys.stdout.fileno())
            except (AttributeError, OSError, ValueError):  # a stdout without a file (replaced in tests)
                self._fd = None
        else:
            self._fd = os.open(self.target, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        self._thread = threading.Thread(target=self._write_lines, name="aiorest-access-log", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Write what is queued, end the writer, close the file; report drops not yet reported."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._queue.put(_STOP)  # past the bound, by one: the writer must see it
        thread.join()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._report()

    # -- on the loop -----------------------------------------------------------------

    def log(self, request: Request, status: int, sent: int) -> None:
        """Queue the record of ``request``, answered with ``status`` and ``sent`` body bytes."""
        records = self._queue
        if records.qsize() >= self.queue_size or self._thread is None:
            self.dropped += 1
            if _monotonic() >= self._report_at:
                self._report()
            return
        records.put(
            (
                _time(),
                request.client,
                request.method,
                request.raw_path,
                request.query_string,
                request.http_version,
                status,
                sent,
                _monotonic() - request._started,
                request.route_template,
                request._id,
                request._raw_headers,
            )
        )

    def log_message(self, request: Request, message: bytes) -> None:
        """Queue the record of ``request``, answered with ``message``: a whole response, head and body."""
        self.log(request, int(message[9:12]), len(message) - message.find(b"\r\n\r\n") - 4)

    def _report(self) -> None:
        count = self.dropped - self._reported
        if count:
            self._reported = self.dropped
            logger.warning(
                "access log: %d records dropped (%d in all): the writer cannot keep up with %d waiting",
                count,
                self.dropped,
                self.queue_size,
            )
        self._report_at = _monotonic() + _REPORT_EVERY

    # -- in the writer thread ----------------------------------------------------------

    def _write_lines(self) -> None:
        records = self._queue
        line = _json_line if self.format == "json" else _combined_line
        failed = False
        while True:
            record = records.get()
            batch = []
            stopping = record is _STOP
            while record is not _STOP:
                batch.append(line(record))
                if len(batch) >= _BATCH:
                    break
                try:
                    record = records.get_nowait()
                except queue.Empty:
                    break
                stopping = record is _STOP
            try:
                self._output(batch)
            except (OSError, ValueError) as exc:
                if not failed:  # once: a full disk would otherwise fill the error log too
                    failed = True
                    logger.error("access log: cannot write to %s: %s", self.target, exc)
            if stopping:
                return

    def _output(self, lines: list[str]) -> None:
        """Write ``lines`` in writes of whole lines of at most PIPE_BUF bytes where possible: the
        workers of a server write to one file or pipe, and such a write is never split by another's."""
        if self._fd is None:
            sys.stdout.write("".join(lines))
            sys.stdout.flush()
            return
        chunk: list[bytes] = []
        size = 0
        for line in lines:
            data = line.encode("ascii")
            if size + len(data) > _PIPE_BUF and chunk:
                self._write_all(b"".join(chunk))
                chunk, size = [], 0
            chunk.append(data)
            size += len(data)
        if chunk:
            self._write_all(b"".join(chunk))

    def _write_all(self, data: bytes) -> None:
        assert self._fd is not None
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]


def _fields(record: tuple[Any, ...]) -> dict[str, Any]:
    (stamp, client, method, raw_path, query, version, status, sent, duration, template, rid, headers) = record
    user_agent = referer = None
    for name, value in headers:
        size = len(name)
        if size == 10 and user_agent is None and name.lower() == b"user-agent":
            user_agent = value
        elif size == 7 and referer is None and name.lower() == b"referer":
            referer = value
    return {
        "time": stamp,
        "remote": client[0] if client is not None else None,
        "method": method,
        "target": raw_path + b"?" + query.encode("latin-1") if query else raw_path,
        "protocol": f"HTTP/{version}",
        "status": status,
        "bytes": sent,
        "duration": duration,
        "route": template,
        "request_id": format_request_id(rid),
        "user_agent": user_agent,
        "referer": referer,
    }


@functools.lru_cache(maxsize=4)
def _clf_time(second: int) -> str:
    """``10/Oct/2000:13:55:36 +0000``: formatted once a second."""
    t = time.gmtime(second)
    day = f"{t.tm_mday:02d}/{_MONTHS[t.tm_mon - 1]}/{t.tm_year}"
    return f"{day}:{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} +0000"


def _combined_line(record: tuple[Any, ...]) -> str:
    """The combined format, then the duration in seconds, the route template and the request id:

    ``remote - - [time] "request line" status bytes "referer" "user agent" duration "route" id``
    """
    f = _fields(record)
    route = f["route"]
    return (
        f"{f['remote'] or '-'} - - [{_clf_time(int(f['time']))}] "
        f'"{f["method"]} {_escape(f["target"])} {f["protocol"]}" {f["status"]} {f["bytes"]} '
        f'"{_escape(f["referer"]) if f["referer"] is not None else "-"}" '
        f'"{_escape(f["user_agent"]) if f["user_agent"] is not None else "-"}" '
        f'{f["duration"]:.6f} "{_escape(route.encode()) if route is not None else "-"}" {f["request_id"]}\n'
    )


def _json_line(record: tuple[Any, ...]) -> str:
    f = _fields(record)
    f["time"] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(f["time"])) + f".{int(f['time'] % 1 * 1000):03d}Z"
    f["target"] = f["target"].decode("latin-1")
    f["duration"] = round(f["duration"], 6)
    for name in ("user_agent", "referer"):
        if f[name] is not None:
            f[name] = f[name].decode("latin-1")
    return json.dumps(f, separators=(",", ":")) + "\n"

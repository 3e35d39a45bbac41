"""The access log: one line per answered request, written by a thread so that the loop never waits.

The loop's share is small and never blocks: when a request is answered it
puts a tuple of what it knows (the time, the client, the request line, status,
body bytes, duration, route template, request id, the raw headers) in a
bounded queue; when the queue is full the record is dropped and counted, and
a warning says how many were dropped, at most once every ten seconds. A
writer thread wakes when records wait, lets those of the next 10 ms gather
(waking it once per record cost more than formatting the line: /json served
0.56 times the requests/s with the log on, 0.72-0.75 with batches), formats
them — in the combined format, or as JSON lines — and writes them: one
write(2) for as many whole lines as fit in PIPE_BUF, never split by another
worker's.

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
_GATHER = 0.01  # seconds the writer lets records gather before it takes them (10,000 at 1M/s)
_PIPE_BUF = select.PIPE_BUF  # a write to a pipe at most this long is atomic
_STOP = None

_monotonic = time.monotonic
_time = time.time

# Bytes a client sent, shown in a combined line: printable ASCII as is, the rest as \xHH.
_ESCAPES = {code: f"\\x{code:02X}" for code in range(256) if code < 0x20 or code >= 0x7F or chr(code) in '"\\'}
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def _escape(value: bytes) -> str:
    text = value.decode("latin-1")
    if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        return text  # the common case: nothing to escape (isprintable: no control character)
    return text.translate(_ESCAPES)


_encode_json = json.JSONEncoder().encode  # ensure_ascii: non-ASCII as \\uXXXX


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

    def start(self) -> None:
        """Open the target and start the writer thread."""
        if self._thread is not None:
            return
        fd: int | None
        if self.target == "-":
            try:
                fd = os.dup(sys.stdout.fileno())
            except (AttributeError, OSError, ValueError):  # a stdout without a file (replaced in tests)
                fd = None
        else:
            fd = os.open(self.target, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        # The writer owns its queue and its file: one left behind by stop() cannot take a later one's.
        self._queue = queue.SimpleQueue()
        self._thread = threading.Thread(
            target=self._write_lines, args=(self._queue, fd), name="aiorest-access-log", daemon=True
        )
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Write what is queued, end the writer (it closes the file); report drops not yet reported.

        Waits at most ``timeout`` seconds: a writer blocked by a reader that does not read
        (a full pipe) is left to finish by itself, and an error says so.
        """
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._queue.put(_STOP)  # past the bound, by one: the writer must see it
        thread.join(timeout)
        if thread.is_alive():
            logger.error(
                "access log: the writer has not finished writing to %s within %g s (%d records waiting); "
                "it goes on by itself, and what it has not written when the process exits is lost",
                self.target,
                timeout,
                self._queue.qsize(),
            )
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

    def _write_lines(self, records: queue.SimpleQueue[tuple[Any, ...] | None], fd: int | None) -> None:
        line = _json_line if self.format == "json" else _combined_line
        failed = False
        try:
            while True:
                record = records.get()  # an idle server's writer sleeps here
                # Let the records of the next few milliseconds gather: one wake-up of this
                # thread per batch, not per request (waking it for each cost more than the line).
                time.sleep(_GATHER)
                chunk: list[str] = []
                size = 0
                while record is not _STOP:
                    text = line(record)
                    if chunk and size + len(text) > _PIPE_BUF:  # the write would no longer be atomic
                        failed = self._output(chunk, failed, fd)
                        chunk, size = [], 0
                    chunk.append(text)
                    size += len(text)
                    try:
                        record = records.get_nowait()
                    except queue.Empty:
                        break
                if chunk:
                    failed = self._output(chunk, failed, fd)
                if record is _STOP:
                    return
        finally:
            if fd is not None:
                os.close(fd)

    def _output(self, lines: list[str], failed: bool, fd: int | None) -> bool:
        """Write ``lines`` (at most PIPE_BUF bytes, unless one line is longer) in one write: several
        workers may write to one file or pipe, and such a write is never split by another's.
        True once a write failed."""
        try:
            if fd is None:
                sys.stdout.write("".join(lines))
                sys.stdout.flush()
            else:
                data = memoryview("".join(lines).encode("ascii"))
                while data:
                    data = data[os.write(fd, data) :]
        except (OSError, ValueError) as exc:
            if not failed:  # once: a full disk would otherwise fill the error log too
                logger.error("access log: cannot write to %s: %s", self.target, exc)
            return True
        return failed


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    size = len(name)
    for key, value in headers:
        if len(key) == size and key.lower() == name:
            return value
    return None


@functools.lru_cache(maxsize=4)
def _clf_time(second: int) -> str:
    """``10/Oct/2000:13:55:36 +0000``: formatted once a second."""
    t = time.gmtime(second)
    day = f"{t.tm_mday:02d}/{_MONTHS[t.tm_mon - 1]}/{t.tm_year}"
    return f"{day}:{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} +0000"


@functools.lru_cache(maxsize=4)
def _iso_second(second: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))


def _combined_line(record: tuple[Any, ...]) -> str:
    """The combined format, then the duration in seconds, the route template and the request id:

    ``remote - - [time] "request line" status bytes "referer" "user agent" duration "route" id``
    """
    stamp, client, method, raw_path, query, version, status, sent, duration, route, rid, headers = record
    if not raw_path:  # a head the parser could not read: its answer is logged, with no request line
        request_line = "-"
    else:
        target = _escape(raw_path) if not query else f"{_escape(raw_path)}?{query.translate(_ESCAPES)}"
        request_line = f"{method} {target} HTTP/{version}"
    referer = _header(headers, b"referer")
    agent = _header(headers, b"user-agent")
    remote = client[0] if client is not None else "-"
    return (
        f'{remote} - - [{_clf_time(int(stamp))}] "{request_line}" {status} {sent} '
        f'"{"-" if referer is None else _escape(referer)}" "{"-" if agent is None else _escape(agent)}" '
        f'{duration:.6f} "{"-" if route is None else _escape(route.encode())}" {format_request_id(rid)}\n'
    )


def _json_line(record: tuple[Any, ...]) -> str:
    """The same fields as a JSON object on one line; only what a client sent may need escaping."""
    stamp, client, method, raw_path, query, version, status, sent, duration, route, rid, headers = record
    referer = _header(headers, b"referer")
    agent = _header(headers, b"user-agent")
    if raw_path:
        target = _json_string(raw_path.decode("latin-1") + (f"?{query}" if query else ""))
        request = f'"method":"{method}","target":{target},"protocol":"HTTP/{version}"'
    else:  # a head the parser could not read
        request = '"method":null,"target":null,"protocol":null'
    return (
        f'{{"time":"{_iso_second(int(stamp))}.{int(stamp % 1 * 1000):03d}Z",'
        f'"remote":{"null" if client is None else _json_string(client[0])},{request},'
        f'"status":{status},"bytes":{sent},'
        f'"duration":{duration:.6f},"route":{"null" if route is None else _json_string(route)},'
        f'"request_id":"{format_request_id(rid)}",'
        f'"user_agent":{"null" if agent is None else _json_string(agent.decode("latin-1"))},'
        f'"referer":{"null" if referer is None else _json_string(referer.decode("latin-1"))}}}\n'
    )


def _json_string(value: str) -> str:
    if value.isascii() and value.isprintable() and '"' not in value and "\\" not in value:
        return f'"{value}"'
    return _encode_json(value)

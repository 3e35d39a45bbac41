"""The access log: one line per answered request, written by a thread so that the loop never waits.

When a request is answered the loop keeps a tuple of what it knows (the time,
the client, the request line, status, body bytes, duration, route template,
request id, the raw headers, the trace id). Every 10 ms a timer of the loop formats those
gathered meanwhile — in the combined format, or as JSON lines — into chunks
of whole lines of at most PIPE_BUF bytes, and hands them to a writer thread,
which only writes them: one write(2) a chunk, never split by another
worker's, with the GIL released while the kernel writes.

The formatting is the loop's on purpose. A writer thread that formatted the
lines held the GIL for as long, and the two threads handed the GIL to each
other hundreds of times a second (a context switch each, on a server pinned
to one CPU): /json served 0.61 times the requests/s with the log on, for
about 1.2 µs of formatting a line. See docs/deployment/observe.inc for the
figures now.

At most ``queue_size`` records wait (gathered, or formatted and not yet
written); past that a record is dropped and counted, and a warning says how
many were dropped, at most once every ten seconds. The loop never blocks on
the log: only the writer waits for a slow disk or a reader that does not read.

It does not go through ``logging``: a LogRecord, a handler's lock and a flush
per line would cost the loop several times what this costs, for a log that
has a fixed shape anyway.

Every value a client sent is escaped (combined: ``"``, ``\\``, control and
non-ASCII bytes as ``\\xHH``, as nginx does; JSON: the encoder's escapes), so
that no client can end a line or a field early and forge another.
"""

from __future__ import annotations

import asyncio
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

from .._support.bursts import BurstLog
from ..http.datastructures import raw_header
from ..http.requestid import format_request_id

if TYPE_CHECKING:
    from ..http.request import Request

__all__ = ["AccessLog", "FORMATS"]

logger = logging.getLogger("aiorest.access")

FORMATS = ("combined", "json")
_REPORT_EVERY = 10.0  # seconds between two warnings about dropped records
_GATHER = 0.01  # seconds the loop lets records gather before it formats them
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
        self._drops = BurstLog(
            logger,
            lambda count, _: (
                f"access log: {count} records dropped ({self.dropped} in all):"
                f" the writer cannot keep up with {self.queue_size} waiting"
            ),
            every=_REPORT_EVERY,
        )
        self._line = _json_line if format == "json" else _combined_line
        # On the loop: the records gathered, and how many more may be (see _hand_off).
        self._records: list[tuple[Any, ...]] = []
        self._room = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        # Records handed to the writer (counted by the loop) and written (by the writer): each
        # count is changed by one thread only, so that no update is lost between the two.
        self._handed = 0
        self._written = 0
        self._chunks: queue.SimpleQueue[tuple[list[bytes], int] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Open the target and start the writer thread.

        Called on the serving loop's thread, the records gather and are formatted every
        10 ms there; without a running loop, each is formatted and handed off at once.
        """
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
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None
        # The writer owns its queue and its file: one left behind by stop() cannot take a later one's.
        self._chunks = queue.SimpleQueue()
        self._handed = self._written = 0
        self._room = self.queue_size
        self._thread = threading.Thread(
            target=self._write_chunks, args=(self._chunks, fd), name="aiorest-access-log", daemon=True
        )
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Write what is gathered and queued, end the writer (it closes the file); report drops not yet reported.

        Waits at most ``timeout`` seconds: a writer blocked by a reader that does not read
        (a full pipe) is left to finish by itself, and an error says so.
        """
        thread = self._thread
        if thread is None:
            return
        self._hand_off()
        self._thread = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._chunks.put(_STOP)
        thread.join(timeout)
        if thread.is_alive():
            logger.error(
                "access log: the writer has not finished writing to %s within %g s (%d records waiting); "
                "it goes on by itself, and what it has not written when the process exits is lost",
                self.target,
                timeout,
                self._handed - self._written,
            )
        self._drops.flush()

    # -- on the loop -----------------------------------------------------------------

    def log(self, request: Request, status: int, sent: int, started: float) -> None:
        """Keep the record of ``request``, answered with ``status`` and ``sent`` body bytes; its
        handler began at ``started`` (``time.monotonic()``)."""
        records = self._records
        if len(records) >= self._room or self._thread is None:
            self.dropped += 1
            self._drops.note()
            return
        records.append(
            (
                _time(),
                request.client,
                request.method,
                request.raw_path,
                request.query_string,
                request.http_version,
                status,
                sent,
                _monotonic() - started,
                request.route_template,
                request.raw_id,
                request.raw_headers,
                request.trace_id,
            )
        )
        if self._timer is None:
            if self._loop is None:
                self._hand_off()
            else:
                self._timer = self._loop.call_later(_GATHER, self._hand_off)

    def log_message(self, request: Request, message: bytes, started: float) -> None:
        """Keep the record of ``request``, answered with ``message``: a whole response, head and body."""
        self.log(request, int(message[9:12]), len(message) - message.find(b"\r\n\r\n") - 4, started)

    def _hand_off(self) -> None:
        """Format the records gathered into chunks of whole lines, at most PIPE_BUF bytes each
        (unless one line is longer), and queue them for the writer."""
        self._timer = None
        records = self._records
        if records:
            self._records = []
            line = self._line
            chunks: list[bytes] = []
            chunk: list[str] = []
            size = 0
            for record in records:
                text = line(record)
                if chunk and size + len(text) > _PIPE_BUF:  # the write would no longer be atomic
                    chunks.append("".join(chunk).encode("ascii"))
                    chunk, size = [], 0
                chunk.append(text)
                size += len(text)
            chunks.append("".join(chunk).encode("ascii"))
            self._handed += len(records)
            self._chunks.put((chunks, len(records)))
        self._room = self.queue_size - (self._handed - self._written)

    # -- in the writer thread ----------------------------------------------------------

    def _write_chunks(self, chunks: queue.SimpleQueue[tuple[list[bytes], int] | None], fd: int | None) -> None:
        failed = False
        try:
            while True:
                item = chunks.get()  # an idle server's writer sleeps here
                if item is _STOP:
                    return
                batch, count = item
                for chunk in batch:
                    failed = self._output(chunk, failed, fd)
                self._written += count
        finally:
            if fd is not None:
                os.close(fd)

    def _output(self, chunk: bytes, failed: bool, fd: int | None) -> bool:
        """Write ``chunk`` (whole lines, at most PIPE_BUF bytes unless one line is longer) in one
        write: several workers may write to one file or pipe, and such a write is never split
        by another's. True once a write failed."""
        try:
            if fd is None:
                sys.stdout.write(chunk.decode("ascii"))
                sys.stdout.flush()
            else:
                data = memoryview(chunk)
                while data:
                    data = data[os.write(fd, data) :]
        except (OSError, ValueError) as exc:
            if not failed:  # once: a full disk would otherwise fill the error log too
                logger.error("access log: cannot write to %s: %s", self.target, exc)
            return True
        return failed


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
    """The combined format, then the duration in seconds, the route template and the request id, and the
    trace id when tracing is on (a field more at the end, where readers of the combined format stop reading):

    ``remote - - [time] "request line" status bytes "referer" "user agent" duration "route" id [trace_id]``
    """
    stamp, client, method, raw_path, query, version, status, sent, duration, route, rid, headers, trace = record
    if not raw_path:  # a head the parser could not read: its answer is logged, with no request line
        request_line = "-"
    else:
        target = _escape(raw_path) if not query else f"{_escape(raw_path)}?{query.translate(_ESCAPES)}"
        request_line = f"{method} {target} HTTP/{version}"
    referer = raw_header(headers, b"referer")
    agent = raw_header(headers, b"user-agent")
    remote = client[0] if client is not None else "-"
    return (
        f'{remote} - - [{_clf_time(int(stamp))}] "{request_line}" {status} {sent} '
        f'"{"-" if referer is None else _escape(referer)}" "{"-" if agent is None else _escape(agent)}" '
        f'{duration:.6f} "{"-" if route is None else _escape(route.encode())}" {format_request_id(rid)}'
        f"{'' if trace is None else ' ' + trace}\n"
    )


def _json_line(record: tuple[Any, ...]) -> str:
    """The same fields as a JSON object on one line; only what a client sent may need escaping."""
    stamp, client, method, raw_path, query, version, status, sent, duration, route, rid, headers, trace = record
    referer = raw_header(headers, b"referer")
    agent = raw_header(headers, b"user-agent")
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
        f'"request_id":"{format_request_id(rid)}","trace_id":{"null" if trace is None else _json_string(trace)},'
        f'"user_agent":{"null" if agent is None else _json_string(agent.decode("latin-1"))},'
        f'"referer":{"null" if referer is None else _json_string(referer.decode("latin-1"))}}}\n'
    )


def _json_string(value: str) -> str:
    if value.isascii() and value.isprintable() and '"' not in value and "\\" not in value:
        return f'"{value}"'
    return _encode_json(value)

"""The blocked-loop detector: which handler kept the event loop busy, for how long, and where it was stuck.

Two parts. On the loop, a heartbeat: a timer every ``threshold / 4`` seconds (5 ms at least) that
writes when it is next due (one float; no work per request). In a daemon thread,
the watchdog: it wakes as often, and when the heartbeat is overdue by
``threshold`` or more, the loop has run no timer for that long. The watchdog then
reads the loop thread's stack *while it is stuck* (``sys._current_frames()``)
and, in it, the request being answered: the frame of the server's handler driver
(``handler_code``, given by the server) holds it as its local ``request``, so
knowing the current request costs nothing per request. It logs one WARNING (the
route template, the request id, the stack) and, once the heartbeat runs again,
one INFO with the block's whole duration: between how late the heartbeat ran
and that plus ``threshold / 4`` (the block may have begun just after the last
heartbeat); the counts add the lower bound.

Bounded. A logged stack begins an interval of ``report_interval`` seconds in
which each route logs one stack at most, and ``STACKS_PER_INTERVAL`` routes at
most: the other blocks are counted, and summarized in one WARNING when the
interval is over (or when the server stops). The counts by route (``totals``, read by the
metrics) have at most ``MAX_ROUTES`` routes; past them, and for work outside a
request (a timer, a background task), the route is ``OTHER``.

A block inside C code that holds the GIL (a long regex, a big integer, a C
extension that does not release it) keeps the watchdog from running too: it is
seen, and its stack read, only once the GIL is let go (usually the line that
called the C code, which has just returned), and the WARNING says it was read late.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import traceback
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from sys import _current_frames  # documented in the sys module: each thread's innermost frame
from types import CodeType, FrameType
from typing import Any

from ..http.requestid import format_request_id, request_id_var

__all__ = ["BlockedLoopDetector", "DEVELOPMENT_THRESHOLD", "OTHER"]

logger = logging.getLogger("aiorest.blocked")

#: The threshold ``aiorest run --reload`` turns the detector on with, unless given.
DEVELOPMENT_THRESHOLD = 0.1
#: The route of a block outside a request's handler, and of routes past MAX_ROUTES.
OTHER = "<other>"
#: The route of a request no route matched (as in the request metrics).
UNMATCHED = "<unmatched>"
MAX_ROUTES = 1000
#: Seconds after a logged stack during which other blocks log one stack per route, STACKS_PER_INTERVAL
#: at most; the rest are counted, then summarized.
REPORT_INTERVAL = 10.0
STACKS_PER_INTERVAL = 5
STACK_FRAMES = 40  # the innermost frames logged
MIN_INTERVAL = 0.005  # seconds between two heartbeats at least, however low the threshold
_SUMMARY_ROUTES = 10  # routes a summary names; the others are counted together

_JOIN_TIMEOUT = 5.0
_monotonic = time.monotonic


@dataclass
class _Block:
    due: float  # when the heartbeat that is late was due
    route: str
    raw_id: Any  # the request's id as the server keeps it (None outside a request)
    reported: bool


class BlockedLoopDetector:
    """Logs and counts the times the event loop is blocked for ``threshold`` seconds or more (see the module).

    ``handler_code``: the code object of the function whose frame's ``request`` local is the request being
    answered (the server's handler driver); without it every block is counted under ``OTHER``.
    """

    def __init__(
        self, threshold: float, handler_code: CodeType | None = None, *, report_interval: float = REPORT_INTERVAL
    ) -> None:
        if not threshold > 0:
            raise ValueError(f"the blocked-loop threshold must be more than 0 seconds, got {threshold}")
        self.threshold = threshold
        self.interval = max(threshold / 4, MIN_INTERVAL)
        self.report_interval = report_interval
        self.handler_code = handler_code
        self._due = 0.0  # written by the heartbeat only
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._heartbeat: asyncio.TimerHandle | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        # written by the watchdog, read by the metrics on the loop
        self._lock = threading.Lock()
        self._totals: dict[str, tuple[int, float]] = {}
        self.changes = 0  # bumped at each change of the totals: a reader compares it first
        # the watchdog's own
        self._quiet_until = 0.0  # the end of the interval of the last stack logged
        self._logged_routes: set[str] = set()  # the routes whose stack it logged
        self._suppressed: Counter[str] = Counter()
        self._suppressed_longest = 0.0

    @classmethod
    def of(cls, threshold: float | None, handler_code: CodeType | None = None) -> BlockedLoopDetector | None:
        """A detector, or None when ``threshold`` is None or 0 (off)."""
        return cls(threshold, handler_code) if threshold else None

    # -- on the loop -----------------------------------------------------------------------

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start the heartbeat on ``loop`` (from its thread) and the watchdog thread."""
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._beat()
        self._stopping.clear()
        self._thread = threading.Thread(target=self._watch, name="aiorest-blocked-loop", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        assert self._loop is not None
        self._due = _monotonic() + self.interval
        self._heartbeat = self._loop.call_later(self.interval, self._beat)

    def stop(self) -> None:
        """Stop the watchdog (its summary of blocks not yet logged is logged) and the heartbeat."""
        thread, self._thread = self._thread, None
        if thread is not None:
            self._stopping.set()
            thread.join(timeout=_JOIN_TIMEOUT)  # a log handler stuck for longer: the daemon thread is left
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            self._heartbeat = None

    def totals(self) -> dict[str, tuple[int, float]]:
        """Route → (blocks, seconds blocked) since the start, a copy. A block is counted when it is seen,
        its seconds when it ends."""
        with self._lock:
            return dict(self._totals)

    # -- in the watchdog thread -------------------------------------------------------------

    def _watch(self) -> None:
        try:
            self._watch_until_stopped()
        except Exception:  # a bug of ours: say so, and leave the server alone
            logger.exception("the blocked-loop watchdog failed: blocks are no longer detected")

    def _watch_until_stopped(self) -> None:
        block: _Block | None = None
        waited_from = _monotonic()
        while not self._stopping.wait(self.interval):
            now = _monotonic()
            held_up, waited_from = now - waited_from - self.interval, now  # past its wake-up, waiting for the GIL
            due = self._due
            if block is not None:
                if due == block.due:
                    continue  # still stuck: logged already
                # the heartbeat ran, as late as the loop was blocked
                self._ended(block, due - self.interval - block.due)
                block = None
            if self._suppressed and now >= self._quiet_until:
                self._summarize()
            if now - due >= self.threshold:
                block = self._began(due, now, held_up)
        if block is not None:  # the server stops on the loop: it runs again
            self._ended(block, _monotonic() - block.due)
        if self._suppressed:
            self._summarize()

    def _began(self, due: float, now: float, held_up: float) -> _Block:
        frame = _current_frames().get(self._loop_thread)
        driver = self._driver_frame(frame)
        request = None if driver is None else driver.f_locals.get("request")
        route = OTHER if request is None else (request.route_template or UNMATCHED)
        raw_id = None if request is None else request.raw_id
        with self._lock:
            if route not in self._totals and len(self._totals) >= MAX_ROUTES:
                route = OTHER
            blocks, seconds = self._totals.get(route, (0, 0.0))
            self._totals[route] = (blocks + 1, seconds)
            self.changes += 1
        if now >= self._quiet_until:  # a new interval
            self._quiet_until = now + self.report_interval
            self._logged_routes.clear()
        elif route in self._logged_routes or len(self._logged_routes) >= STACKS_PER_INTERVAL:
            self._suppressed[route] += 1
            return _Block(due, route, raw_id, reported=False)
        self._logged_routes.add(route)
        late = ""  # the watchdog woke up late: the loop thread kept the GIL
        if held_up >= self.threshold / 2:
            late = f" (read {held_up:.3f} s late: the GIL was held, by C code most likely)"
        where = "outside any request"
        if request is not None:
            where = f"in {request.method} {route} (request {format_request_id(request.raw_id)})"
        self._log(
            raw_id,
            logging.WARNING,
            "event loop blocked for %.3f s so far %s; where it is stuck%s (innermost last):\n%s",
            now - due,
            where,
            late,
            _stack(frame, driver),
            extra={"route": route, "blocked_seconds": round(now - due, 6)},
        )
        return _Block(due, route, raw_id, reported=True)

    def _ended(self, block: _Block, seconds: float) -> None:
        seconds = max(seconds, self.threshold)
        with self._lock:
            blocks, total = self._totals[block.route]
            self._totals[block.route] = (blocks, total + seconds)
            self.changes += 1
        if not block.reported:
            self._suppressed_longest = max(self._suppressed_longest, seconds)
            return
        whose = OTHER if block.raw_id is None else f"{block.route} (request {format_request_id(block.raw_id)})"
        self._log(
            block.raw_id,
            logging.INFO,
            "event loop was blocked for %.3f-%.3f s in all, by %s",
            seconds,
            seconds + self.interval,  # it may have begun just after the last heartbeat
            whose,
            extra={"route": block.route, "blocked_seconds": round(seconds, 6)},
        )

    def _summarize(self) -> None:
        counts, self._suppressed = self._suppressed, Counter()
        longest, self._suppressed_longest = self._suppressed_longest, 0.0
        named = counts.most_common(_SUMMARY_ROUTES)
        routes = ", ".join(f"{route} {count}" for route, count in named)
        rest = sum(counts.values()) - sum(count for _, count in named)
        if rest:
            routes += f", other routes {rest}"
        logger.warning(
            "event loop blocked %d more times (for up to %.3f s) in the %.0f s after the last one logged: %s",
            sum(counts.values()),
            longest,
            self.report_interval,
            routes,
            extra={"blocked_routes": dict(named), "blocked_seconds": round(longest, 6)},
        )

    def _driver_frame(self, frame: FrameType | None) -> FrameType | None:
        """The frame of ``handler_code`` in the stack ending at ``frame``: a request's handler runs there."""
        code = self.handler_code
        while frame is not None and code is not None:
            if frame.f_code is code:
                return frame
            frame = frame.f_back
        return None

    def _log(self, raw_id: Any, level: int, message: str, *args: Any, extra: dict[str, Any]) -> None:
        """Log with the request's id as the record's (``%(request_id)s``), as if its handler had."""
        token = request_id_var.set(raw_id) if raw_id is not None else None
        try:
            logger.log(level, message, *args, extra=extra)
        finally:
            if token is not None:
                request_id_var.reset(token)


def _stack(frame: FrameType | None, outermost: FrameType | None) -> str:
    """The stack ending at ``frame``, from ``outermost`` (all of it if None; STACK_FRAMES frames at most)."""
    if frame is None:
        return "  (the loop's thread has no Python frame)\n"

    def frames() -> Iterator[tuple[FrameType, int]]:
        for found, line in traceback.walk_stack(frame):
            yield found, line
            if found is outermost:
                return

    summary = traceback.StackSummary.extract(frames(), limit=STACK_FRAMES)
    summary.reverse()
    return "".join(summary.format())

"""Prometheus metrics (``prometheus_client``), served at ``/metrics`` on the server's port.

Names (see docs/deployment): ``aiorest_requests_total{route,method,status}``,
``aiorest_request_duration_seconds{route}``, ``aiorest_requests_in_flight``,
``aiorest_admission_rejections_total{reason}``, ``aiorest_admission_queued``,
``aiorest_event_loop_lag_seconds``, ``aiorest_event_loop_blocked_total{route}`` and
``aiorest_event_loop_blocked_seconds_total{route}`` (with the blocked-loop detector on),
the ``aiorest_db_pool_*`` gauges and the background
tasks' ``aiorest_background_tasks_pending``, ``aiorest_background_tasks_done_total`` and
``aiorest_background_tasks_failed_total``.
``route`` is the route's template, never the raw path (``<unmatched>`` when no
route's handler ran: 404, 405, automatic OPTIONS), so the labels are bounded;
``method`` is one of the methods routes can have, else ``OTHER``.

Several workers: with ``PROMETHEUS_MULTIPROC_DIR`` set, prometheus_client keeps
each process's values in files there and ``/metrics`` sums the files of every
worker, whichever worker answers. ``aiorest run --workers N --metrics`` sets it
up: :func:`prepare_multiprocess_dir` in the parent before anything imports
prometheus_client, :func:`worker_exited` when a worker ends.

The metrics are a layer (see ``App.startup``) around each endpoint, made when
the server starts with ``metrics=True``; off, nothing of this module runs.

The layer counts in plain ints of the worker (per route: counts by method and
status, the histogram's bucket counts and sum; the requests in flight), not
in prometheus_client's values: those take a lock each (in multiprocess mode
also write to a mapped file), five a request, which cost more than the
framework's own work on a small endpoint. The counts are flushed into
prometheus_client at every tick of the event-loop lag timer (every 50 ms),
before each scrape this worker answers, and when the server stops: none is
lost, and a scrape answered by another worker sees this one's at most 50 ms
late (a worker killed with SIGKILL loses its last 50 ms).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from bisect import bisect_left
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..http.conditional import answered_as_sent
from ..http.response import Response, response_status
from ..routing.route import METHODS, Route

if TYPE_CHECKING:
    from ..app.application import App
    from ..http.request import Request
    from ..routing.route import Handler
    from .admission import Admission
    from .blocking import BlockedLoopDetector

__all__ = ["Metrics", "prepare_multiprocess_dir", "worker_exited"]

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
UNMATCHED = "<unmatched>"
#: the status counted for a handler cancelled because its client left (nginx's "client closed request")
CLIENT_GONE = 499
DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
_SAMPLE_INTERVAL = 1.0  # seconds between two readings of the pool and queue gauges


def prometheus_available() -> bool:
    """Whether prometheus_client can be imported (without importing it)."""
    import importlib.util

    return importlib.util.find_spec("prometheus_client") is not None


def _import_prometheus() -> Any:
    try:
        import prometheus_client
        import prometheus_client.multiprocess
    except ImportError:
        raise RuntimeError(
            "metrics need prometheus_client: pip install '.[metrics]' in aiorest's checkout (or run without --metrics)"
        ) from None
    return prometheus_client


class Metrics:
    """The metrics of one server: a layer for the endpoints, the ``/metrics`` route, samplers."""

    def __init__(
        self,
        app: App,
        admission: Admission | None = None,
        database: Any = None,
        websockets: Callable[[], int] | None = None,
    ) -> None:
        """``websockets``: how many WebSockets are open (the server's count), sampled."""
        prom = _import_prometheus()
        self._prom = prom
        self.app = app
        self.admission = admission
        self.database = database
        self.multiprocess = MULTIPROC_ENV in os.environ
        self.registry = registry = prom.CollectorRegistry()
        self.requests = prom.Counter(
            "aiorest_requests", "Requests answered, by route template, method and status.",
            ("route", "method", "status"), registry=registry,
        )  # fmt: skip
        self.duration = prom.Histogram(
            "aiorest_request_duration_seconds", "Time from the handler's start to its answer, by route template.",
            ("route",), buckets=DURATION_BUCKETS, registry=registry,
        )  # fmt: skip
        self.in_flight = self._gauge("aiorest_requests_in_flight", "Requests whose handler is running or waiting.")
        self.rejections = prom.Counter(
            "aiorest_admission_rejections", "Requests answered 503 by admission control, by reason.",
            ("reason",), registry=registry,
        )  # fmt: skip
        self.queued = self._gauge("aiorest_admission_queued", "Requests waiting for a handler slot (sampled).")
        self.loop_lag = prom.Histogram(
            "aiorest_event_loop_lag_seconds", "How late a periodic timer of the event loop fires.",
            buckets=LAG_BUCKETS, registry=registry,
        )  # fmt: skip
        self.loop_blocked = prom.Counter(
            "aiorest_event_loop_blocked", "Times the event loop was blocked past the threshold, by route template.",
            ("route",), registry=registry,
        )  # fmt: skip
        self.loop_blocked_seconds = prom.Counter(
            "aiorest_event_loop_blocked_seconds", "Seconds the event loop was blocked past the threshold, by route.",
            ("route",), registry=registry,
        )  # fmt: skip
        #: the server's blocked-loop detector, when it has one: its counts are flushed with the others
        self.blocked_loop: BlockedLoopDetector | None = None
        self._blocked_seen: tuple[int, dict[str, tuple[int, float]]] = (0, {})  # its changes, totals flushed
        self.pool_size = self._gauge("aiorest_db_pool_size", "Database connections open or being opened.")
        self.pool_max_size = self._gauge("aiorest_db_pool_max_size", "The database pools' max_size.")
        self.pool_in_use = self._gauge("aiorest_db_pool_in_use", "Database connections held by requests.")
        self.pool_waiting = self._gauge("aiorest_db_pool_waiting", "Requests waiting for a database connection.")
        self.pool_waits = prom.Counter(
            "aiorest_db_pool_waits", "Acquisitions that had to wait for a database connection.", registry=registry
        )
        self._pool_waits_seen = 0
        self.background = app.background
        self.background_pending = self._gauge("aiorest_background_tasks_pending", "Background tasks not yet finished.")
        self.background_done = prom.Counter(
            "aiorest_background_tasks_done", "Background tasks that returned.", registry=registry
        )
        self.background_failed = prom.Counter(
            "aiorest_background_tasks_failed",
            "Background tasks that raised, or were cancelled at a stop.",
            registry=registry,
        )
        self._background_seen = (0, 0)  # done, failed: what the counters have
        self._open_websockets = websockets
        self.websockets_open = self._gauge("aiorest_websockets_open", "WebSocket connections open (sampled).")
        self._sampler: asyncio.TimerHandle | None = None
        # counted here, flushed into the values above by flush()
        self.running = 0  # requests in flight
        self._in_flight_flushed = 0
        self._measured: list[_Measured] = []
        self._rejected_counts: dict[str, int] = {}
        if admission is not None:
            admission.on_reject = self._rejected

    def _gauge(self, name: str, documentation: str) -> Any:
        # livesum: the sum over the workers alive (a dead worker's file is removed by worker_exited)
        return self._prom.Gauge(name, documentation, registry=self.registry, multiprocess_mode="livesum")

    def _rejected(self, reason: str) -> None:
        counts = self._rejected_counts
        counts[reason] = counts.get(reason, 0) + 1

    # -- the layer and the route ------------------------------------------------------

    def layer(self, endpoint: Handler, template: str | None) -> Handler:
        """The endpoint, counted and timed under its route template."""
        measured = _Measured(self, endpoint, UNMATCHED if template is None else template)
        self._measured.append(measured)
        return measured

    def routes(self) -> list[Route]:
        return [Route("GET", "/metrics", self.expose)]

    async def expose(self, request: Request) -> Response:
        """The metrics in Prometheus' text format (of every worker, in multiprocess mode)."""
        self.sample()  # this worker's gauges fresh
        self.flush()  # and its counts
        prom = self._prom
        if not self.multiprocess:
            return Response(prom.generate_latest(self.registry), media_type=prom.CONTENT_TYPE_LATEST)
        registry = prom.CollectorRegistry()
        prom.multiprocess.MultiProcessCollector(registry)
        tries = 3
        while True:
            try:
                return Response(prom.generate_latest(registry), media_type=prom.CONTENT_TYPE_LATEST)
            except FileNotFoundError:
                # A dead worker's gauge files, removed by the supervisor between the collector's
                # listing of the directory and its reading them: list it again.
                tries -= 1
                if not tries:
                    raise

    # -- samplers -------------------------------------------------------------------------

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.sample()
        self._sampler = loop.call_later(_SAMPLE_INTERVAL, self._tick, loop)

    def stop(self) -> None:
        if self._sampler is not None:
            self._sampler.cancel()
            self._sampler = None
        self.flush()
        # a worker's gauges must not outlive its serving: zero them (livesum adds them up)
        gauges = (
            self.in_flight,
            self.queued,
            self.pool_size,
            self.pool_max_size,
            self.pool_in_use,
            self.websockets_open,
        )
        for gauge in gauges:
            gauge.set(0)
        self.background_pending.set(0)
        self.pool_waiting.set(0)

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        self.sample()
        self._sampler = loop.call_later(_SAMPLE_INTERVAL, self._tick, loop)

    def sample(self) -> None:
        """Read the gauges that are states, not events: the admission queue, the open WebSockets, the database pool."""
        if self.admission is not None:
            self.queued.set(self.admission.queued)
        if self._open_websockets is not None:
            self.websockets_open.set(self._open_websockets())
        db = self.database
        if db is None:
            return
        self.pool_size.set(db.size)
        self.pool_max_size.set(db.max_size)
        self.pool_in_use.set(db.in_use)
        self.pool_waiting.set(db.waiting)
        waits = db.waits
        if waits > self._pool_waits_seen:
            self.pool_waits.inc(waits - self._pool_waits_seen)
        self._pool_waits_seen = waits

    def observe_lag(self, lag: float) -> None:
        """One sample of the event loop's lag (LoopLagMonitor's ``on_sample``); flushes the counts."""
        self.loop_lag.observe(lag)
        self.flush()

    def flush(self) -> None:
        """Add the counts made since the last flush to prometheus_client's values."""
        for measured in self._measured:
            if measured.pending:
                measured.flush()
        if self.running != self._in_flight_flushed:
            self._in_flight_flushed = self.running
            self.in_flight.set(self.running)
        if self._rejected_counts:
            counts, self._rejected_counts = self._rejected_counts, {}
            for reason, count in counts.items():
                self.rejections.labels(reason).inc(count)
        self._flush_background()
        if self.blocked_loop is not None and self.blocked_loop.changes != self._blocked_seen[0]:
            self._flush_blocked(self.blocked_loop)

    def _flush_blocked(self, detector: BlockedLoopDetector) -> None:
        changes, totals = detector.changes, detector.totals()
        seen = self._blocked_seen[1]
        for route, (blocks, seconds) in totals.items():
            seen_blocks, seen_seconds = seen.get(route, (0, 0.0))
            if blocks > seen_blocks:
                self.loop_blocked.labels(route).inc(blocks - seen_blocks)
            if seconds > seen_seconds:
                self.loop_blocked_seconds.labels(route).inc(seconds - seen_seconds)
        self._blocked_seen = (changes, totals)

    def _flush_background(self) -> None:
        background = self.background
        self.background_pending.set(background.pending)
        done, failed = self._background_seen
        if background.done > done:
            self.background_done.inc(background.done - done)
        if background.failed > failed:
            self.background_failed.inc(background.failed - failed)
        self._background_seen = (background.done, background.failed)


class _Measured:
    """An endpoint counted and timed (an object per route, made at startup).

    Its counts wait in plain ints until :meth:`flush` (see the module's docstring).
    """

    __slots__ = (
        "endpoint", "handle_exception", "metrics", "template", "duration", "counters",
        "counts", "buckets", "sum", "pending",
    )  # fmt: skip

    def __init__(self, metrics: Metrics, endpoint: Handler, template: str) -> None:
        self.endpoint = endpoint
        self.metrics = metrics
        self.template = template
        self.handle_exception = metrics.app.handle_exception
        self.duration = metrics.duration.labels(template)
        if not (hasattr(self.duration, "_buckets") and hasattr(self.duration, "_sum")):
            raise RuntimeError("this prometheus_client's Histogram has no _buckets/_sum: not supported")
        # (method, status) -> the counter's child: bounded, methods are METHODS or OTHER
        self.counters: dict[tuple[str, int], Any] = {}
        # since the last flush: (method, status) -> requests; requests by bucket (the last +Inf); the sum
        self.counts: dict[tuple[str, int], int] = {}
        self.buckets = [0] * (len(DURATION_BUCKETS) + 1)
        self.sum = 0.0
        self.pending = False

    async def __call__(self, request: Request) -> Any:
        metrics = self.metrics
        metrics.running += 1
        start = _perf_counter()
        status = 500
        try:
            try:
                result = await self.endpoint(request)
            except Exception as exc:
                # answered here, not by the server, to count the status it gets
                result = await self.handle_exception(request, exc)
            if isinstance(result, Response):  # count what the server sends: a 304 to a client whose copy is current
                result = answered_as_sent(request, result)
            status = response_status(result)
            return result
        except asyncio.CancelledError:
            status = CLIENT_GONE
            raise
        finally:
            elapsed = _perf_counter() - start
            metrics.running -= 1
            self.buckets[_bisect(DURATION_BUCKETS, elapsed)] += 1
            self.sum += elapsed
            method = request.method
            counts = self.counts
            key = (method if method in METHODS else "OTHER", status)
            counts[key] = counts.get(key, 0) + 1
            self.pending = True

    def flush(self) -> None:
        """Add the counts made since the last flush to prometheus_client's counter and histogram."""
        counts, self.counts = self.counts, {}
        buckets, self.buckets = self.buckets, [0] * len(self.buckets)
        total, self.sum = self.sum, 0.0
        self.pending = False
        for (method, status), count in counts.items():
            counter = self.counters.get((method, status))
            if counter is None:
                counter = self.counters[method, status] = self.metrics.requests.labels(
                    self.template, method, str(status)
                )
            counter.inc(count)
        # Histogram.observe's work for many observations at once: its values per bucket (not cumulative)
        histogram = self.duration
        for value, count in zip(histogram._buckets, buckets, strict=True):
            if count:
                value.inc(count)
        histogram._sum.inc(total)


_perf_counter = time.perf_counter
_bisect = bisect_left  # the first bound >= the duration: Histogram.observe's bucket (amount <= bound)


# -- the parent of --workers ------------------------------------------------------------------


def prepare_multiprocess_dir() -> str:
    """Make ``$PROMETHEUS_MULTIPROC_DIR`` (a new temporary directory if unset) and empty it.

    The parent of the workers calls it before forking, and before anything imports
    prometheus_client (which reads the variable once, at import). Files left by an
    earlier run would be added to this one's counts: they are removed.
    """
    path = os.environ.get(MULTIPROC_ENV)
    if not path:
        path = tempfile.mkdtemp(prefix="aiorest-metrics-")
        os.environ[MULTIPROC_ENV] = path
    os.makedirs(path, exist_ok=True)
    for name in os.listdir(path):
        if name.endswith(".db"):  # prometheus_client's files; nothing else is touched
            os.unlink(os.path.join(path, name))
    return path


def worker_exited(pid: int) -> None:
    """A worker has exited: its live gauges (in flight, pool) stop counting; its counters stay."""
    if MULTIPROC_ENV not in os.environ:
        return
    prom = _import_prometheus()
    prom.multiprocess.mark_process_dead(pid)

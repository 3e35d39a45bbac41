"""Admission control: at most ``max_concurrency`` handlers running, a bounded FIFO queue, then 503.

A burst of ready handlers delays every coroutine of the worker, the ones
already running included; a queue without end turns an overload into
timeouts for everybody. The gate lets ``max_concurrency`` handlers run; the
next ``max_queue`` requests wait, first come first served, at most
``queue_timeout`` seconds each; the others are answered at once with 503 and
``Retry-After`` (HTTPServiceUnavailable), in the usual JSON error shape.

A request takes its slot once its whole body is in (``Request.buffer_body``),
not when its head arrives: clients that send their bodies slowly would otherwise
hold every slot while the server waits for them, and every other request would
get 503. Waiting for a body costs a connection and its bytes, bounded per body
(``Limits.max_body_size``) and for all of them (``max_body_memory``, 503 past
it); ``body_timeout`` and ``body_min_rate`` end a body that comes too slowly
(408). A body that fails is answered without taking a slot.

The gate is a layer (see ``App.startup``) wrapped around each route's
endpoint, outside the middleware, when the server starts: with no gate the
endpoints are what they were, so it costs nothing when off. Requests that no
route handles (404, 405, automatic OPTIONS) and the server's own routes
(``/healthz``, ``/readyz``, ``/metrics``) never take a slot.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ..http.exceptions import HTTPServiceUnavailable

if TYPE_CHECKING:
    from ..http.request import Request
    from ..routing.route import Handler

__all__ = ["Admission"]

#: The reasons a request is turned away, the label of the rejections metric.
QUEUE_FULL = "queue_full"
QUEUE_TIMEOUT = "queue_timeout"


class Admission:
    """At most ``max_concurrency`` handlers at a time; ``max_queue`` more wait up to ``queue_timeout`` s.

    Under a steady overload the queue stays full, and a request waits
    ``max_queue / max_concurrency`` handler times before it runs: ``max_queue``
    defaults to a quarter of ``max_concurrency`` (at least 1), enough to absorb
    jitter while the requests served keep close to their unloaded latency
    (load/prod_admission.py measures it). ``queue_timeout`` is the backstop for
    handlers that slow down (a stalled database): no wait is longer. A request that
    finds the queue full, or waits past ``queue_timeout``, gets a 503 with
    ``Retry-After: retry_after``. Waiters are served in arrival order.
    """

    def __init__(
        self,
        max_concurrency: int,
        *,
        max_queue: int | None = None,
        queue_timeout: float = 1.0,
        retry_after: int = 1,
    ) -> None:
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be at least 1, got {max_concurrency}")
        if max_queue is None:
            max_queue = max(1, max_concurrency // 4)
        if max_queue < 0:
            raise ValueError(f"max_queue must be 0 or more, got {max_queue}")
        if not queue_timeout > 0:
            raise ValueError(f"queue_timeout must be positive, got {queue_timeout}")
        self.max_concurrency = max_concurrency
        self.max_queue = max_queue
        self.queue_timeout = queue_timeout
        self.retry_after = retry_after
        self.running = 0  # handlers holding a slot
        self.peak_queued = 0  # the longest the queue has been
        self.rejected: dict[str, int] = {QUEUE_FULL: 0, QUEUE_TIMEOUT: 0}
        #: called with the reason of each rejection (the metrics count them)
        self.on_reject: Callable[[str], None] | None = None
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def queued(self) -> int:
        """Requests waiting for a slot now."""
        return len(self._waiters)

    def layer(self, endpoint: Handler, template: str | None) -> Handler:
        """The endpoint behind the gate; the answers to routing errors (no template) bypass it."""
        if template is None:
            return endpoint
        return _Gated(self, endpoint)

    def enter(self) -> Awaitable[None] | None:
        """Take a slot: None if one is free, else an awaitable that waits in the queue for one (or raises 503).

        Not a coroutine, so that a request that finds a slot free awaits nothing. Each slot taken is
        given back with :meth:`leave`.
        """
        if self.running < self.max_concurrency and not self._waiters:
            self.running += 1
            return None
        return self._wait()

    async def _wait(self) -> None:
        """Wait in the queue for a slot (handed over by ``leave``), or raise 503."""
        waiters = self._waiters
        if len(waiters) >= self.max_queue:
            self._reject(QUEUE_FULL)
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        waiters.append(waiter)
        if len(waiters) > self.peak_queued:
            self.peak_queued = len(waiters)
        timer = loop.call_later(self.queue_timeout, self._expire, waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                self.leave()  # a slot was handed over just before the cancel: pass it on
            else:
                self._discard(waiter)
            raise
        finally:
            timer.cancel()

    def _expire(self, waiter: asyncio.Future[None]) -> None:
        if waiter.done():
            return
        self._discard(waiter)
        try:
            self._reject(QUEUE_TIMEOUT)
        except HTTPServiceUnavailable as exc:
            waiter.set_exception(exc)

    def _discard(self, waiter: asyncio.Future[None]) -> None:
        try:
            self._waiters.remove(waiter)  # expiring waiters are the oldest: found first
        except ValueError:
            pass

    def _reject(self, reason: str) -> None:
        self.rejected[reason] += 1
        if self.on_reject is not None:
            self.on_reject(reason)
        if reason == QUEUE_FULL:
            message = "the server is busy: too many requests waiting"
        else:
            message = f"the server is busy: no handler free within {self.queue_timeout:g} s"
        raise HTTPServiceUnavailable(message, retry_after=self.retry_after)

    def leave(self) -> None:
        """A handler is done: its slot goes to the oldest waiter, else back to the pool."""
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self.running -= 1


class _Gated:
    """An endpoint behind the gate (an object, not a closure: one per route, made at startup)."""

    __slots__ = ("gate", "endpoint")

    def __init__(self, gate: Admission, endpoint: Handler) -> None:
        self.gate = gate
        self.endpoint = endpoint

    async def __call__(self, request: Request) -> Any:
        # The body first, holding no slot: a client sending it slowly must not keep others out.
        await request.buffer_body()
        gate = self.gate
        waiting = gate.enter()
        if waiting is not None:
            await waiting  # a slot handed over (running unchanged), or 503
        try:
            return await self.endpoint(request)
        finally:
            gate.leave()

"""Background tasks: work a handler leaves to run once its response is out (docs/background.rst).

A handler adds calls with ``request.background.add(func, *args, **kwargs)``;
they wait, in order, until the server is done with the response (written to the
transport, or not writable because the client has gone), then run one after the
other in a Task of their own: an ``async def`` is awaited, a plain function runs
in the loop's default executor. A handler that raises has its calls dropped.

The per-process ``BackgroundTasks`` (the App's, ``app.background``) bounds the
calls pending, added and not yet finished, at ``limit``: past it ``add`` raises
:exc:`BackgroundTasksFull`, a 503 with ``Retry-After``. A failure is logged on
``aiorest.background`` with the request's id (the Task runs in the request's
context); the server drains the tasks at a graceful stop and cancels, each one
logged, those still pending at its deadline.

Nothing of this runs for a request whose handler adds no call: the server looks
at ``waiting``, a dict empty most of the time, once per request.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
from collections.abc import Callable
from functools import partial
from typing import Any

from .exceptions import HTTPServiceUnavailable

__all__ = ["BackgroundTasks", "RequestTasks", "BackgroundTasksFull", "DEFAULT_BACKGROUND_LIMIT"]

logger = logging.getLogger("aiorest.background")

#: the calls pending at most per process, by default (``Limits.max_background_tasks``)
DEFAULT_BACKGROUND_LIMIT = 1000

# The request a call waits for is only a key here (typed object: the request's module imports this one).
_Call = tuple[str, Callable[[], Any], bool]  # name, the call, whether it is a coroutine function


class BackgroundTasksFull(HTTPServiceUnavailable):
    """``add`` found the process's background tasks at their limit: a 503 unless the handler catches it."""


class BackgroundTasks:
    """The background tasks of a process: what the requests added, waiting or running, at most ``limit``.

    ``pending``: calls added and not yet finished (waiting for their response, or
    running); ``done`` and ``failed``: calls finished since the start, well or by
    raising (or cancelled at the stop's deadline). The server reads ``waiting``
    (requests with calls waiting for their response) after each response.
    """

    def __init__(self, limit: int = DEFAULT_BACKGROUND_LIMIT, *, retry_after: int = 1) -> None:
        self.limit = limit
        self.retry_after = retry_after
        self.pending = 0
        self.done = 0
        self.failed = 0
        self.waiting: dict[object, list[_Call]] = {}
        self._running: dict[asyncio.Task[None], list[_Call]] = {}  # each Task and its calls not yet finished
        self._closed = False

    def for_request(self, request: object) -> RequestTasks:
        """What ``request.background`` gives: ``add`` for this request."""
        return RequestTasks(self, request)

    def add(self, request: object, func: Callable[..., Any], /, *args: Any, **kwargs: Any) -> None:
        """Run ``func(*args, **kwargs)`` once ``request``'s response is out; BackgroundTasksFull at the limit."""
        if self.pending >= self.limit or self._closed:
            why = "the server is stopping" if self._closed else f"{self.limit} background tasks pending"
            raise BackgroundTasksFull(f"the server is busy: {why}", retry_after=self.retry_after)
        name = getattr(func, "__qualname__", None) or repr(func)
        is_async = inspect.iscoroutinefunction(func.func if isinstance(func, partial) else func)
        self.waiting.setdefault(request, []).append((name, partial(func, *args, **kwargs), is_async))
        self.pending += 1

    def start(self, request: object) -> None:
        """``request``'s response is out: its calls (if any) start, in a Task of the current context."""
        calls = self.waiting.pop(request, None)
        if calls is None:
            return
        if self._closed:  # a handler that finished after the stop's deadline
            self._give_up(calls, "the server had stopped")
            return
        task = asyncio.get_running_loop().create_task(self._run(calls), name=f"background tasks of {request!r}")
        self._running[task] = calls
        task.add_done_callback(self._running.pop)

    def discard(self, request: object) -> None:
        """``request``'s handler raised, or its answer failed: its calls never run."""
        calls = self.waiting.pop(request, None)
        if calls is not None:
            self.pending -= len(calls)
            logger.debug("%d background task(s) dropped: the request failed", len(calls))

    async def _run(self, calls: list[_Call]) -> None:
        while calls:
            name, call, is_async = calls[0]
            try:
                if is_async:
                    await call()
                else:
                    await asyncio.get_running_loop().run_in_executor(None, _in_context(call))
            except asyncio.CancelledError:
                raise  # drain() counts and logs what is left
            except Exception:
                self.failed += 1
                logger.exception("background task %s failed", name)
            else:
                self.done += 1
            del calls[0]
            self.pending -= 1

    async def drain(self, timeout: float) -> None:
        """Wait up to ``timeout`` s for the calls running; cancel, and log by name, those left. No more start."""
        self._closed = True
        for request in list(self.waiting):
            self._give_up(self.waiting.pop(request), "its response was never written")
        tasks = list(self._running)
        if tasks and timeout > 0:
            await asyncio.wait(tasks, timeout=timeout)
        left = [(task, calls) for task, calls in self._running.items() if not task.done()]
        for task, _ in left:
            task.cancel()
        for task, calls in left:
            try:
                await task
            except asyncio.CancelledError:
                pass
            self._give_up(calls, "the shutdown deadline came")

    def reopen(self, limit: int) -> None:
        """Accept tasks again, at most ``limit`` pending (the server's start)."""
        self.limit = limit
        self._closed = False

    def _give_up(self, calls: list[_Call], why: str) -> None:
        for name, _, _ in calls:
            logger.error("background task %s cancelled: %s", name, why)
        self.failed += len(calls)
        self.pending -= len(calls)
        calls.clear()


class RequestTasks:
    """``request.background``: the calls to run once this request's response is out."""

    __slots__ = ("_tasks", "_request")

    def __init__(self, tasks: BackgroundTasks, request: object) -> None:
        self._tasks = tasks
        self._request = request

    def add(self, func: Callable[..., Any], /, *args: Any, **kwargs: Any) -> None:
        """Run ``func(*args, **kwargs)`` once the response is out: awaited if ``func`` is an
        ``async def``, else in the loop's default executor (a thread).

        Raises :exc:`BackgroundTasksFull` (503, ``Retry-After``) when the process has
        ``Limits.max_background_tasks`` pending, or is stopping.
        """
        self._tasks.add(self._request, func, *args, **kwargs)


def _in_context(call: Callable[[], Any]) -> Callable[[], Any]:
    """``call`` run in a copy of the current context (the request's id) in the executor's thread."""
    return partial(contextvars.copy_context().run, call)

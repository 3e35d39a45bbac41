"""Handler stepping: the one module that steps handlers on asyncio's private task functions.

Every handler runs inside a Task from its first line (``asyncio.timeout``,
TaskGroups and client libraries built on them need ``current_task()`` before
the first await). Two ways give it one:

``inline``  The connection keeps one Task. The first step of each handler runs at
            once, in the request's own copy of the context, with that Task entered
            as the current one through ``asyncio.tasks._enter_task`` /
            ``_leave_task``; a handler that answers without waiting is done there,
            one that waits is carried on by the connection's Task (``resume``).
            No Task is created and the loop is not waited for: about 18,000
            instructions a request fewer than ``task`` on CPython 3.11 (42,233
            against 60,595 for /json, counted by ``python -m bench.instructions``).
``task``    Each request gets ``loop.create_task(..., context=copy_context())``;
            its done-callback goes on with the queue. Public asyncio only.

``auto`` (the default) takes ``inline`` when the private functions import and a
one-time probe finds them doing what ``inline`` relies on, else ``task`` (with
one INFO line). ``$AIOREST_HANDLER_STEPPING`` (``auto``, ``inline`` or ``task``)
overrides it. CI runs the server tests on both.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import os
import types
from collections.abc import Callable, Generator
from typing import Any, cast

try:  # CPython 3.11-3.14 have them; another implementation or version may not
    from asyncio.tasks import _enter_task, _leave_task
except ImportError:  # pragma: no cover - exercised through the probe's test
    _enter_task = _leave_task = None  # type: ignore[assignment]

__all__ = [
    "DONE",
    "INLINE",
    "TASK",
    "choose",
    "forget_cancels",
    "inline_works",
    "resume",
    "run_task",
    "step",
    "stepping",
]

logger = logging.getLogger("aiorest.server")

INLINE = "inline"
TASK = "task"
SETTINGS = ("auto", INLINE, TASK)
ENV = "AIOREST_HANDLER_STEPPING"
DONE = object()  # what next() gives for a coroutine that has finished


def inline_works() -> bool:
    """Whether ``_enter_task``/``_leave_task`` exist and make a Task current, then none, as ``step`` uses them."""
    if _enter_task is None or _leave_task is None:
        return False
    # A loop of its own, not running: a running one (the caller's, perhaps) has its current Task already.
    loop = asyncio.new_event_loop()
    try:
        # Stands for the connection's Task (a Task would need the loop to run); typed as
        # one, as the functions declare: they only store and compare it.
        dummy = cast("asyncio.Task[Any]", loop.create_future())
        if asyncio.current_task(loop) is not None:
            return False
        _enter_task(loop, dummy)
        try:
            inside = asyncio.current_task(loop) is dummy
        finally:
            _leave_task(loop, dummy)
        return inside and asyncio.current_task(loop) is None
    except Exception:  # noqa: BLE001  # any failure means: do not rely on them
        return False
    finally:
        loop.close()


def choose(setting: str | None, works: Callable[[], bool] = inline_works) -> str:
    """``INLINE`` or ``TASK`` for a setting (``auto``, ``inline``, ``task``; None is ``auto``)."""
    setting = setting or "auto"
    if setting not in SETTINGS:
        raise ValueError(f"handler stepping must be one of {', '.join(SETTINGS)}, not {setting!r}")
    if setting == TASK:
        return TASK
    if works():
        return INLINE
    if setting == INLINE:
        raise RuntimeError(
            "handler stepping 'inline' needs asyncio.tasks._enter_task/_leave_task, which this Python"
            " lacks or which behave differently: use 'task' or 'auto'"
        )
    logger.info("asyncio's _enter_task/_leave_task are missing or behave differently: handlers run in a Task each")
    return TASK


@functools.cache
def stepping() -> str:
    """This process's choice, from ``$AIOREST_HANDLER_STEPPING``, made once."""
    return choose(os.environ.get(ENV))


def step(
    loop: asyncio.AbstractEventLoop,
    runner: asyncio.Task[None],
    context: contextvars.Context,
    handling: Generator[Any, Any, None],
) -> Any:
    """Run the first step of ``handling`` in ``context`` as ``runner``: what it awaits, or DONE."""
    try:
        _enter_task(loop, runner)
    except RuntimeError:  # bytes fed from inside another task (the unit tests do)
        return _step_inside_another_task(loop, runner, context, handling)
    try:
        return context.run(next, handling, DONE)
    finally:
        _leave_task(loop, runner)


def _step_inside_another_task(
    loop: asyncio.AbstractEventLoop,
    runner: asyncio.Task[None],
    context: contextvars.Context,
    handling: Generator[Any, Any, None],
) -> Any:
    current = asyncio.current_task(loop)
    assert current is not None
    _leave_task(loop, current)
    _enter_task(loop, runner)
    try:
        return context.run(next, handling, DONE)
    finally:
        _leave_task(loop, runner)
        _enter_task(loop, current)


def forget_cancels(runner: asyncio.Task[Any] | None) -> None:
    """A handler finished with cancels still counted on the connection's Task: with a Task
    of its own they would have ended with it; the next request's ``cancelling()`` starts at 0."""
    while runner is not None and runner.uncancel():
        pass


@types.coroutine
def resume(
    context: contextvars.Context,
    handling: Generator[Any, Any, None],
    awaited: Any,
    throw: BaseException | None = None,
) -> Generator[Any, Any, None]:
    """Drive ``handling`` to its end inside ``context``; its last step yielded ``awaited``.

    What the coroutine yields goes up to the Task, what the Task sends or throws
    comes down into the coroutine, each step run in the request's context: a
    coroutine can change Tasks this way without noticing, as ``yield from`` would,
    but with a context of its own.
    """
    while True:
        if throw is None:
            try:
                value = yield awaited
            except GeneratorExit:
                handling.close()
                raise
            except BaseException as exc:  # noqa: BLE001  # handed on to the coroutine
                throw = exc
                continue
            step: Any = handling.send
            argument: Any = value
        else:
            step, argument, throw = handling.throw, throw, None
        try:
            awaited = context.run(step, argument)
        except StopIteration:
            return


async def run_task(handling: Generator[Any, Any, None]) -> None:
    """The ``task`` path: a request's handling as the coroutine of a Task of its own."""
    await handling  # type: ignore[misc]  # a types.coroutine generator

"""Handler stepping (aiorest/server/stepping.py): the setting, the probe and both paths through a real server."""

from __future__ import annotations

import asyncio
import logging

import pytest

from aiorest import App, Request
from aiorest.server import stepping
from aiorest.testing import TestClient


def test_the_probe_passes_on_this_python():
    # CPython 3.11 has the private functions and they behave as the inline path needs.
    assert stepping.inline_works()


async def test_the_probe_passes_inside_a_running_loop():
    assert stepping.inline_works()


def test_auto_takes_inline_when_the_probe_passes_and_task_when_it_fails(caplog):
    assert stepping.choose("auto", works=lambda: True) == stepping.INLINE
    assert stepping.choose(None, works=lambda: True) == stepping.INLINE
    with caplog.at_level(logging.INFO, logger="aiorest.server"):
        assert stepping.choose("auto", works=lambda: False) == stepping.TASK
    assert "handlers run in a Task each" in caplog.text


def test_task_is_taken_without_a_probe():
    def never() -> bool:
        raise AssertionError("the probe ran")

    assert stepping.choose("task", works=never) == stepping.TASK


def test_inline_asked_for_where_it_cannot_work_is_an_error():
    with pytest.raises(RuntimeError, match="'inline' needs asyncio.tasks._enter_task"):
        stepping.choose("inline", works=lambda: False)


def test_an_unknown_setting_names_the_choices():
    with pytest.raises(ValueError, match="one of auto, inline, task, not 'threads'"):
        stepping.choose("threads")


def test_the_environment_chooses_once_per_process(monkeypatch):
    stepping.stepping.cache_clear()
    try:
        monkeypatch.setenv(stepping.ENV, "task")
        assert stepping.stepping() == stepping.TASK
        monkeypatch.setenv(stepping.ENV, "inline")
        assert stepping.stepping() == stepping.TASK  # chosen already
    finally:
        stepping.stepping.cache_clear()


@pytest.fixture(params=[stepping.INLINE, stepping.TASK])
def path(request, monkeypatch):
    """Serve on each path, whatever the environment chose for the rest of the suite."""
    stepping.stepping.cache_clear()
    monkeypatch.setenv(stepping.ENV, request.param)
    assert stepping.stepping() == request.param
    yield request.param
    stepping.stepping.cache_clear()


def make_app() -> App:
    app = App()

    @app.get("/task")
    async def task(request: Request) -> dict[str, bool]:
        # A Task from the handler's first line: asyncio.timeout needs one.
        async with asyncio.timeout(5):
            await asyncio.sleep(0)
        return {"in_task": asyncio.current_task() is not None}

    @app.get("/cancelling")
    async def cancelling(request: Request) -> dict[str, int]:
        return {"cancelling": asyncio.current_task().cancelling()}

    @app.get("/cancel-self")
    async def cancel_self(request: Request) -> dict[str, bool]:
        asyncio.current_task().cancel()
        try:
            await asyncio.sleep(0)
        except asyncio.CancelledError:
            asyncio.current_task().uncancel()
            asyncio.current_task().cancel()  # cancelled again, and never taken back
        return {"cancelled": False}

    return app


async def test_each_path_runs_handlers_that_wait_in_a_task(path):
    async with TestClient(make_app()) as client:
        for _ in range(3):
            async with client.get("/task") as response:
                assert response.status == 200
                assert await response.json() == {"in_task": True}


async def test_a_cancel_left_by_one_handler_does_not_reach_the_next(path):
    async with TestClient(make_app()) as client:
        async with client.get("/cancel-self") as response:
            assert response.status == 200
        async with client.get("/cancelling") as response:
            assert await response.json() == {"cancelling": 0}

"""The blocked-loop detector: a handler that blocks the event loop is named, with its request and stack."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import threading
import time
from typing import Any

import pytest

from aiorest import App, Server
from aiorest.cli import _parser
from aiorest.cli.options import config_from
from aiorest.ops import JSONLogFormatter
from aiorest.ops.blocking import DEVELOPMENT_THRESHOLD, OTHER, BlockedLoopDetector
from aiorest.server import ServerConfig
from tests.ops.test_admission import serving
from tests.ops.test_metrics import scrape, value

THREAD = "aiorest-blocked-loop"
ROUTE = "/sleep/{n:int}"


def make_app() -> App:
    app = App()

    @app.get("/sleep/{n:int}")
    async def sleepy_handler(request):
        time.sleep(request.path_params["n"] / 1000)
        return {"slept_ms": request.path_params["n"]}

    @app.get("/spin")
    async def spinning_handler(request):
        end = time.perf_counter() + 0.4
        while time.perf_counter() < end:  # pure Python on the loop: the watchdog gets the GIL every 5 ms
            pass
        return {}

    @app.get("/factorial")
    async def factorial_handler(request):
        math.factorial(200_000)  # C code that holds the GIL: about 0.4 s
        return {}

    @app.get("/waits")
    async def waiting_handler(request):
        await asyncio.sleep(0.5)
        return {}

    return app


def blocked_records(caplog: pytest.LogCaptureFixture, level: int) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.name == "aiorest.blocked" and record.levelno == level]


def detector_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == THREAD]


async def until(condition: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        await asyncio.sleep(0.01)


async def test_a_handler_that_sleeps_is_logged_once_with_its_route_request_id_and_stack(caplog):
    options = {"blocked_loop_threshold": 0.1, "metrics": True, "forwarded_allow_ips": "127.0.0.1"}
    async with serving(make_app(), **options) as (server, session):
        async with session.get("/sleep/500", headers={"X-Request-ID": "client-7"}) as response:
            assert response.status == 200
            assert response.headers["X-Request-ID"] == "client-7"
        await until(lambda: blocked_records(caplog, logging.INFO))  # the block's end, once the loop runs again
        (warning,) = blocked_records(caplog, logging.WARNING)
        message = warning.getMessage()
        assert f"GET {ROUTE} (request client-7)" in message
        assert warning.request_id == "client-7" and warning.route == ROUTE
        assert warning.blocked_seconds >= 0.1
        # the stack was read while the handler slept: its frame, at the line that called time.sleep
        assert "in sleepy_handler\n" in message
        assert "time.sleep(request.path_params" in message
        (ended,) = blocked_records(caplog, logging.INFO)
        assert ended.request_id == "client-7" and ended.route == ROUTE and ended.blocked_seconds >= 0.1
        assert server.blocked_loop is not None
        assert server.blocked_loop.totals()[ROUTE][0] == 1
        found = await scrape(session)
        assert value(found, "aiorest_event_loop_blocked_total", route=ROUTE) == 1
        assert value(found, "aiorest_event_loop_blocked_seconds_total", route=ROUTE) >= 0.1
    assert len(blocked_records(caplog, logging.WARNING)) == 1


async def test_a_handler_that_computes_is_caught_in_its_loop(caplog):
    async with serving(make_app(), blocked_loop_threshold=0.1) as (server, session):
        async with session.get("/spin") as response:
            assert response.status == 200
            request_id = response.headers["X-Request-ID"]
    (warning,) = blocked_records(caplog, logging.WARNING)
    message = warning.getMessage()
    assert f"GET /spin (request {request_id})" in message
    assert "in spinning_handler\n" in message and "time.perf_counter() < end" in message
    line = json.loads(JSONLogFormatter().format(warning))  # --log-format json: the fields of their own
    assert line["request_id"] == request_id and line["route"] == "/spin" and line["blocked_seconds"] >= 0.1


async def test_c_code_that_holds_the_gil_is_caught_when_it_lets_go_and_said_so(caplog):
    async with serving(make_app(), blocked_loop_threshold=0.05) as (server, session):
        async with session.get("/factorial") as response:
            assert response.status == 200
    (warning,) = blocked_records(caplog, logging.WARNING)
    message = warning.getMessage()
    assert "GET /factorial" in message and "late: the GIL was held" in message
    # read as the GIL was let go: in the handler, at the line that called it or (on a busy machine) a later one
    assert "in factorial_handler\n" in message


async def test_a_handler_that_awaits_is_not_blocking(caplog):
    async with serving(make_app(), blocked_loop_threshold=0.1) as (server, session):
        async with session.get("/waits") as response:
            assert response.status == 200
        assert server.blocked_loop is not None
        assert "/waits" not in server.blocked_loop.totals()
    assert not [record for record in caplog.records if "/waits" in record.getMessage()]


async def test_work_outside_a_request_is_counted_as_other(caplog):
    async with serving(make_app(), blocked_loop_threshold=0.1) as (server, session):
        asyncio.get_running_loop().call_soon(time.sleep, 0.4)
        await asyncio.sleep(0.05)
        await until(lambda: blocked_records(caplog, logging.INFO))
        assert server.blocked_loop is not None
        assert list(server.blocked_loop.totals()) == [OTHER]
    (warning,) = blocked_records(caplog, logging.WARNING)
    assert "outside any request" in warning.getMessage()
    assert warning.request_id == "-"


async def test_a_burst_of_blocks_logs_one_stack_and_one_summary(caplog):
    blocks = 8
    async with serving(make_app(), blocked_loop_threshold=0.05, metrics=True) as (server, session):
        for _ in range(blocks):
            async with session.get("/sleep/150") as response:
                assert response.status == 200
            await asyncio.sleep(0.03)  # the heartbeat runs between two blocks: each is one
        assert server.blocked_loop is not None
        await until(lambda: server.blocked_loop.totals()[ROUTE][0] >= 3)
        seen = server.blocked_loop.totals()[ROUTE][0]
        assert len(blocked_records(caplog, logging.WARNING)) == 1  # the rest wait for the summary
    warnings = blocked_records(caplog, logging.WARNING)
    assert len(warnings) == 2  # one with the stack, then the summary of the others, at the stop
    summary = warnings[1].getMessage()
    assert "event loop blocked" in summary and f"{ROUTE} " in summary
    assert warnings[1].blocked_routes == {ROUTE: server.blocked_loop.totals()[ROUTE][0] - 1}
    assert server.blocked_loop.totals()[ROUTE][0] >= seen
    assert len(blocked_records(caplog, logging.INFO)) == 1  # only the logged block's end


async def test_the_detector_thread_runs_only_while_the_server_does():
    assert not detector_threads()
    server = Server(make_app(), port=0, blocked_loop_threshold=0.1)
    await server.start()
    try:
        assert len(detector_threads()) == 1
    finally:
        await server.stop(timeout=1)
    assert not detector_threads()
    server = Server(make_app(), port=0)
    await server.start()
    try:
        assert server.blocked_loop is None
        assert not detector_threads()
    finally:
        await server.stop(timeout=1)


def test_the_threshold_from_the_command_line_the_environment_or_reload(monkeypatch):
    assert ServerConfig().blocked_loop_threshold is None  # off by default
    args = ["run", "x:y", "--blocked-loop-threshold", "0.25"]
    assert config_from(_parser().parse_args(args)).blocked_loop_threshold == 0.25
    monkeypatch.setenv("AIOREST_BLOCKED_LOOP_THRESHOLD", "0.5")
    assert config_from(_parser().parse_args(["run", "x:y"])).blocked_loop_threshold == 0.5
    monkeypatch.delenv("AIOREST_BLOCKED_LOOP_THRESHOLD")
    # --reload turns it on at 100 ms unless a threshold is given (0: off)
    parsed = _parser().parse_args(["run", "x:y"])
    parsed.reload = True
    assert config_from(parsed).blocked_loop_threshold == DEVELOPMENT_THRESHOLD == 0.1
    parsed = _parser().parse_args(["run", "x:y", "--blocked-loop-threshold", "0"])
    parsed.reload = True
    assert config_from(parsed).blocked_loop_threshold == 0
    assert BlockedLoopDetector.of(0) is None and BlockedLoopDetector.of(None) is None
    with pytest.raises(ValueError, match="blocked_loop_threshold must be 0 \\(off\\) or more, got -1"):
        ServerConfig(blocked_loop_threshold=-1)

"""Prometheus metrics: counts by route template, method and status, latency, in flight, rejections, pool, workers."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from aiorest import App, HTTPConflict, JSONResponse, Server
from aiorest.db import Database
from tests.ops.test_admission import serving as admission_serving

ROOT = Path(__file__).resolve().parents[2]


def serving(app: App, **options: Any) -> AbstractAsyncContextManager[tuple[Server, aiohttp.ClientSession]]:
    """tests.ops.test_admission's server and client, with the metrics on."""
    return admission_serving(app, metrics=True, **options)


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """(sample name, labels) -> value."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(found: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float | None:
    return found.get((name, frozenset(labels.items())))


async def scrape(session: aiohttp.ClientSession) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    async with session.get("/metrics") as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain; version=")
        return samples(await response.text())


def make_app() -> tuple[App, asyncio.Event]:
    app = App()
    release = asyncio.Event()

    @app.get("/items/{item_id:int}")
    async def item(request):
        return {"id": request.path_params["item_id"]}

    @app.post("/items")
    async def conflict(request):
        raise HTTPConflict("taken")

    @app.get("/boom")
    async def boom(request):
        raise RuntimeError("a bug")

    @app.get("/block")
    async def block(request):
        await release.wait()
        return {}

    @app.get("/slow")
    async def slow(request):
        await asyncio.sleep(0.03)
        return {}

    return app, release


async def test_requests_are_counted_by_route_template_method_and_status(caplog):
    app, release = make_app()
    async with serving(app) as (server, session):
        for n in range(1000):  # a thousand distinct paths, one route
            async with session.get(f"/items/{n}") as response:
                assert response.status == 200
        for path, method, status in [("/items", "POST", 409), ("/boom", "GET", 500), ("/nowhere", "GET", 404)]:
            async with session.request(method, path) as response:
                assert response.status == status
        async with session.delete("/items/1") as response:
            assert response.status == 405
        async with session.get("/slow") as response:
            assert response.status == 200
        found = await scrape(session)
    template = "/items/{item_id:int}"
    assert value(found, "aiorest_requests_total", route=template, method="GET", status="200") == 1000
    assert [key for key in found if key[0] == "aiorest_requests_total" and ("route", template) in key[1]] != []
    routes = {dict(labels)["route"] for name, labels in found if name == "aiorest_requests_total"}
    assert routes == {template, "/items", "/boom", "/slow", "<unmatched>"}  # never a raw path
    assert value(found, "aiorest_requests_total", route="/items", method="POST", status="409") == 1
    assert value(found, "aiorest_requests_total", route="/boom", method="GET", status="500") == 1
    assert value(found, "aiorest_requests_total", route="<unmatched>", method="GET", status="404") == 1
    assert value(found, "aiorest_requests_total", route="<unmatched>", method="DELETE", status="405") == 1
    # the latency histogram, by template
    assert value(found, "aiorest_request_duration_seconds_count", route=template) == 1000
    assert value(found, "aiorest_request_duration_seconds_bucket", route=template, le="+Inf") == 1000
    # seconds, not milliseconds: a breakage guard, generous (a mean of 100 ms), not a speed target;
    # what the metrics cost a request is a figure of python -m bench.inprocess --metrics
    assert 0 < value(found, "aiorest_request_duration_seconds_sum", route=template) < 1000 * 0.1
    # the slow one (30 ms at least) in its bucket: the buckets are cumulative
    slow = sorted(
        (float(dict(labels)["le"]), count)
        for (name, labels), count in found.items()
        if name == "aiorest_request_duration_seconds_bucket" and ("route", "/slow") in labels
    )
    assert [count for _, count in slow] == sorted(count for _, count in slow) and slow[-1] == (float("inf"), 1)
    assert value(found, "aiorest_request_duration_seconds_bucket", route="/slow", le="0.025") == 0
    assert 0.03 <= value(found, "aiorest_request_duration_seconds_sum", route="/slow")
    assert value(found, "aiorest_requests_in_flight") == 0
    assert value(found, "aiorest_event_loop_lag_seconds_count") > 0
    assert "a bug" in caplog.text  # logged as before, not sent


async def test_a_304_the_server_answers_is_counted_as_304():
    app = App()

    @app.get("/doc")
    async def doc(request):
        return JSONResponse({"v": 1}, headers={"ETag": '"v1"'})

    async with serving(app) as (server, session):
        async with session.get("/doc") as response:
            assert response.status == 200
        async with session.get("/doc", headers={"If-None-Match": '"v1"'}) as response:
            assert response.status == 304
        async with session.get("/doc", headers={"If-Match": '"v0"'}) as response:
            assert response.status == 412
        found = await scrape(session)
    assert value(found, "aiorest_requests_total", route="/doc", method="GET", status="200") == 1
    assert value(found, "aiorest_requests_total", route="/doc", method="GET", status="304") == 1
    assert value(found, "aiorest_requests_total", route="/doc", method="GET", status="412") == 1


async def test_an_unknown_method_is_counted_as_other():
    app, _ = make_app()
    async with serving(app) as (server, session):
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"PROPFIND /items/1 HTTP/1.1\r\nHost: x\r\n\r\n")
        assert b" 405 " in await reader.readline()
        writer.close()
        found = await scrape(session)
    assert value(found, "aiorest_requests_total", route="<unmatched>", method="OTHER", status="405") == 1


async def test_in_flight_and_admission_rejections():
    app, release = make_app()
    async with serving(app, max_concurrency=1, max_queue=0) as (server, session):
        blocked = asyncio.create_task(session.get("/block"))
        while server.admission is not None and server.admission.running == 0:
            await asyncio.sleep(0.005)
        statuses = []
        for _ in range(3):
            async with session.get("/block") as response:
                statuses.append(response.status)
        assert statuses == [503] * 3
        found = await scrape(session)
        release.set()
        (await blocked).release()
    assert value(found, "aiorest_requests_in_flight") == 1
    assert value(found, "aiorest_admission_rejections_total", reason="queue_full") == 3
    assert value(found, "aiorest_requests_total", route="/block", method="GET", status="503") == 3
    assert value(found, "aiorest_admission_queued") == 0


async def test_pool_gauges(database_url):
    app = App()
    db = Database(database_url, min_size=2, max_size=5)
    db.setup(app)
    held = asyncio.Event()
    release = asyncio.Event()

    @app.get("/hold")
    async def hold(request):
        async with db.connection():
            held.set()
            await release.wait()
        return {}

    async with serving(app) as (server, session):
        task = asyncio.create_task(session.get("/hold"))
        await asyncio.wait_for(held.wait(), 5)
        found = await scrape(session)
        release.set()
        (await task).release()
    assert value(found, "aiorest_db_pool_size") == 2
    assert value(found, "aiorest_db_pool_max_size") == 5
    assert value(found, "aiorest_db_pool_in_use") == 1
    assert value(found, "aiorest_db_pool_waiting") == 0
    assert value(found, "aiorest_db_pool_waits_total") == 0


@pytest.mark.slow  # a process of its own (the fast tier runs in-process only)
def test_two_workers_are_summed(tmp_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    metrics_dir = tmp_path / "prom"
    metrics_dir.mkdir()
    (metrics_dir / "counter_999999.db").write_bytes(b"stale")  # an earlier run's: removed at start
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)}
    command = [sys.executable, "-m", "aiorest", "run", "tests.apps.observe_app:app", "--port", str(port)]
    command += ["--workers", "2", "--metrics"]
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 15
        pids: set[int] = set()
        sent = 0
        while len(pids) < 2 or sent < 40:  # a new connection each: the kernel spreads them
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/pid", timeout=2) as response:
                    pids.add(int(response.read().split(b":")[1].strip(b"}")))
                    sent += 1
            except OSError:
                assert process.poll() is None, "the workers did not start"
            assert time.monotonic() < deadline, f"answers from {pids} only"
            time.sleep(0.01 if sent else 0.1)
        assert not (metrics_dir / "counter_999999.db").exists()
        # each worker flushes its counts into its files every 50 ms: the other worker's last ones
        time.sleep(0.2)
        totals = []
        for _ in range(6):  # whichever worker answers, the sum of both
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
                found = samples(response.read().decode())
            totals.append(value(found, "aiorest_requests_total", route="/pid", method="GET", status="200"))
        assert totals == [sent] * 6
        files = {path.name.rsplit("_", 1)[-1] for path in metrics_dir.glob("counter_*.db")}
        assert files == {f"{pid}.db" for pid in pids}
        # a worker that dies: its live gauges go, its counts stay
        victim = min(pids)
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while list(metrics_dir.glob(f"gauge_livesum_{victim}.db")):
            assert time.monotonic() < deadline, "the dead worker's gauges were not removed"
            time.sleep(0.05)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
            found = samples(response.read().decode())
        assert value(found, "aiorest_requests_total", route="/pid", method="GET", status="200") == sent
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def test_a_handler_cancelled_because_its_client_left_is_counted_499():
    app, release = make_app()
    async with serving(app, cancel_on_disconnect=True) as (server, session):
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"GET /block HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
        deadline = time.monotonic() + 5
        while server.metrics is not None and server.metrics.running == 0:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.005)
        writer.close()
        while (found := await scrape(session)) and value(found, "aiorest_requests_in_flight") != 0:
            assert time.monotonic() < deadline, "the handler was not cancelled"
            await asyncio.sleep(0.01)
    assert value(found, "aiorest_requests_total", route="/block", method="GET", status="499") == 1
    assert value(found, "aiorest_request_duration_seconds_count", route="/block") == 1


async def test_open_websockets_are_a_gauge():
    app = App()

    @app.websocket("/ws")
    async def hold(ws):
        await ws.accept()
        async for _ in ws:
            pass

    async def gauge(session: aiohttp.ClientSession, expected: float) -> float | None:
        for _ in range(60):  # sampled once a second
            found = value(await scrape(session), "aiorest_websockets_open")
            if found == expected:
                break
            await asyncio.sleep(0.1)
        return found

    async with serving(app) as (_, session):
        assert await gauge(session, 0) == 0
        async with session.ws_connect("/ws"), session.ws_connect("/ws"):
            assert await gauge(session, 2) == 2
        assert await gauge(session, 0) == 0

"""Background tasks (request.background), over real sockets: after the response, bounded, logged, drained."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest

import aiorest
from aiorest import App, BackgroundTasksFull, HTTPNotFound, Limits, Request, Server, StreamResponse
from aiorest.http import BackgroundTasks


@asynccontextmanager
async def serving(app: App, **options: Any) -> AsyncIterator[tuple[Server, aiohttp.ClientSession]]:
    server = Server(app, port=0, **options)
    await server.start()
    try:
        async with aiohttp.ClientSession(server.url) as session:
            yield server, session
    finally:
        await server.stop(timeout=2)


async def until(condition: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        await asyncio.sleep(0.005)


async def test_tasks_run_after_the_client_has_the_response_and_do_not_hold_it() -> None:
    app = App()
    received = asyncio.Event()
    ran: list[str] = []

    async def after(name: str) -> None:
        await received.wait()  # the client has read the whole response before this goes on
        ran.append(name)

    def sync_after(name: str, *, suffix: str) -> None:
        assert threading.current_thread() is not threading.main_thread()  # the executor's thread
        ran.append(name + suffix)

    @app.post("/signup")
    async def signup(request: Request) -> dict[str, Any]:
        request.background.add(after, "email")
        request.background.add(sync_after, "audit", suffix="!")
        return {"ok": True}

    async with serving(app) as (server, session):
        async with session.post("/signup") as response:
            assert await response.json() == {"ok": True}
        assert ran == [] and app.background.pending == 2
        received.set()
        await until(lambda: app.background.pending == 0)
        assert ran == ["email", "audit!"]  # in the order added, one after the other
        assert (app.background.done, app.background.failed) == (2, 0)


async def test_a_streamed_response_is_written_whole_before_its_tasks_start() -> None:
    app = App()
    events: list[str] = []

    async def body() -> AsyncIterator[bytes]:
        for chunk in (b"a", b"b", b"c"):
            events.append("chunk")
            yield chunk
            await asyncio.sleep(0.01)
        events.append("end")

    @app.get("/stream")
    async def stream(request: Request) -> StreamResponse:
        request.background.add(events.append, "task")
        return StreamResponse(body())

    async with serving(app) as (server, session):
        async with session.get("/stream") as response:
            assert await response.read() == b"abc"
        await until(lambda: app.background.pending == 0)
    assert events == ["chunk", "chunk", "chunk", "end", "task"]


async def test_a_handler_that_raises_has_its_tasks_dropped() -> None:
    app = App()
    ran: list[str] = []

    @app.get("/fails")
    async def fails(request: Request) -> None:
        request.background.add(ran.append, "never")
        raise HTTPNotFound("no such thing")

    async with serving(app) as (server, session):
        async with session.get("/fails") as response:
            assert response.status == 404
        assert app.background.pending == 0 and not app.background.waiting
    assert ran == [] and app.background.done == 0


async def test_a_failing_task_is_logged_with_the_request_id_and_never_reaches_the_client(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = App()

    async def broken() -> None:
        raise RuntimeError("the mail server said no")

    @app.get("/")
    async def index(request: Request) -> dict[str, str]:
        request.background.add(broken)
        return {"id": request.id}

    caplog.set_level(logging.ERROR, logger="aiorest")
    async with serving(app) as (server, session):
        async with session.get("/") as response:
            assert response.status == 200
            request_id = response.headers["X-Request-ID"]
            assert await response.json() == {"id": request_id}
        await until(lambda: app.background.failed == 1)
        async with session.get("/") as response:  # the server goes on serving
            assert response.status == 200
    record = next(r for r in caplog.records if r.name == "aiorest.background")  # the first request's
    assert "broken" in record.getMessage() and "failed" in record.getMessage()
    assert record.request_id == request_id  # type: ignore[attr-defined]
    assert record.exc_info is not None and "mail server" in str(record.exc_info[1])


async def test_at_the_limit_add_is_a_503_with_retry_after_unless_the_handler_catches_it() -> None:
    app = App(limits=Limits(max_background_tasks=2))
    release = asyncio.Event()

    @app.get("/add")
    async def add(request: Request) -> dict[str, int]:
        request.background.add(release.wait)
        return {"pending": app.background.pending}

    @app.get("/careful")
    async def careful(request: Request) -> dict[str, bool]:
        try:
            request.background.add(release.wait)
        except BackgroundTasksFull:
            return {"queued": False}
        return {"queued": True}

    async with serving(app) as (server, session):
        for expected in (1, 2):
            async with session.get("/add") as response:
                assert await response.json() == {"pending": expected}
        async with session.get("/add") as response:
            assert response.status == 503
            assert response.headers["Retry-After"] == "1"
            assert (await response.json())["error"]["status"] == 503
        async with session.get("/careful") as response:
            assert await response.json() == {"queued": False}
        release.set()
        await until(lambda: app.background.pending == 0)
        async with session.get("/careful") as response:
            assert await response.json() == {"queued": True}


async def test_the_server_limit_overrides_the_apps() -> None:
    app = App(limits=Limits(max_background_tasks=5))
    async with serving(app, limit_overrides={"max_background_tasks": 1}):
        assert app.background.limit == 1


async def test_a_running_task_holds_no_admission_slot() -> None:
    app = App()
    release = asyncio.Event()

    @app.get("/slow-after")
    async def slow_after(request: Request) -> dict[str, bool]:
        request.background.add(release.wait)
        return {"ok": True}

    async with serving(app, max_concurrency=1, max_queue=0) as (server, session):
        assert server.admission is not None
        for _ in range(3):  # with the one slot held by a task, the second request would be a 503
            async with session.get("/slow-after") as response:
                assert response.status == 200
        assert server.admission.running == 0 and app.background.pending == 3
        release.set()
        await until(lambda: app.background.pending == 0)


async def test_metrics_count_pending_done_and_failed() -> None:
    pytest.importorskip("prometheus_client")
    app = App()
    release = asyncio.Event()

    async def broken() -> None:
        raise ValueError("no")

    @app.get("/work")
    async def work(request: Request) -> dict[str, bool]:
        request.background.add(release.wait)
        request.background.add(broken)
        return {"ok": True}

    def value(text: str, name: str) -> float:
        [line] = [line for line in text.splitlines() if line.startswith(name + " ")]
        return float(line.split()[1])

    async with serving(app, metrics=True) as (server, session):
        async with session.get("/work") as response:
            assert response.status == 200
        async with session.get("/metrics") as response:
            text = await response.text()
        assert value(text, "aiorest_background_tasks_pending") == 2
        release.set()
        await until(lambda: app.background.pending == 0)
        async with session.get("/metrics") as response:
            text = await response.text()
        assert value(text, "aiorest_background_tasks_pending") == 0
        assert value(text, "aiorest_background_tasks_done_total") == 1
        assert value(text, "aiorest_background_tasks_failed_total") == 1


async def test_stop_waits_for_the_tasks_within_its_deadline() -> None:
    app = App()
    finished: list[str] = []

    async def short() -> None:
        await asyncio.sleep(0.2)
        finished.append("short")

    @app.get("/")
    async def index(request: Request) -> dict[str, bool]:
        request.background.add(short)
        return {"ok": True}

    server = Server(app, port=0)
    await server.start()
    async with aiohttp.ClientSession(server.url) as session:
        async with session.get("/") as response:
            assert response.status == 200
    await server.stop(timeout=5)
    assert finished == ["short"] and app.background.pending == 0 and app.background.done == 1


async def test_tasks_left_at_the_deadline_are_cancelled_and_logged_by_name(caplog: pytest.LogCaptureFixture) -> None:
    app = App()
    cancelled: list[str] = []

    async def forever() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append("forever")
            raise

    async def behind() -> None:
        cancelled.append("behind ran")  # never: the one before it never ends

    @app.get("/")
    async def index(request: Request) -> dict[str, bool]:
        request.background.add(forever)
        request.background.add(behind)
        return {"ok": True}

    caplog.set_level(logging.ERROR, logger="aiorest")
    server = Server(app, port=0)
    await server.start()
    async with aiohttp.ClientSession(server.url) as session:
        async with session.get("/") as response:
            assert response.status == 200
    await server.stop(timeout=0.3)
    assert cancelled == ["forever"]
    assert (app.background.pending, app.background.failed) == (0, 2)
    messages = [r.getMessage() for r in caplog.records if r.name == "aiorest.background"]
    assert any("forever" in m and "cancelled" in m for m in messages)
    assert any("behind" in m and "cancelled" in m for m in messages)
    with pytest.raises(BackgroundTasksFull):  # stopped: no more tasks
        app.background.add(object(), short_noop)


async def short_noop() -> None:
    return None


def test_background_tasks_bound_is_checked_before_anything_is_kept() -> None:
    tasks = BackgroundTasks(1)
    key = object()
    tasks.add(key, short_noop)
    with pytest.raises(BackgroundTasksFull) as raised:
        tasks.add(key, short_noop)
    assert raised.value.status == 503 and tasks.pending == 1 and len(tasks.waiting[key]) == 1
    tasks.discard(key)
    assert tasks.pending == 0 and not tasks.waiting


async def test_a_plain_function_runs_in_a_thread_with_the_request_id(caplog: pytest.LogCaptureFixture) -> None:
    app = App()
    seen: list[str | None] = []

    def blocking() -> None:
        seen.append(aiorest.request_id())
        raise OSError("disk full")

    @app.get("/")
    async def index(request: Request) -> dict[str, bool]:
        request.background.add(blocking)
        return {"ok": True}

    caplog.set_level(logging.ERROR, logger="aiorest")
    async with serving(app) as (server, session):
        async with session.get("/") as response:
            request_id = response.headers["X-Request-ID"]
        await until(lambda: app.background.failed == 1)
    assert seen == [request_id]
    [record] = [r for r in caplog.records if r.name == "aiorest.background"]
    assert record.request_id == request_id and "blocking" in record.getMessage()  # type: ignore[attr-defined]


async def test_a_streamed_body_that_fails_drops_the_tasks() -> None:
    app = App()
    ran: list[str] = []

    async def body() -> AsyncIterator[bytes]:
        yield b"partial"
        raise RuntimeError("the source broke")

    @app.get("/stream")
    async def stream(request: Request) -> StreamResponse:
        request.background.add(ran.append, "never")
        return StreamResponse(body())

    async with serving(app) as (server, session):
        with pytest.raises(aiohttp.ClientPayloadError):
            async with session.get("/stream") as response:
                await response.read()
        await until(lambda: app.background.pending == 0)
    assert ran == [] and not app.background.waiting


async def test_a_handler_cancelled_because_its_client_left_has_its_tasks_dropped() -> None:
    app = App()
    started = asyncio.Event()
    ran: list[str] = []

    @app.get("/slow")
    async def slow(request: Request) -> dict[str, bool]:
        request.background.add(ran.append, "never")
        started.set()
        await asyncio.sleep(30)
        return {"ok": True}

    server = Server(app, port=0, cancel_on_disconnect=True)
    await server.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
        await started.wait()
        writer.close()
        await writer.wait_closed()
        await until(lambda: app.background.pending == 0)
    finally:
        await server.stop(timeout=2)
    assert ran == [] and not app.background.waiting

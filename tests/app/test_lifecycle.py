"""A startup that fails undoes what it started: contexts and lifespan left, pools closed, no hook half-paired."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import psycopg2
import psycopg2.errors
import pytest

from aiorest import App, Server
from aiorest.db import Database


def backends(database_url: str, application_name: str) -> int:
    """Connections open to the database of ``database_url`` under ``application_name``."""
    with contextlib.closing(psycopg2.connect(database_url)) as admin, admin.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = %s",
            (application_name,),
        )
        (count,) = cursor.fetchone()
        return int(count)


def create_table_world(database_url: str) -> None:
    with contextlib.closing(psycopg2.connect(database_url)) as admin, admin.cursor() as cursor:
        admin.autocommit = True
        cursor.execute("CREATE TABLE world (id int)")


async def wait_for_no_backends(database_url: str, application_name: str) -> None:
    # A backend leaves pg_stat_activity a moment after its client closed the connection.
    for _ in range(50):
        if backends(database_url, application_name) == 0:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{backends(database_url, application_name)} connection(s) of the pool were left open")


def recording(events: list[str], label: str):
    async def hook(app: App) -> None:
        events.append(label)

    return hook


def recorded_context(events: list[str], label: str, *, fail: bool = False):
    @contextlib.asynccontextmanager
    async def context(app: App) -> AsyncIterator[None]:
        events.append(f"{label} enter")
        if fail:
            raise OSError(f"{label} is unreachable")
        try:
            yield
        finally:
            events.append(f"{label} exit")

    return context


async def test_a_failing_startup_hook_closes_the_pool_opened_before_it(database_url):
    create_table_world(database_url)
    events: list[str] = []
    app = App(lifespan=recorded_context(events, "lifespan"))
    db = Database(database_url, min_size=3, application_name="lifecycle-hook-test")
    db.setup(app)

    async def create_world(app: App) -> None:
        await db.execute("CREATE TABLE world (id int)")

    app.on_startup.append(create_world)
    app.on_startup.append(recording(events, "startup after the failure"))
    app.on_shutdown.append(recording(events, "shutdown hook"))
    server = Server(app, host="127.0.0.1", port=0)
    with pytest.raises(psycopg2.errors.DuplicateTable) as failure:
        await server.start()
    assert events == ["lifespan enter", "lifespan exit"]
    assert db.size == 0
    await wait_for_no_backends(database_url, "lifecycle-hook-test")
    assert f"raised in the startup hook {__name__}.{create_world.__qualname__}" in failure.value.__notes__


async def test_only_the_contexts_entered_are_left_and_no_shutdown_hook_runs():
    events: list[str] = []
    app = App(
        lifespan=recorded_context(events, "lifespan"),
        contexts=[recorded_context(events, "cache"), recorded_context(events, "queue", fail=True)],
        on_startup=[recording(events, "startup hook")],
        on_shutdown=[recording(events, "shutdown hook")],
    )
    app.contexts.append(recorded_context(events, "never"))
    with pytest.raises(OSError, match="queue is unreachable") as failure:
        await app.startup()
    assert failure.value.__notes__[-1].startswith("raised in the context ")
    assert events == ["lifespan enter", "cache enter", "queue enter", "cache exit", "lifespan exit"]
    await app.shutdown()  # not started: nothing to do
    assert events[-1] == "lifespan exit"


async def test_an_app_whose_startup_failed_can_start_again():
    events: list[str] = []
    attempts = 0

    async def flaky(app: App) -> None:
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            raise ConnectionError("not yet")

    app = App(lifespan=recorded_context(events, "lifespan"), contexts=[recorded_context(events, "pool")])
    app.on_startup.append(flaky)
    with pytest.raises(ConnectionError):
        await app.startup()
    await app.startup()
    await app.shutdown()
    assert events == ["lifespan enter", "pool enter", "pool exit", "lifespan exit"] * 2


async def test_a_context_failing_to_exit_while_undoing_is_logged_and_the_startup_error_kept(caplog):
    caplog.set_level(logging.ERROR, logger="aiorest.error")
    events: list[str] = []

    @contextlib.asynccontextmanager
    async def sticky(app: App) -> AsyncIterator[None]:
        yield
        raise RuntimeError("cannot close")

    async def broken(app: App) -> None:
        raise ValueError("bad configuration")

    app = App(contexts=[recorded_context(events, "pool"), sticky], on_startup=[broken])
    with pytest.raises(ValueError, match="bad configuration"):
        await app.startup()
    assert events == ["pool enter", "pool exit"]
    [record] = [r for r in caplog.records if r.name == "aiorest.error"]
    assert "sticky" in record.getMessage() and isinstance(record.exc_info[1], RuntimeError)


async def test_contexts_wrap_the_hooks_at_startup_and_shutdown():
    events: list[str] = []
    app = App(
        lifespan=recorded_context(events, "lifespan"),
        contexts=[recorded_context(events, "pool"), recorded_context(events, "cache")],
        on_startup=[recording(events, "startup hook")],
        on_shutdown=[recording(events, "shutdown hook")],
    )
    await app.startup()
    await app.shutdown()
    assert events == [
        "lifespan enter",
        "pool enter",
        "cache enter",
        "startup hook",
        "shutdown hook",
        "cache exit",
        "pool exit",
        "lifespan exit",
    ]


async def test_a_stop_during_startup_cancels_it_and_undoes_it(database_url):
    events: list[str] = []
    app = App(lifespan=recorded_context(events, "lifespan"))
    db = Database(database_url, min_size=2, application_name="lifecycle-stop-test")
    db.setup(app)
    reached = asyncio.Event()

    async def slow(app: App) -> None:
        reached.set()
        await asyncio.sleep(60)

    app.on_startup.append(slow)
    app.on_shutdown.append(recording(events, "shutdown hook"))
    stop = asyncio.Event()
    server = Server(app, host="127.0.0.1", port=0)
    serving = asyncio.create_task(server.serve_forever(stop))
    await reached.wait()
    assert backends(database_url, "lifecycle-stop-test") == 2
    stop.set()
    async with asyncio.timeout(5):
        await serving
    assert events == ["lifespan enter", "lifespan exit"]
    await wait_for_no_backends(database_url, "lifecycle-stop-test")

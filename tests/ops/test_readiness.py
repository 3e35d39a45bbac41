"""/readyz checks every backing service the app was configured with, each named in its body
(issue 34, point 8): the database, the session store its middleware offers, and the limit and
idempotency stores the app adds to ``app.readiness``; a Redis this test stops and starts again."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest

from aiorest import (
    App,
    CookieSessionStore,
    PostgresIdempotencyStore,
    PostgresSessionStore,
    RedisSessionStore,
    Router,
    SessionMiddleware,
)
from aiorest.db import Database
from aiorest.middleware.idempotency import RedisIdempotencyStore
from aiorest.security import PostgresLimitStore, RedisLimitStore
from harness.fixtures import RedisServer
from tests.ops.test_health import closed_port, get, serving


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


async def readyz_once_it_is(session: aiohttp.ClientSession, status: int) -> tuple[int, Any, Any]:
    """/readyz, asked until it answers ``status`` (a check's result is kept a second) or 10 s passed."""
    for _ in range(50):
        answer = await get(session, "/readyz")
        if answer[0] == status:
            break
        await asyncio.sleep(0.2)
    return answer


async def ok(request: Any) -> dict[str, bool]:
    return {"ok": True}


async def test_readyz_names_the_redis_stores_and_is_503_while_redis_is_down(redis_server, database_url, caplog):
    caplog.set_level(logging.INFO, logger="aiorest.server")
    app = App()
    Database(database_url, min_size=1, max_size=2).setup(app)
    sessions = RedisSessionStore(redis_server.url)
    limits = RedisLimitStore(redis_server.url)
    keys = RedisIdempotencyStore(redis_server.url)
    app.readiness.add("limit store", limits.ping)
    app.readiness.add("idempotency store", keys.ping)
    router = Router(middleware=[SessionMiddleware(sessions)])  # on two routes: one check
    router.add_route("GET", "/a", ok)
    router.add_route("GET", "/b", ok)
    app.include(router)
    try:
        async with serving(app, health=True) as session:
            everything = ["database", "limit store", "idempotency store", "session store"]
            status, _, body = await get(session, "/readyz")
            assert (status, body) == (200, {"status": "ready", "checks": dict.fromkeys(everything, "ok")})
            assert list(body["checks"]) == everything
            redis_server.stop()
            status, headers, body = await readyz_once_it_is(session, 503)  # was 200 with Redis down
            assert (status, headers["Retry-After"]) == (503, "1")
            assert body["error"]["message"] == (
                "not ready: the limit store, the idempotency store and the session store are unreachable"
            )
            assert body["error"]["details"] == {"database": "ok"} | dict.fromkeys(everything[1:], "unreachable")
            redis_server.start()
            status, _, body = await readyz_once_it_is(session, 200)
            assert (status, body["checks"]) == (200, dict.fromkeys(everything, "ok"))
    finally:
        for store in (sessions, limits, keys):
            await store.close()
        if redis_server.process is None:
            redis_server.start()
    for name in everything[1:]:  # one line each way per store, not one a probe
        assert [r.getMessage().startswith(f"readiness: the {name} is unreachable") for r in caplog.records].count(
            True
        ) == 1
        assert f"readiness: the {name} is reachable again" in caplog.text


async def test_the_postgresql_stores_are_named_when_their_database_is_unreachable(database_url):
    app = App()
    dsn = f"postgresql://postgres@127.0.0.1:{closed_port()}/postgres?connect_timeout=1&sslmode=disable"
    elsewhere = Database(dsn, min_size=0, max_size=2)  # the stores' database, not the app's
    Database(database_url, min_size=1, max_size=2).setup(app)

    @asynccontextmanager
    async def pool(app: App) -> AsyncIterator[None]:  # opened and closed with the app: it connects to nothing
        await elsewhere.open()
        try:
            yield
        finally:
            await elsewhere.close()

    app.contexts.append(pool)
    app.add_middleware(SessionMiddleware(PostgresSessionStore(elsewhere)))
    app.readiness.add("limit store", PostgresLimitStore(elsewhere).ping)
    app.readiness.add("idempotency store", PostgresIdempotencyStore(elsewhere).ping)
    async with serving(app, health=True) as session:
        status, _, body = await get(session, "/readyz")
    assert status == 503
    assert body["error"]["message"] == (
        "not ready: the limit store, the idempotency store and the session store are unreachable"
    )
    assert body["error"]["details"] == {
        "database": "ok",
        "limit store": "unreachable",
        "idempotency store": "unreachable",
        "session store": "unreachable",
    }


def test_checks_are_added_once_by_name_and_a_second_store_gets_a_number() -> None:
    app = App()

    async def one() -> None:
        pass

    async def two() -> None:
        pass

    app.readiness.add("cache", one)
    app.readiness.add("cache", one)  # the same check again: nothing
    app.readiness.add("cache", two)
    app.readiness.add("cache", two)
    assert app.readiness.checks == {"cache": one, "cache 2": two}
    with pytest.raises(ValueError, match="needs a name"):
        app.readiness.add("", one)
    cookies = SessionMiddleware(CookieSessionStore(["s" * 32]))
    assert cookies.readiness_checks() == {}  # no service behind it: nothing to check

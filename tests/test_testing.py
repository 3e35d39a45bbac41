"""The test helpers: the aiorest_client fixture and TestClient."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from aiorest import App, Limits, Request
from aiorest.testing import TestClient

pytest_plugins = ["pytester"]


def counting_app(events: list[str]) -> App:
    async def startup(app: App) -> None:
        events.append("startup")
        app.state.ready = True

    async def shutdown(app: App) -> None:
        events.append("shutdown")

    app = App(on_startup=[startup], on_shutdown=[shutdown])

    @app.get("/ready")
    async def ready(request: Request) -> dict[str, bool]:
        return {"ready": request.app.state.ready}

    @app.post("/echo")
    async def echo(request: Request) -> dict[str, object]:
        return {"body": (await request.read()).decode(), "agent": request.headers.get("x-agent")}

    return app


async def accepts_connections(port: int) -> bool:
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return False
    writer.close()
    return True


async def test_fixture_is_a_factory_of_started_clients(aiorest_client):
    events_a: list[str] = []
    events_b: list[str] = []
    first = await aiorest_client(counting_app(events_a))
    second = await aiorest_client(counting_app(events_b))
    assert isinstance(first, TestClient) and isinstance(second, TestClient)
    assert first.port != second.port
    assert events_a == events_b == ["startup"]
    for client in (first, second):
        async with client.get("/ready") as response:
            assert await response.json() == {"ready": True}


def test_fixture_shuts_down_every_client_after_the_test(pytester):
    pytester.makeini(
        """
        [pytest]
        asyncio_mode = auto
        asyncio_default_fixture_loop_scope = function
        asyncio_default_test_loop_scope = function
        """
    )
    pytester.makepyfile(
        """
        import asyncio

        from aiorest import App

        EVENTS = []
        PORTS = []


        def make_app(label):
            async def startup(app):
                EVENTS.append(f"{label} startup")

            async def shutdown(app):
                EVENTS.append(f"{label} shutdown")

            return App(on_startup=[startup], on_shutdown=[shutdown])


        async def test_uses_two_clients_and_fails(aiorest_client):
            PORTS.append((await aiorest_client(make_app("a"))).port)
            PORTS.append((await aiorest_client(make_app("b"))).port)
            assert EVENTS == ["a startup", "b startup"]
            assert False, "failing on purpose"


        async def test_afterwards():
            assert EVENTS == ["a startup", "b startup", "b shutdown", "a shutdown"]
            for port in PORTS:
                try:
                    await asyncio.open_connection("127.0.0.1", port)
                except OSError:
                    continue
                raise AssertionError(f"port {port} still accepts connections")
        """
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:locust", "-p", "no:hypothesispytest")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*failing on purpose*"])


async def test_fixture_passes_options_to_the_client(aiorest_client):
    client = await aiorest_client(counting_app([]), headers={"X-Agent": "tests"}, limits=Limits(max_body_size=10))
    async with client.post("/echo", data=b"small") as response:
        assert await response.json() == {"body": "small", "agent": "tests"}
    async with client.post("/echo", data=b"x" * 11) as response:
        assert response.status == 413


async def test_test_client_as_an_async_context_manager():
    events: list[str] = []
    async with TestClient(counting_app(events)) as client:
        assert events == ["startup"]
        port = client.port
        assert isinstance(port, int) and port != 0
        assert client.url == f"http://127.0.0.1:{port}"
        assert await accepts_connections(port)
        async with client.get("/ready") as response:
            assert response.status == 200
        async with client.request("POST", "/echo", data="text") as response:
            assert (await response.json())["body"] == "text"
        assert isinstance(client.session, aiohttp.ClientSession)
    assert events == ["startup", "shutdown"]
    assert not await accepts_connections(port)
    with pytest.raises(RuntimeError, match="not started"):
        client.get("/ready")


async def test_test_client_port_is_really_bound_by_the_server():
    async with TestClient(counting_app([])) as client:
        reader, writer = await asyncio.open_connection("127.0.0.1", client.port)
        try:
            writer.write(b"GET /ready HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            async with asyncio.timeout(5):
                data = await reader.read()
        finally:
            writer.close()
    assert data.startswith(b"HTTP/1.1 200 OK\r\n")
    assert data.endswith(b'{"ready":true}')


async def test_test_client_methods_send_their_method():
    app = App()

    @app.route("/m", methods=["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"])
    async def method(request: Request) -> dict[str, str]:
        return {"method": request.method}

    async with TestClient(app) as client:
        for name in ("get", "post", "put", "patch", "delete", "options"):
            async with getattr(client, name)("/m") as response:
                assert await response.json() == {"method": name.upper()}
        async with client.head("/m") as response:
            assert response.status == 200

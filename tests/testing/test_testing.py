"""The test helpers: the aiorest_client fixture, TestClient, and pytest-aiohttp's fixtures with AiorestTestServer.

pytest-aiohttp's fixtures here are as aiorest's plugin overrides them (aiorest/_pytest_aiohttp.py); the
pytester runs check the same in pytest sessions of their own, plugins loaded from their entry points.
"""

from __future__ import annotations

import ast
import asyncio
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient as AiohttpTestClient

from aiorest import App, JSONResponse, Limits, Request, Response
from aiorest.testing import AiorestTestServer, TestClient

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples"
#: pytester's inner runs: the settings of aiorest's own suite; only the plugins they need.
INI = """
[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
asyncio_default_test_loop_scope = function
filterwarnings = error
"""
QUIET = ("-p", "no:cacheprovider", "-p", "no:locust", "-p", "no:hypothesispytest", "-p", "no:benchmark")


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

    @app.post("/login")
    async def login(request: Request) -> Response:
        user = (await request.json())["user"]
        response = JSONResponse({"user": user})
        response.set_cookie("user", user)
        return response

    @app.get("/me")
    async def me(request: Request) -> dict[str, str | None]:
        return {"user": request.cookies.get("user")}

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


@pytest.mark.parametrize(
    "fixtures, start_a, start_b",
    [
        ("aiorest_client", "aiorest_client", "aiorest_client"),
        ("aiohttp_client, aiohttp_server", "aiohttp_client", "aiohttp_server"),
    ],
)
def test_fixture_shuts_down_every_client_after_the_test(pytester, fixtures, start_a, start_b):
    pytester.makeini(INI)
    pytester.makepyfile(
        f"""
        import asyncio

        from aiorest import App

        EVENTS = []
        PORTS = []


        def make_app(label):
            async def startup(app):
                EVENTS.append(f"{{label}} startup")

            async def shutdown(app):
                EVENTS.append(f"{{label}} shutdown")

            return App(on_startup=[startup], on_shutdown=[shutdown])


        async def test_uses_two_clients_and_fails({fixtures}):
            PORTS.append((await {start_a}(make_app("a"))).port)
            PORTS.append((await {start_b}(make_app("b"))).port)
            assert EVENTS == ["a startup", "b startup"]
            assert False, "failing on purpose"


        async def test_afterwards():
            assert EVENTS == ["a startup", "b startup", "b shutdown", "a shutdown"]
            for port in PORTS:
                try:
                    await asyncio.open_connection("127.0.0.1", port)
                except OSError:
                    continue
                raise AssertionError(f"port {{port}} still accepts connections")
        """
    )
    result = pytester.runpytest_inprocess(*QUIET)
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


# -- AiorestTestServer with aiohttp's TestClient, no fixture ---------------------------------


async def test_aiohttp_test_client_serves_an_app_through_aiorest_test_server():
    events: list[str] = []
    app = counting_app(events)
    server = AiorestTestServer(app)
    assert not server.started
    async with AiohttpTestClient(server) as client:
        assert events == ["startup"]
        assert server.started and server.server is not None
        assert client.app is app and client.server is server
        port = client.port
        assert isinstance(port, int) and port == server.server.port
        assert str(server.make_url("/ready")) == f"http://127.0.0.1:{port}/ready"
        resp = await client.get("/ready")
        assert resp.status == 200
        assert resp.headers["Server"] == "aiorest"  # aiorest's server, not aiohttp's
        assert await resp.json() == {"ready": True}
    assert events == ["startup", "shutdown"]
    assert server.closed and server.port is None
    assert not await accepts_connections(port)
    await server.close()  # idempotent, as aiohttp's
    assert events == ["startup", "shutdown"]


async def test_aiorest_test_server_takes_server_options_and_refuses_unknown_ones():
    server = AiorestTestServer(counting_app([]), limits=Limits(max_body_size=4))
    async with AiohttpTestClient(server) as client:
        assert (await client.post("/echo", data=b"four")).status == 200
        assert (await client.post("/echo", data=b"fives")).status == 413
    # start_server's options replace the constructor's (pytest-aiohttp's aiohttp_server passes its own there)
    server = AiorestTestServer(counting_app([]), limits=Limits(max_body_size=4))
    await server.start_server(limits=Limits(max_body_size=8))
    try:
        async with aiohttp.ClientSession() as session:
            async with session.post(server.make_url("/echo"), data=b"fives") as resp:
                assert resp.status == 200
    finally:
        await server.close()
    with pytest.raises(TypeError, match="AiorestTestServer\\(\\) got unexpected keyword argument\\(s\\): ssl"):
        AiorestTestServer(counting_app([]), ssl=True)


# -- the fixtures, overridden by aiorest's plugin --------------------------------------------


async def test_aiohttp_client_takes_an_aiorest_app(aiohttp_client):
    client = await aiohttp_client(counting_app([]))
    assert isinstance(client, AiohttpTestClient) and isinstance(client.server, AiorestTestServer)
    resp = await client.get("/ready")  # awaited without ``async with``: the client releases it
    assert resp.status == 200
    assert await resp.json() == {"ready": True}
    async with client.get("/ready") as resp:
        assert await resp.json() == {"ready": True}


async def test_aiohttp_client_keeps_cookies_across_requests(aiohttp_client):
    client = await aiohttp_client(counting_app([]))
    resp = await client.post("/login", json={"user": "ada"})
    assert resp.cookies["user"].value == "ada"
    resp = await client.get("/me")
    assert await resp.json() == {"user": "ada"}
    client.session.cookie_jar.clear()
    assert await (await client.get("/me")).json() == {"user": None}


async def test_aiohttp_client_passes_server_kwargs_and_client_kwargs(aiohttp_client):
    client = await aiohttp_client(
        counting_app([]), server_kwargs={"limits": Limits(max_body_size=4)}, headers={"X-Agent": "tests"}
    )
    assert (await (await client.post("/echo", data=b"four")).json())["agent"] == "tests"
    assert (await client.post("/echo", data=b"fives")).status == 413
    with pytest.raises(TypeError, match="unexpected keyword argument\\(s\\): nonsense"):
        await aiohttp_client(counting_app([]), server_kwargs={"nonsense": 1})


async def test_aiohttp_client_still_takes_what_pytest_aiohttp_takes(aiohttp_client):
    aiohttp_app = web.Application()

    async def hello(request: web.Request) -> web.Response:
        return web.json_response({"from": "aiohttp"})

    aiohttp_app.router.add_get("/", hello)
    client = await aiohttp_client(aiohttp_app)
    assert await (await client.get("/")).json() == {"from": "aiohttp"}
    assert "aiorest" not in client.server.__class__.__module__
    explicit = await aiohttp_client(AiorestTestServer(counting_app([])))
    assert await (await explicit.get("/ready")).json() == {"ready": True}
    with pytest.raises(ValueError, match="Unknown argument type"):
        await aiohttp_client(object())


async def test_aiohttp_server_takes_an_aiorest_app(aiohttp_server, aiohttp_client):
    events: list[str] = []
    server = await aiohttp_server(counting_app(events), limits=Limits(max_body_size=4))
    assert isinstance(server, AiorestTestServer) and events == ["startup"]
    async with aiohttp.ClientSession() as session:
        async with session.get(server.make_url("/ready")) as resp:
            assert await resp.json() == {"ready": True}
    client = await aiohttp_client(server)
    assert (await client.post("/echo", data=b"fives")).status == 413


# -- in a pytest session of its own ------------------------------------------------------------


def test_the_testing_pages_examples_pass_in_a_project_with_no_settings(tmp_path):
    """docs/testing.rst's examples copied into a new project: no pytest settings, pytest-asyncio's strict mode.

    A subprocess in a directory of its own, so no ini file or conftest.py of aiorest's applies; the
    plugins are the installed ones, loaded from their entry points (aiorest's from this checkout).
    """
    for name in ("test_ping.py", "test_ping_aiohttp.py"):
        shutil.copy(EXAMPLES / name, tmp_path / name)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = str(ROOT)
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-W", "error", "-v"]
    result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "rootdir: " + str(tmp_path) in result.stdout and "configfile" not in result.stdout
    assert "asyncio: mode=Mode.STRICT" in result.stdout  # pytest-asyncio's default: nothing was set
    assert re.search(r"^plugins: .*aiorest-", result.stdout, re.MULTILINE)  # the plugin, from its entry point
    assert "5 passed" in result.stdout


def test_docs_testing_examples_pass_under_pytest_aiohttp(pytester):
    """The testing page's examples, as a user's suite: both styles, and the migration's before and after."""
    pytester.makeini(INI)
    for name in ("test_ping.py", "test_ping_aiohttp.py"):
        shutil.copy(EXAMPLES / name, pytester.path / name)
    for name in ("notes_aiohttp.py", "notes_aiorest.py"):
        shutil.copy(EXAMPLES / "migrating" / name, pytester.path / f"test_{name}")
    result = pytester.runpytest_inprocess(*QUIET, "-v")
    result.assert_outcomes(passed=2 + 3 + 2 + 2)
    result.stdout.fnmatch_lines(["*test_notes_aiorest.py::test_language_cookie PASSED*"])


def test_a_conftest_override_and_aiohttp_client_cls_still_apply(pytester):
    """A user's conftest.py overrides aiorest's fixture, and gets it when it asks for aiohttp_client."""
    pytester.makeini(INI)
    pytester.makeconftest(
        """
        import pytest
        from aiohttp.test_utils import TestClient


        class GreetingClient(TestClient):
            async def hello(self):
                return await (await self.get("/hello")).json()


        @pytest.fixture
        def aiohttp_client_cls():
            return GreetingClient


        @pytest.fixture
        def aiohttp_client(aiohttp_client):
            async def make(app, **kwargs):
                kwargs.setdefault("headers", {"X-Agent": "conftest"})
                return await aiohttp_client(app, **kwargs)

            return make
        """
    )
    pytester.makepyfile(
        """
        from aiorest import App


        async def test_both(aiohttp_client):
            app = App()

            @app.get("/hello")
            async def hello(request):
                return {"agent": request.headers["x-agent"]}

            client = await aiohttp_client(app)
            assert await client.hello() == {"agent": "conftest"}
        """
    )
    pytester.runpytest_inprocess(*QUIET).assert_outcomes(passed=1)


def test_without_pytest_aiohttp_the_aiorest_fixture_still_works(pytester):
    pytester.makeini(INI)
    shutil.copy(EXAMPLES / "test_ping.py", pytester.path / "test_ping.py")
    pytester.makepyfile(
        test_no_aiohttp="""
        def test_no_aiohttp_client(request):
            assert "aiohttp_client" not in request.fixturenames
            assert not request.config.pluginmanager.has_plugin("aiorest._pytest_aiohttp")
        """
    )
    result = pytester.runpytest_inprocess(*QUIET, "-p", "no:aiohttp")
    result.assert_outcomes(passed=3)


def test_the_migrated_tests_are_the_tests_of_before():
    def tests(name: str) -> dict[str, str]:
        tree = ast.parse((EXAMPLES / "migrating" / name).read_text())
        return {
            node.name: ast.unparse(node)
            for node in tree.body
            if isinstance(node, ast.AsyncFunctionDef) and node.name.startswith("test_")
        }

    before = tests("notes_aiohttp.py")
    assert set(before) == {"test_notes", "test_language_cookie"}
    assert tests("notes_aiorest.py") == before

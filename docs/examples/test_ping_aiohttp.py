"""Testing an app with pytest-aiohttp: its aiohttp_client fixture takes an aiorest App."""

import pytest

from aiorest import App, Limits, Request
from aiorest.testing import AiorestTestServer

# pytest-asyncio runs the async tests of this module: no setting needed (see "Settings for pytest-asyncio").
pytestmark = pytest.mark.asyncio

app = App()


@app.get("/ping")
async def ping(request: Request) -> dict[str, bool]:
    return {"pong": True}


@app.post("/echo")
async def echo(request: Request) -> dict[str, str]:
    return {"body": (await request.read()).decode(), "agent": request.headers.get("x-agent", "")}


async def test_ping(aiohttp_client):
    client = await aiohttp_client(app)
    resp = await client.get("/ping")
    assert resp.status == 200
    assert await resp.json() == {"pong": True}


async def test_server_and_client_options(aiohttp_client):
    # server_kwargs go to aiorest's server, the other keywords to aiohttp's ClientSession.
    limits = Limits(max_body_size=16)
    client = await aiohttp_client(app, server_kwargs={"limits": limits}, headers={"X-Agent": "t"})
    resp = await client.post("/echo", data=b"hello")
    assert await resp.json() == {"body": "hello", "agent": "t"}
    resp = await client.post("/echo", data=b"x" * 17)
    assert resp.status == 413


async def test_ping_with_an_explicit_server(aiohttp_client):
    # What aiohttp_client(app) does for you; this form needs no plugin of aiorest's.
    client = await aiohttp_client(AiorestTestServer(app))
    async with client.head("/ping") as resp:
        assert resp.status == 200

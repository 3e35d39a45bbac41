"""Testing an app: the aiorest_client fixture, and TestClient on its own."""

import pytest

from aiorest import App, Request
from aiorest.testing import TestClient

# pytest-asyncio runs the async tests of this module: no setting needed (see "Settings for pytest-asyncio").
pytestmark = pytest.mark.asyncio

app = App()


@app.get("/ping")
async def ping(request: Request) -> dict[str, bool]:
    return {"pong": True}


async def test_ping(aiorest_client):
    client = await aiorest_client(app)
    async with client.get("/ping") as response:
        assert response.status == 200
        assert await response.json() == {"pong": True}


async def test_ping_without_fixture():
    async with TestClient(app) as client:
        async with client.head("/ping") as response:
            assert response.status == 200
            assert response.headers["Content-Type"] == "application/json"

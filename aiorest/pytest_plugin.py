"""pytest plugin (registered as the ``aiorest`` entry point): the ``aiorest_client`` fixture.

    async def test_hello(aiorest_client):
        client = await aiorest_client(app)
        response = await client.get("/hello")
        assert response.status == 200

The fixture is a factory: each call starts the app (startup hooks included) on
a free port; every client is closed, and the app shut down, after the test.
It is an async fixture of pytest-asyncio's, so it runs on the test's own loop
(no ``event_loop`` fixture involved).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from .app.application import App

try:
    import pytest_asyncio
except ImportError:  # pragma: no cover - the plugin must never break a pytest run
    pytest_asyncio = None  # type: ignore[assignment]

ClientFactory = Callable[..., Awaitable[Any]]


async def _clients() -> AsyncIterator[ClientFactory]:
    from .testing import TestClient

    clients: list[TestClient] = []

    async def make(app: App, **options: Any) -> TestClient:
        client = TestClient(app, **options)
        await client.start()
        clients.append(client)
        return client

    try:
        yield make
    finally:
        for client in reversed(clients):
            await client.close()


if pytest_asyncio is not None:
    aiorest_client = pytest_asyncio.fixture(_clients, name="aiorest_client")
else:  # pragma: no cover

    @pytest.fixture(name="aiorest_client")
    def aiorest_client() -> None:
        pytest.fail("the aiorest_client fixture needs pytest-asyncio: pip install '.[testing]' in aiorest's checkout")

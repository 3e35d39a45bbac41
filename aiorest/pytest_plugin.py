"""pytest plugin (registered as the ``aiorest`` entry point): the ``aiorest_client`` fixture.

    async def test_hello(aiorest_client):
        client = await aiorest_client(app)
        response = await client.get("/hello")
        assert response.status == 200

The fixture is a factory: each call starts the app (startup hooks included) on
a free port; every client is closed, and the app shut down, after the test.
It is an async fixture of pytest-asyncio's, so it runs on the test's own loop
(no ``event_loop`` fixture involved).

With pytest-aiohttp loaded, the plugin also registers ``_pytest_aiohttp``, whose
``aiohttp_client`` and ``aiohttp_server`` take an aiorest App as well as what
pytest-aiohttp's take (that module says why they override pytest-aiohttp's).
"""

from __future__ import annotations

import sys
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


def pytest_configure(config: pytest.Config) -> None:
    # Registered now, after every plugin pytest loaded at start, its fixtures come after
    # pytest-aiohttp's of the same names, and so override them (a conftest.py's still win).
    aiohttp_plugin = sys.modules.get("pytest_aiohttp.plugin")
    if aiohttp_plugin is not None and config.pluginmanager.is_registered(aiohttp_plugin):
        from . import _pytest_aiohttp

        config.pluginmanager.register(_pytest_aiohttp, "aiorest._pytest_aiohttp")

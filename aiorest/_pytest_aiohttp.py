"""pytest-aiohttp's ``aiohttp_client`` and ``aiohttp_server`` fixtures, taught aiorest Apps.

pytest-aiohttp has no hook for other kinds of app: its fixtures take an aiohttp
Application (or, for ``aiohttp_client``, any BaseTestServer) and raise ValueError
otherwise. So the aiorest plugin registers this module when pytest-aiohttp is
loaded, and its fixtures override pytest-aiohttp's the way a conftest.py's would:
each asks for the one it overrides, serves an aiorest App with
:class:`~aiorest.testing.AiorestTestServer`, and hands anything else on unchanged.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import pytest
import pytest_asyncio

from .app.application import App
from .testing import AiorestTestServer

Factory = Callable[..., Awaitable[Any]]


@pytest.fixture
def aiohttp_client(aiohttp_client: Factory) -> Factory:
    """``await aiohttp_client(app, server_kwargs=..., **client_kwargs)``, with an aiorest App too."""

    async def make(param: Any, *args: Any, server_kwargs: Mapping[str, Any] | None = None, **kwargs: Any) -> Any:
        if isinstance(param, App):
            param, server_kwargs = AiorestTestServer(param, **(server_kwargs or {})), None
        return await aiohttp_client(param, *args, server_kwargs=server_kwargs, **kwargs)

    return make


@pytest_asyncio.fixture
async def aiohttp_server(aiohttp_server: Factory) -> AsyncIterator[Factory]:
    """``await aiohttp_server(app, host=..., port=..., **start_options)``, with an aiorest App too."""
    servers: list[AiorestTestServer] = []

    async def make(app: Any, *, host: str = "127.0.0.1", port: int | None = None, **kwargs: Any) -> Any:
        if not isinstance(app, App):
            return await aiohttp_server(app, host=host, port=port, **kwargs)
        server = AiorestTestServer(app, host=host, port=port)
        await server.start_server(**kwargs)  # a startup that fails is undone by the server itself
        servers.append(server)
        return server

    try:
        yield make
    finally:
        for server in reversed(servers):
            await server.close()

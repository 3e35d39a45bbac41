"""Test an App over real TCP: its startup and shutdown, its server, an HTTP client.

    async with TestClient(app) as client:
        response = await client.get("/notes/1")
        assert response.status == 200
        assert await response.json() == {...}

The client is an ``aiohttp.ClientSession`` bound to the server's URL; each
method returns aiohttp's response. aiohttp is needed (aiorest's ``testing`` extra).
"""

from __future__ import annotations

from types import TracebackType
from typing import Any

import aiohttp

from .app.application import App
from .http.limits import Limits
from .server.server import Server

__all__ = ["TestClient"]


class TestClient:
    """Runs ``app`` on 127.0.0.1 on a free port and talks to it over TCP."""

    __test__ = False  # not a pytest test class, despite its name

    def __init__(self, app: App, *, limits: Limits | None = None, **session_options: Any) -> None:
        self.app = app
        self.server = Server(app, host="127.0.0.1", port=0, limits=limits)
        self._session_options = session_options
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        """Run the app's startup, start the server, open the client session."""
        await self.server.start()
        options = dict(self._session_options)
        # aiohttp's default jar drops cookies set by an IP address, and the server is 127.0.0.1:
        # keep them, as a browser would from a host name, so that a login's session cookie is sent back.
        options.setdefault("cookie_jar", aiohttp.CookieJar(unsafe=True))
        self._session = aiohttp.ClientSession(base_url=self.server.url, **options)

    async def close(self) -> None:
        """Close the session, stop the server and run the app's shutdown."""
        if self._session is not None:
            await self._session.close()
            self._session = None
        await self.server.stop(timeout=5.0)

    async def __aenter__(self) -> TestClient:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("the TestClient is not started: use 'async with TestClient(app)'")
        return self._session

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def url(self) -> str:
        return self.server.url

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        """Send a request (aiohttp's ``ClientSession.request`` arguments)."""
        return self.session.request(method, path, **kwargs)

    def get(self, path: str, **kwargs: Any) -> Any:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, **kwargs: Any) -> Any:
        return self.request("POST", path, **kwargs)

    def put(self, path: str, **kwargs: Any) -> Any:
        return self.request("PUT", path, **kwargs)

    def patch(self, path: str, **kwargs: Any) -> Any:
        return self.request("PATCH", path, **kwargs)

    def delete(self, path: str, **kwargs: Any) -> Any:
        return self.request("DELETE", path, **kwargs)

    def head(self, path: str, **kwargs: Any) -> Any:
        return self.request("HEAD", path, **kwargs)

    def options(self, path: str, **kwargs: Any) -> Any:
        return self.request("OPTIONS", path, **kwargs)

"""Test an App over real TCP: its startup and shutdown, its server, an HTTP client.

    async with TestClient(app) as client:
        response = await client.get("/notes/1")
        assert response.status == 200
        assert await response.json() == {...}

The client is an ``aiohttp.ClientSession`` bound to the server's URL; each
method returns aiohttp's response. aiohttp is needed (aiorest's ``testing`` extra).

:class:`AiorestTestServer` serves an App the same way for aiohttp's own test
client, and so for pytest-aiohttp: ``await aiohttp_client(AiorestTestServer(app))``.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any

import aiohttp
from aiohttp.test_utils import BaseTestServer
from aiohttp.web import BaseRunner
from yarl import URL

from .app.application import App
from .http.limits import Limits
from .http.sse import EventStreamParser, ServerSentEvent
from .server.config import ServerConfig
from .server.server import Server

__all__ = ["TestClient", "AiorestTestServer", "EventStream"]

#: Seconds a test server gives the requests in flight when it stops.
_STOP_TIMEOUT = 5.0


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
        await self.server.stop(timeout=_STOP_TIMEOUT)

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

    @asynccontextmanager
    async def sse(self, path: str, *, last_event_id: str | None = None, **kwargs: Any) -> AsyncIterator[EventStream]:
        """GET ``path`` as a browser's ``EventSource`` does, and read its events as they come:
        ``async with client.sse("/ticks") as events: event = await anext(events)``.

        ``last_event_id`` is sent as ``Last-Event-ID`` (a reconnection); other arguments are
        ``ClientSession.get``'s. Leaving the block closes the connection, as a browser's ``close()``.
        """
        headers = dict(kwargs.pop("headers", None) or {})
        headers.setdefault("Accept", "text/event-stream")
        headers.setdefault("Cache-Control", "no-cache")
        if last_event_id is not None:
            headers["Last-Event-ID"] = last_event_id
        async with self.session.get(path, headers=headers, **kwargs) as response:
            yield EventStream(response)

    def ws_connect(self, path: str, **kwargs: Any) -> Any:
        """Open a WebSocket (aiohttp's ``ClientSession.ws_connect`` arguments): see :doc:`websockets`."""
        return self.session.ws_connect(path, **kwargs)


class EventStream:
    """The events of a response, parsed as a browser's ``EventSource`` does (:class:`~aiorest.http.EventStreamParser`).

    Iterate it for :class:`~aiorest.ServerSentEvent` objects (``data`` a str, ``event`` ``"message"``
    unless named, ``id`` the last id seen); it ends with the response. ``response`` is aiohttp's (status,
    headers); ``comments`` counts the comments received (heartbeats), ``retry`` is the last ``retry:``.
    """

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self.response = response
        self._parser = EventStreamParser()
        self._ready: deque[ServerSentEvent] = deque()  # the events of one chunk read

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> ServerSentEvent:
        while not self._ready:
            chunk = await self.response.content.readany()
            if not chunk:
                raise StopAsyncIteration
            self._ready.extend(self._parser.feed(chunk))
        return self._ready.popleft()

    @property
    def comments(self) -> int:
        return self._parser.comments

    @property
    def retry(self) -> int | None:
        return self._parser.retry

    @property
    def last_event_id(self) -> str:
        return self._parser.last_event_id


class AiorestTestServer(BaseTestServer):
    """Serves ``app`` on aiorest's server, on 127.0.0.1 and a free port, for aiohttp's test client.

    aiohttp's :class:`~aiohttp.test_utils.TestClient`, and so pytest-aiohttp's
    ``aiohttp_client`` fixture, take any :class:`~aiohttp.test_utils.BaseTestServer`:
    ``client = await aiohttp_client(AiorestTestServer(app))``. Starting it runs the
    app's startup and listens; closing it (the client does) stops the server and
    runs the app's shutdown.

    ``server_options`` are :class:`~aiorest.server.ServerConfig` fields
    (``limits=``, ``max_concurrency=``, ``health=`` ...); those given to
    :meth:`start_server` replace them. There is no TLS: ``scheme`` is ``http``.
    """

    def __init__(
        self,
        app: App,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        scheme: str = "",
        skip_url_asserts: bool = False,
        **server_options: Any,
    ) -> None:
        super().__init__(scheme=scheme, host=host, port=port, skip_url_asserts=skip_url_asserts)
        #: The aiorest App served (aiohttp's ``client.app`` too).
        self.app = app
        #: The server's options (unknown ones fail here, where the test names them, not when it starts).
        self.config = ServerConfig.of(None, server_options, what="AiorestTestServer()")
        #: aiorest's :class:`~aiorest.server.Server`, once started.
        self.server: Server | None = None

    async def start_server(self, loop: asyncio.AbstractEventLoop | None = None, **server_options: Any) -> None:
        """Run the app's startup and listen (on the running loop: aiohttp's ``loop`` is not used)."""
        if self.server is not None:
            return
        config = ServerConfig.of(self.config, server_options, what="AiorestTestServer.start_server()")
        server = Server(self.app, config, host=self.host, port=self.port or 0)
        await server.start()
        self.server = server
        self.port = server.port
        self.scheme = self.scheme or "http"
        self._root = URL.build(scheme=self.scheme, host=self.host, port=self.port)

    @property
    def started(self) -> bool:
        return self.server is not None

    async def close(self) -> None:
        """Stop the server (requests in flight get 5 seconds) and run the app's shutdown."""
        if self.server is not None and not self.closed:
            await self.server.stop(timeout=_STOP_TIMEOUT)
            self._root = None
            self.port = None
            self._closed = True

    async def _make_runner(self, **kwargs: Any) -> BaseRunner:
        raise TypeError("AiorestTestServer serves with aiorest's Server, not with an aiohttp runner")

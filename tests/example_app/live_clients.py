"""A client of the example app's live feed on several hosts, for the tests that run it so:
tests/example_app/test_live_cluster.py (processes on loopback) and tests/load/test_cluster_live.py
(network namespaces)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any

import aiohttp

from aiorest.testing import EventStream

WAIT = 10  # seconds an awaited event may take: a bound for a failing test, not a measure

Event = tuple[str, int, int, int]  # what a stream says of a write: (kind, event id, note id, version)


class LiveClient:
    """An aiohttp session and every stream it opened, closed together when its block ends."""

    def __init__(self) -> None:
        self.session = aiohttp.ClientSession()
        self.streams: list[aiohttp.ClientResponse | aiohttp.ClientWebSocketResponse] = []

    async def __aenter__(self) -> LiveClient:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        for stream in self.streams:
            closing = stream.close()  # a WebSocket's is a coroutine
            if asyncio.iscoroutine(closing):
                await closing
        await self.session.close()

    async def bearer(self, url: str) -> dict[str, str]:
        """A new user's ``Authorization`` header."""
        credentials = {"username": f"u{uuid.uuid4().hex[:12]}", "password": "correct horse battery"}
        async with self.session.post(f"{url}/users", json=credentials) as response:
            assert response.status == 201, await response.text()
        async with self.session.post(f"{url}/tokens", json=credentials) as response:
            assert response.status == 201, await response.text()
            return {"Authorization": f"Bearer {(await response.json())['token']}"}

    async def write(self, method: str, url: str, auth: dict[str, str], **body: Any) -> dict[str, Any]:
        headers = auth if method == "POST" else {**auth, "If-Match": "*"}
        async with self.session.request(method, url, json=body or None, headers=headers) as response:
            assert response.status in (200, 201, 204), await response.text()
            return await response.json() if response.status != 204 else {}

    async def sse(self, url: str, auth: dict[str, str], last_event_id: str | None = None) -> AsyncIterator[Any]:
        """An open event stream, past its ``ready``: live from there."""
        headers = auth if last_event_id is None else {**auth, "Last-Event-ID": last_event_id}
        response = await self.session.get(f"{url}/notes/events", headers=headers)
        self.streams.append(response)
        assert response.status == 200, await response.text()
        events = aiter(EventStream(response))
        assert (await next_event(events))[0] == "ready"
        return events

    async def websocket(self, url: str, auth: dict[str, str]) -> aiohttp.ClientWebSocketResponse:
        """An open ``/notes/live``, past its ``ready``."""
        ws = await self.session.ws_connect(f"{url}/notes/live", headers=auth)
        self.streams.append(ws)
        assert (await ws.receive_json(timeout=WAIT))["type"] == "ready"
        return ws


async def next_event(events: AsyncIterator[Any]) -> tuple[str, dict[str, Any]]:
    event = await asyncio.wait_for(anext(events), WAIT)
    return event.event, json.loads(event.data)


async def received(stream: AsyncIterator[Any] | aiohttp.ClientWebSocketResponse, count: int) -> list[Event]:
    """The next ``count`` events of an event stream or a WebSocket, alike."""
    if isinstance(stream, aiohttp.ClientWebSocketResponse):
        messages = [await stream.receive_json(timeout=WAIT) for _ in range(count)]
        return [(m["type"], m["id"], m["note_id"], m["version"]) for m in messages]
    events = [await next_event(stream) for _ in range(count)]
    return [(kind, data["id"], data["note_id"], data["version"]) for kind, data in events]

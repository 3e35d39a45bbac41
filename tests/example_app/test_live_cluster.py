"""The live feed across hosts: two example app processes on one database behind the shipped nginx.

A write through either host, or through nginx, reaches the owner's streams on every host, in
order, and never another user's; a host killed mid-stream loses no event for a client that
reconnects (through nginx, to the host left) with its Last-Event-ID.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid

import aiohttp
import pytest

from aiorest.testing import EventStream
from harness.fixtures import aiorest_process, nginx  # noqa: F401  (fixtures)

pytestmark = pytest.mark.slow

WAIT = 10  # seconds an awaited event may take: a bound for a failing test, not a measure


async def bearer(client: aiohttp.ClientSession, url: str) -> dict[str, str]:
    credentials = {"username": f"u{uuid.uuid4().hex[:12]}", "password": "correct horse battery"}
    async with client.post(f"{url}/users", json=credentials) as response:
        assert response.status == 201, await response.text()
    async with client.post(f"{url}/tokens", json=credentials) as response:
        assert response.status == 201, await response.text()
        return {"Authorization": f"Bearer {(await response.json())['token']}"}


async def write(client: aiohttp.ClientSession, method: str, url: str, auth: dict[str, str], **body) -> dict:
    headers = auth if method == "POST" else {**auth, "If-Match": "*"}
    async with client.request(method, url, json=body or None, headers=headers) as response:
        assert response.status in (200, 201, 204), await response.text()
        return await response.json() if response.status != 204 else {}


async def opened(client: aiohttp.ClientSession, url: str, auth: dict[str, str], last_event_id: str | None = None):
    """An open event stream, past its ``ready``: live from there. Closed with the client."""
    headers = auth if last_event_id is None else {**auth, "Last-Event-ID": last_event_id}
    response = await client.get(f"{url}/notes/events", headers=headers)
    client.streams.append(response)  # type: ignore[attr-defined]
    assert response.status == 200, await response.text()
    events = aiter(EventStream(response))
    assert (await next_event(events))[0] == "ready"
    return response, events


async def next_event(events) -> tuple[str, dict]:
    event = await asyncio.wait_for(anext(events), WAIT)
    return event.event, json.loads(event.data)


async def test_a_write_through_any_host_reaches_the_owners_streams_on_every_host(
    nginx,  # noqa: F811
    aiorest_process,  # noqa: F811
    database_url,
):
    env = dict(os.environ, DATABASE_URL=database_url, DATABASE_POOL_MAX="4", DATABASE_POOL_MIN="1")
    # One after the other: the first applies the migrations.
    hosts = [aiorest_process("example_app.app:app", env=env, ready_path="/json") for _ in range(2)]
    nginx.start([host.upstream for host in hosts])
    async with aiohttp.ClientSession() as client:
        client.streams = []  # type: ignore[attr-defined]
        try:
            await through_two_hosts(client, hosts, nginx.url)
        finally:
            for response in client.streams:  # type: ignore[attr-defined]
                closing = response.close()  # a WebSocket's is a coroutine
                if asyncio.iscoroutine(closing):
                    await closing


async def through_two_hosts(client: aiohttp.ClientSession, hosts: list, nginx_url: str) -> None:
    """Streams on both hosts, writes through each and through nginx, then host 1 killed."""
    ada, bob = await bearer(client, nginx_url), await bearer(client, nginx_url)
    streams = [await opened(client, host.url, ada) for host in hosts]
    _, bobs = await opened(client, hosts[1].url, bob)
    ws = await client.ws_connect(f"{hosts[1].url}/notes/live", headers=ada)
    client.streams.append(ws)  # type: ignore[attr-defined]
    assert (await ws.receive_json(timeout=WAIT))["type"] == "ready"

    note = await write(client, "POST", f"{hosts[0].url}/notes", ada, title="through host 0")
    await write(client, "PATCH", f"{hosts[1].url}/notes/{note['id']}", ada, done=True)
    await write(client, "DELETE", f"{nginx_url}/notes/{note['id']}", ada)
    theirs = await write(client, "POST", f"{nginx_url}/notes", bob, title="bob's")
    for _, events in streams:
        got = [await next_event(events) for _ in range(3)]
        assert [(kind, data["note_id"], data["version"]) for kind, data in got] == [
            ("created", note["id"], 1),
            ("updated", note["id"], 2),
            ("deleted", note["id"], 2),
        ]
    messages = [await ws.receive_json(timeout=WAIT) for _ in range(3)]
    assert [(m["type"], m["note_id"]) for m in messages] == [(kind, note["id"]) for kind, _ in got]
    kind, data = await next_event(bobs)  # ada's three came not before it
    assert (kind, data["note_id"]) == ("created", theirs["id"])

    # Host 1 killed mid-stream: its client reconnects through nginx, to host 0, and misses nothing.
    response, events = streams[1]
    last = str(got[-1][1]["id"])
    hosts[1].kill()
    with pytest.raises((aiohttp.ClientError, StopAsyncIteration)):
        await next_event(events)
    meanwhile = [await write(client, "POST", f"{nginx_url}/notes", ada, title=f"while down {n}") for n in range(3)]
    response, events = await opened(client, nginx_url, ada, last_event_id=last)
    got = [await next_event(events) for _ in range(3)]
    assert [data["note_id"] for _, data in got] == [note["id"] for note in meanwhile]

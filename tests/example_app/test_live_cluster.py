"""The live feed across hosts: two example app processes on one database behind the shipped nginx.

A write through either host, or through nginx, reaches the owner's streams on every host, in
order, and never another user's; a host killed mid-stream loses no event for a client that
reconnects (through nginx, to the host left) with its Last-Event-ID. tests/load/test_cluster_live.py
does the same with three hosts of their own (network namespaces) and PgBouncer.
"""

from __future__ import annotations

import os

import aiohttp
import pytest

from harness.fixtures import aiorest_process, nginx  # noqa: F401  (fixtures)
from tests.example_app.live_clients import LiveClient, next_event, received

pytestmark = pytest.mark.slow


async def test_a_write_through_any_host_reaches_the_owners_streams_on_every_host(
    nginx,  # noqa: F811
    aiorest_process,  # noqa: F811
    database_url,
):
    env = dict(os.environ, DATABASE_URL=database_url, DATABASE_POOL_MAX="4", DATABASE_POOL_MIN="1")
    # One after the other: the first applies the migrations.
    hosts = [aiorest_process("example_app.app:app", env=env, ready_path="/json") for _ in range(2)]
    nginx.start([host.upstream for host in hosts])
    async with LiveClient() as client:
        await through_two_hosts(client, hosts, nginx.url)


async def through_two_hosts(client: LiveClient, hosts: list, nginx_url: str) -> None:
    """Streams on both hosts, writes through each and through nginx, then host 1 killed."""
    ada, bob = await client.bearer(nginx_url), await client.bearer(nginx_url)
    streams = [await client.sse(host.url, ada) for host in hosts]
    bobs = await client.sse(hosts[1].url, bob)
    ws = await client.websocket(hosts[1].url, ada)

    note = await client.write("POST", f"{hosts[0].url}/notes", ada, title="through host 0")
    await client.write("PATCH", f"{hosts[1].url}/notes/{note['id']}", ada, done=True)
    await client.write("DELETE", f"{nginx_url}/notes/{note['id']}", ada)
    theirs = await client.write("POST", f"{nginx_url}/notes", bob, title="bob's")
    for events in streams:
        got = await received(events, 3)
        assert [(kind, note_id, version) for kind, _, note_id, version in got] == [
            ("created", note["id"], 1),
            ("updated", note["id"], 2),
            ("deleted", note["id"], 2),
        ]
    assert await received(ws, 3) == got
    kind, data = await next_event(bobs)  # ada's three came not before it
    assert (kind, data["note_id"]) == ("created", theirs["id"])

    # Host 1 killed mid-stream: its client reconnects through nginx, to host 0, and misses nothing.
    events = streams[1]
    last = str(got[-1][1])
    hosts[1].kill()
    with pytest.raises((aiohttp.ClientError, StopAsyncIteration)):
        await next_event(events)
    meanwhile = [await client.write("POST", f"{nginx_url}/notes", ada, title=f"while down {n}") for n in range(3)]
    events = await client.sse(nginx_url, ada, last_event_id=last)
    got = await received(events, 3)
    assert [note_id for _, _, note_id, _ in got] == [note["id"] for note in meanwhile]

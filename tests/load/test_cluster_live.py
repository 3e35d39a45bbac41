"""Issue 37, point 6: the example app's live feed on a cluster of hosts (load/cluster/hosts.py).

Three app hosts (``--workers 2`` each, every worker with its own LISTEN connection, straight to
PostgreSQL: ``DATABASE_LISTEN_URL``) behind nginx, their queries through PgBouncer in transaction
mode. Two users each hold an event stream on every host and a WebSocket on one; notes written
through every host and through nginx, both users at once, reach all of their owner's streams, each
note's events in order, and never another user's. A host killed mid-stream (SIGKILL, every process
of it): its client, resuming through nginx with its Last-Event-ID, gets every event written
meanwhile through the hosts left, once each, in order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import aiohttp
import pytest

from load.cluster.hosts import APP_PORT, Cluster, ClusterConfig
from tests.example_app.live_clients import Event, LiveClient, received
from tests.load.namespaces import running_cluster


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    yield from running_cluster(ClusterConfig(app_hosts=3, workers=2))


def host_urls(cluster: Cluster) -> list[str]:
    return [f"http://{cluster.address(name)}:{APP_PORT}" for name in cluster.app_names]


async def lives(client: LiveClient, entries: list[str], auth: dict[str, str], first: int) -> list[int]:
    """A note's whole life (created, updated, deleted) for each entry, each write through another entry,
    the notes at once: their ids."""

    async def life(k: int) -> int:
        through = [entries[(k + step) % len(entries)] for step in range(3)]
        note = await client.write("POST", f"{through[0]}/notes", auth, title=f"through entry {k}")
        await client.write("PATCH", f"{through[1]}/notes/{note['id']}", auth, done=True)
        await client.write("DELETE", f"{through[2]}/notes/{note['id']}", auth)
        return note["id"]

    return list(await asyncio.gather(*(life(k) for k in range(first, first + len(entries)))))


def check_feed(got: list[Event], notes: list[int]) -> None:
    """Each of ``notes`` created, updated, deleted, in that order; nothing else, nothing twice."""
    ids = [event_id for _, event_id, _, _ in got]
    assert ids == sorted(set(ids)), got
    lives = {note: [(kind, version) for kind, _, note_id, version in got if note_id == note] for note in notes}
    assert lives == {note: [("created", 1), ("updated", 2), ("deleted", 2)] for note in notes}, got
    assert len(got) == 3 * len(notes), got


async def test_a_note_written_through_any_host_reaches_its_owners_streams_on_every_host(cluster):
    hosts = host_urls(cluster)
    entries = [*hosts, cluster.url]
    async with LiveClient() as client:
        users = [await client.bearer(cluster.url) for _ in range(2)]
        streams = [[await client.sse(host, auth) for host in hosts] for auth in users]
        for number, auth in enumerate(users):  # ada's WebSocket on the first host, bob's on the second
            streams[number].append(await client.websocket(hosts[number], auth))
        notes = await asyncio.gather(*(lives(client, entries, auth, first=n) for n, auth in enumerate(users)))
        # Written once the other user's writes are all done: another user's event would come before it.
        last = [await client.write("POST", f"{cluster.url}/notes", auth, title="the last") for auth in users]
        for number in range(2):
            feeds = [await received(stream, 3 * len(notes[number]) + 1) for stream in streams[number]]
            for got in feeds:
                check_feed(got[:-1], notes[number])
                assert got[-1][::2] == ("created", last[number]["id"])
            assert all(got == feeds[0] for got in feeds)  # the same events, with the same ids, on every host


async def test_a_host_killed_mid_stream_loses_no_event_for_a_client_resuming_through_the_balancer(cluster):
    hosts = host_urls(cluster)
    victim, left = cluster.app_names[-1], [*hosts[:-1], cluster.url]
    async with LiveClient() as client:
        ada = await client.bearer(cluster.url)
        witness = await client.sse(hosts[0], ada)
        events = await client.sse(hosts[-1], ada)
        before = await lives(client, hosts, ada, first=0)  # through every host, the victim too
        got = await received(events, 4)  # mid-stream: five more are sent or on their way
        assert cluster.kill_app_host(victim) >= 3  # aiorest and its two workers
        try:
            with pytest.raises((aiohttp.ClientError, StopAsyncIteration)):
                while True:  # what reached the client before the kill, then the end
                    got += await received(events, 1)
            meanwhile = await lives(client, left, ada, first=3)
            resumed = await client.sse(cluster.url, ada, last_event_id=str(got[-1][1]))
            got += await received(resumed, 3 * (len(before) + len(meanwhile)) - len(got))
            witnessed = await received(witness, 3 * (len(before) + len(meanwhile)))
            check_feed(witnessed, before + meanwhile)
            assert got == witnessed
            live = await client.write("POST", f"{cluster.url}/notes", ada, title="live")
            assert (await received(resumed, 1))[0][::2] == ("created", live["id"])  # nothing came twice
        finally:
            await asyncio.to_thread(cluster.restart_app, victim)  # the module's cluster whole again

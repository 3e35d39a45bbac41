"""The example app's live feed over real sockets and real PostgreSQL: GET /notes/events (SSE) and
/notes/live (WebSocket), fed by the writes' own NOTIFY (example_app/live.py), on each database driver."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator

import aiohttp
import pytest

from aiorest.db import Database
from example_app import create_app, live

WAIT = 10  # seconds an awaited event may take: a bound for a failing test, not a measure


class Users:
    """Two users of one app, each with a bearer token, and a database of the app's for the writes the
    API cannot make (a rolled-back one)."""

    def __init__(self, client, db: Database, application_name: str) -> None:
        self.client, self.db, self.application_name = client, db, application_name
        self.tokens: dict[str, dict[str, str]] = {}
        self.ids: dict[str, int] = {}

    async def add(self, name: str) -> dict[str, str]:
        credentials = {"username": f"{name}-{uuid.uuid4().hex[:8]}", "password": "correct horse battery"}
        async with self.client.post("/users", json=credentials) as response:
            assert response.status == 201, await response.text()
        async with self.client.post("/tokens", json=credentials) as response:
            assert response.status == 201, await response.text()
            self.tokens[name] = {"Authorization": f"Bearer {(await response.json())['token']}"}
        async with self.client.get("/me", headers=self.tokens[name]) as response:
            self.ids[name] = (await response.json())["id"]
        return self.tokens[name]

    async def write(self, who: str, method: str = "POST", path: str = "/notes", **body) -> dict:
        headers = {**self.tokens[who], "If-Match": "*"} if method != "POST" else self.tokens[who]
        json_body = body or ({"title": "a note"} if method == "POST" else None)
        async with self.client.request(method, path, json=json_body, headers=headers) as response:
            assert response.status in (200, 201, 204), await response.text()
            return await response.json() if response.status != 204 else {}


@pytest.fixture(params=["psycopg2", "aiopg"])
async def users(aiorest_client, shared_database_url, request):
    name = f"live-{uuid.uuid4().hex[:8]}"
    db = Database(shared_database_url, min_size=2, max_size=16, driver=request.param, application_name=name)
    users = Users(await aiorest_client(create_app(db)), db, name)
    await users.add("ada")
    await users.add("bob")
    return users


async def next_event(events) -> tuple[str, dict]:
    event = await asyncio.wait_for(anext(events), WAIT)
    data = json.loads(event.data)
    assert event.id == str(data["id"])  # what Last-Event-ID resumes after
    return event.event, data


async def test_sse_gets_the_owners_writes_in_order_and_never_another_users(users):
    async with users.client.sse("/notes/events", headers=users.tokens["ada"]) as events:
        assert events.response.headers["Content-Type"].startswith("text/event-stream")
        kind, ready = await next_event(events)
        assert kind == "ready" and events.retry == 1000
        await users.write("bob")  # first: were it sent to ada, it would come first
        note = await users.write("ada")
        await users.write("ada", "PATCH", f"/notes/{note['id']}", done=True)
        await users.write("ada", "DELETE", f"/notes/{note['id']}")
        got = [await next_event(events) for _ in range(3)]
    assert [(kind, data["note_id"], data["version"]) for kind, data in got] == [
        ("created", note["id"], 1),
        ("updated", note["id"], 2),
        ("deleted", note["id"], 2),
    ]
    ids = [data["id"] for _, data in got]
    assert ready["id"] < ids[0] < ids[1] < ids[2]


async def test_websocket_gets_the_same_feed_and_resumes_from_since(users):
    async with users.client.ws_connect("/notes/live", headers=users.tokens["ada"]) as ws:
        ready = await ws.receive_json(timeout=WAIT)
        assert ready["type"] == "ready"
        await users.write("bob")
        first = await users.write("ada")
        event = await ws.receive_json(timeout=WAIT)
        assert (event["type"], event["note_id"]) == ("created", first["id"])
        second = await users.write("ada")
        assert (await ws.receive_json(timeout=WAIT))["note_id"] == second["id"]
        await ws.send_json({"since": ready["id"]})  # again from before the first
        replayed = [await ws.receive_json(timeout=WAIT) for _ in range(3)]
    assert [(m["type"], m["id"]) for m in replayed[:1]] == [("ready", ready["id"])]
    assert [m["note_id"] for m in replayed[1:]] == [first["id"], second["id"]]


async def test_a_bad_resume_closes_the_websocket_1007(users):
    async with users.client.ws_connect("/notes/live", headers=users.tokens["ada"]) as ws:
        assert (await ws.receive_json(timeout=WAIT))["type"] == "ready"
        await ws.send_json({"since": "yesterday"})
        closed = await ws.receive(timeout=WAIT)
    assert closed.type == aiohttp.WSMsgType.CLOSE and closed.data == 1007


async def test_a_rolled_back_write_sends_nothing(users):
    async with users.client.sse("/notes/events", headers=users.tokens["ada"]) as events:
        await next_event(events)  # ready
        with pytest.raises(ZeroDivisionError):
            async with users.db.transaction() as tx:
                await tx.execute("INSERT INTO notes (title, owner_id) VALUES ('rolled back', %s)", (users.ids["ada"],))
                1 / 0  # noqa: B018
        note = await users.write("ada")
        kind, data = await next_event(events)
    assert (kind, data["note_id"]) == ("created", note["id"])  # the rolled-back insert came not before it


async def test_last_event_id_gets_what_was_missed_in_order_then_live_events(users):
    async with users.client.sse("/notes/events", headers=users.tokens["ada"]) as events:
        _, ready = await next_event(events)
    missed = [await users.write("ada", title=f"missed {n}") for n in range(3)]
    async with users.client.sse("/notes/events", last_event_id=str(ready["id"]), headers=users.tokens["ada"]) as events:
        assert (await next_event(events))[0] == "ready"
        got = [await next_event(events) for _ in range(3)]
        live = await users.write("ada")
        assert (await next_event(events))[1]["note_id"] == live["id"]
    assert [data["note_id"] for _, data in got] == [note["id"] for note in missed]


async def test_a_user_without_events_resumes_with_ready_after_others_events_were_pruned(users):
    # The cursor was the user's own newest event: 0 for bob, who has none. Once other users' events were
    # pruned (a test that prunes, running beside this module's, was enough), 0 looked older than what is
    # kept and bob was told to resync, having missed nothing. The cursor is the newest of anyone's now.
    await users.write("ada")
    await users.write("ada")
    async with users.client.sse("/notes/events", headers=users.tokens["bob"]) as events:
        _, ready = await next_event(events)
    await users.write("ada")
    # pruned up to bob's cursor: everything older than what he has been told of
    cursor = await users.db.fetchval("SELECT max(id) FROM note_events WHERE id <= %s", (max(ready["id"], 1),))
    await users.db.execute("DELETE FROM note_events WHERE id <= %s", (cursor,))
    async with users.client.sse("/notes/events", last_event_id=str(ready["id"]), headers=users.tokens["bob"]) as events:
        assert (await next_event(events))[0] == "ready"


async def test_a_last_event_id_not_of_ours_gets_resync(users):
    async with users.client.sse("/notes/events", last_event_id="abc", headers=users.tokens["ada"]) as events:
        assert (await next_event(events))[0] == "resync"


async def test_a_lost_listen_connection_loses_no_event(users):
    """The LISTEN connection killed, NOTIFYs are missed until it is back: the feed reads the table then.

    The event inserted by hand stands for one whose NOTIFY was missed: it is sent only because of the gap.
    """
    async with users.client.sse("/notes/events", headers=users.tokens["ada"]) as events:
        await next_event(events)
        note = await users.write("ada")
        assert (await next_event(events))[1]["note_id"] == note["id"]
        await users.db.execute(
            "INSERT INTO note_events (user_id, note_id, kind, version)"
            " SELECT user_id, note_id, 'updated', 7 FROM note_events WHERE note_id = %s",
            (note["id"],),
        )
        killed = await users.db.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = %s",
            (f"{users.application_name}-listen",),
        )
        assert killed == 1
        kind, missed = await next_event(events)
        assert (kind, missed["note_id"], missed["version"]) == ("updated", note["id"], 7)
        after = await users.write("ada")
        assert (await next_event(events))[1]["note_id"] == after["id"]


async def test_the_feed_needs_a_login(users):
    async with users.client.get("/notes/events") as response:
        assert response.status == 401
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await users.client.ws_connect("/notes/live")
    assert refused.value.status == 401


async def test_openapi_describes_the_stream(users):
    async with users.client.get("/openapi.json") as response:
        document = await response.json()
    events = document["paths"]["/notes/events"]["get"]
    assert "text/event-stream" in events["responses"]["200"]["content"]
    assert "401" in events["responses"]


async def test_resuming_from_before_the_events_kept_gets_resync_then_live_events(users):
    first, second = await users.write("ada"), await users.write("ada")
    ids = await users.db.fetchall(
        "SELECT id FROM note_events WHERE note_id IN (%s, %s) ORDER BY id", (first["id"], second["id"])
    )
    await users.db.execute("DELETE FROM note_events WHERE id <= %s", (ids[0]["id"],))  # as pruning does
    since = str(ids[0]["id"] - 1)
    async with users.client.sse("/notes/events", last_event_id=since, headers=users.tokens["ada"]) as events:
        kind, resync = await next_event(events)
        assert kind == "resync" and resync["id"] >= ids[1]["id"]  # from the newest on: reload the notes
        live = await users.write("ada")
        assert (await next_event(events))[1]["note_id"] == live["id"]


async def test_every_thousandth_event_prunes_those_100000_older(users):
    newest = await users.db.fetchval("SELECT coalesce(max(id), 0) FROM note_events")
    bound = (newest // 1000 + 101) * 1000  # the next event's id, a thousandth: it prunes ids up to bound - 100000
    await users.db.fetchval("SELECT setval('note_events_id_seq', %s)", (bound - 1,))
    await users.write("ada")
    assert await users.db.fetchval("SELECT min(id) FROM note_events") == bound  # newest <= bound - 100000


@pytest.fixture
async def held(aiorest_client, shared_database_url):
    """Users of an app whose pool of two connections the test can hold, and a writer of its own."""
    name = f"live-slow-{uuid.uuid4().hex[:8]}"
    db = Database(shared_database_url, min_size=1, max_size=2, acquire_timeout=WAIT, application_name=name)
    users = Users(await aiorest_client(create_app(db)), db, name)
    await users.add("ada")
    writer = Database(shared_database_url, min_size=1, max_size=1, application_name=f"{name}-writer")
    await writer.open()
    yield users, writer
    await writer.close()


@contextlib.asynccontextmanager
async def falling_behind(users: Users, writer: Database) -> AsyncIterator[int]:
    """A stream of ada's left behind: the app's pool held, so that her feed cannot read the table,
    while one transaction writes ``QUEUE_SIZE + 2`` notes of hers (as many NOTIFYs), more than her
    stream's queue holds; the pool released once they all reached this process. Gives that number."""
    count = live.QUEUE_SIZE + 2
    async with users.db.listen(live.CHANNEL, queue_size=4 * count) as probe:
        async with users.db.connection(), users.db.connection():
            await writer.execute(
                "INSERT INTO notes (title, owner_id) SELECT 'burst ' || n, %s FROM generate_series(1, %s) n",
                (users.ids["ada"], count),
            )
            seen = 0
            while seen < count:  # delivered to the probe, so to every subscriber of this process
                item = await asyncio.wait_for(anext(probe), WAIT)
                seen += json.loads(item.payload)["user_id"] == users.ids["ada"]  # type: ignore[union-attr]
    yield count


async def test_an_event_stream_that_falls_behind_ends_and_its_client_resumes_losing_nothing(held):
    users, writer = held
    async with users.client.sse("/notes/events", headers=users.tokens["ada"]) as events:
        await next_event(events)  # ready
        async with falling_behind(users, writer) as count:
            got = [data async for _, data in _until_the_end(events)]
    assert len(got) == count  # what the table held when the feed read it, then the end
    missed = await users.write("ada", title="while away")
    last = str(got[-1]["id"])
    async with users.client.sse("/notes/events", last_event_id=last, headers=users.tokens["ada"]) as events:
        assert (await next_event(events))[0] == "ready"
        kind, data = await next_event(events)
        assert (kind, data["note_id"]) == ("created", missed["id"])
    ids = [data["id"] for data in got]
    assert ids == sorted(set(ids)) and ids[-1] < data["id"]


async def test_a_websocket_that_falls_behind_is_closed_1013(held):
    users, writer = held
    async with users.client.ws_connect("/notes/live", headers=users.tokens["ada"]) as ws:
        await ws.receive_json(timeout=WAIT)  # ready
        async with falling_behind(users, writer) as count:
            got = [await ws.receive_json(timeout=WAIT) for _ in range(count)]
            closed = await ws.receive(timeout=WAIT)
    assert [m["type"] for m in got] == ["created"] * count
    assert (closed.type, closed.data) == (aiohttp.WSMsgType.CLOSE, 1013)
    assert closed.extra == "fell behind: reconnect and send since"


async def _until_the_end(events) -> AsyncIterator[tuple[str, dict]]:
    while True:
        try:
            yield await next_event(events)
        except StopAsyncIteration:
            return

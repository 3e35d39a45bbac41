"""The example app over HTTP against real PostgreSQL: the notes resource, as a logged-in user.

Users, logins, tokens and who may see which note: tests/example_app/test_example_users.py.
"""

from __future__ import annotations

import asyncio
import json
import random
import uuid
import zlib

import aiohttp
import pytest

from aiorest.db import Database
from example_app import create_app


@pytest.fixture(params=["psycopg2", "aiopg"])
async def client(aiorest_client, shared_database_url, request):
    """A client logged in as a new user: its cookie jar holds the session; on each database driver."""
    app = create_app(Database(shared_database_url, min_size=2, max_size=16, driver=request.param))
    client = await aiorest_client(app)
    await log_in(client, unique("user"))
    return client


async def log_in(client, username: str, password: str = "correct horse battery") -> dict:
    """Register ``username`` and log the client in as them (the session cookie goes to its jar)."""
    async with client.post("/users", json={"username": username, "password": password}) as response:
        assert response.status == 201, await response.text()
    async with client.post("/login", json={"username": username, "password": password}) as response:
        assert response.status == 200, await response.text()
        return await response.json()


def unique(prefix: str = "note") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


async def create(client, **fields) -> dict:
    async with client.post("/notes", json={"title": unique(), **fields}) as response:
        assert response.status == 201, await response.text()
        return await response.json()


async def test_create_read_and_location(client):
    async with client.post("/notes", json={"title": " Buy milk ", "body": "2 litres"}) as response:
        assert response.status == 201
        note = await response.json()
        assert response.headers["Location"] == f"/notes/{note['id']}"
        assert response.headers["ETag"] == '"1"'
    assert note["title"] == "Buy milk" and note["body"] == "2 litres" and note["done"] is False
    assert note["version"] == 1 and note["created_at"] == note["updated_at"]
    async with client.get(f"/notes/{note['id']}") as response:
        assert response.status == 200 and await response.json() == note


@pytest.mark.parametrize(
    ("body", "errors"),
    [
        ({}, ("body.title", "Object missing required field `title`")),
        ({"title": ""}, ("body.title", "Expected `str` matching regex")),
        ({"title": "  "}, ("body.title", "Expected `str` matching regex")),
        ({"title": "x" * 201}, ("body.title", "Expected `str` matching regex")),
        ({"title": 5, "done": "yes"}, ("body.title", "Expected `str`, got `int`")),  # msgspec stops at the first
        ({"title": "ok", "body": "b" * 10001}, ("body.body", "Expected `str` of length <= 10000")),
        ({"title": "ok", "colour": "red"}, ("body", "Object contains unknown field `colour`")),
        ([1, 2], ("body", "Expected `object`, got `array`")),
    ],
)
async def test_create_validation_is_422_with_where_and_what(client, body, errors):
    async with client.post("/notes", json=body) as response:
        assert response.status == 422
        [problem] = (await response.json())["error"]["details"]
    location, message = errors
    assert problem["location"] == location and problem["message"].startswith(message), problem


async def test_a_title_of_200_characters_once_stripped_is_valid(client):
    note = await create(client, title=" " + "x" * 200 + "\n")
    assert note["title"] == "x" * 200


async def test_create_bad_json_and_wrong_type(client):
    async with client.post("/notes", data=b"{oops", headers={"Content-Type": "application/json"}) as response:
        assert response.status == 400
    async with client.post("/notes", data=b"title=x", headers={"Content-Type": "text/plain"}) as response:
        assert response.status == 415


async def test_missing_note_is_404(client):
    async with client.get("/notes/999999999") as response:
        assert response.status == 404
    async with client.delete("/notes/999999999") as response:
        assert response.status == 404
    async with client.patch("/notes/999999999", json={"done": True}, headers={"If-Match": '"1"'}) as response:
        assert response.status == 404


async def test_get_answers_304_to_the_current_etag_and_the_note_to_a_stale_one(client):
    note = await create(client)
    url = f"/notes/{note['id']}"
    async with client.get(url, headers={"If-None-Match": '"1"'}) as response:
        assert response.status == 304
        assert response.headers["ETag"] == '"1"'
        assert await response.read() == b""
        assert "Content-Length" not in response.headers and "Content-Type" not in response.headers
    async with client.get(url, headers={"If-None-Match": 'W/"0", W/"1"'}) as response:
        assert response.status == 304  # If-None-Match compares weakly
    async with client.patch(url, json={"done": True}, headers={"If-Match": '"1"'}) as response:
        assert response.status == 200
    async with client.get(url, headers={"If-None-Match": '"1"'}) as response:
        assert response.status == 200 and response.headers["ETag"] == '"2"'
        assert (await response.json())["done"] is True
    async with client.get(url, headers={"If-None-Match": '"1", "2"'}) as response:
        assert response.status == 304
    async with client.get("/openapi.json") as response:
        paths = (await response.json())["paths"]
    assert "304" in paths["/notes/{note_id}"]["get"]["responses"]
    assert "content" not in paths["/notes/{note_id}"]["get"]["responses"]["304"]
    assert "412" in paths["/notes/{note_id}"]["patch"]["responses"]


async def test_update_with_if_match_and_stale_write_is_412(client):
    note = await create(client)
    url = f"/notes/{note['id']}"
    async with client.put(url, json={"title": "renamed", "done": True}, headers={"If-Match": '"1"'}) as response:
        assert response.status == 200
        updated = await response.json()
        assert response.headers["ETag"] == '"2"'
    assert updated["title"] == "renamed" and updated["done"] is True and updated["version"] == 2
    assert updated["updated_at"] > updated["created_at"]
    async with client.patch(url, json={"body": "late"}, headers={"If-Match": '"1"'}) as response:
        assert response.status == 412
        assert (await response.json())["error"]["details"] == {"version": 2}
    async with client.patch(url, json={"body": "now", "version": 2}) as response:
        assert response.status == 200
        assert (await response.json())["body"] == "now"
    async with client.patch(url, json={"body": "no precondition"}) as response:
        assert response.status == 428
    async with client.put(url, json={"body": "no title"}, headers={"If-Match": '"3"'}) as response:
        assert response.status == 422


async def test_if_match_lists_star_and_weak_etags(client):
    note = await create(client)
    url = f"/notes/{note['id']}"
    async with client.patch(url, json={"done": True}, headers={"If-Match": '"5", "1"'}) as response:
        assert response.status == 200  # one of the listed ETags is current
        assert response.headers["ETag"] == '"2"'
    async with client.patch(url, json={"done": False}, headers={"If-Match": 'W/"2"'}) as response:
        assert response.status == 412  # a weak ETag never matches If-Match
    async with client.patch(url, json={"done": False}, headers={"If-Match": "*"}) as response:
        assert response.status == 200
        assert (await response.json())["version"] == 3
    async with client.patch(url, json={"done": True}, headers={"If-Match": "3"}) as response:
        assert response.status == 400  # not an ETag: unquoted
    async with client.patch("/notes/999999999", json={"done": True}, headers={"If-Match": "*"}) as response:
        assert response.status == 404
    async with client.delete(url, headers={"If-Match": '"1", "2"'}) as response:
        assert response.status == 412
        assert (await response.json())["error"]["details"] == {"version": 3}
    async with client.delete(url, headers={"If-Match": "*"}) as response:
        assert response.status == 204


async def test_list_query_integers_are_strict(client):
    for value in ("1_0", "%205", "%D9%A5", "x"):
        async with client.get(f"/notes?limit={value}") as response:
            assert response.status == 422, value
            expected = [{"location": "query.limit", "message": "Expected `int`, got `str`"}]
            assert (await response.json())["error"]["details"] == expected
    async with client.get("/notes?after=" + "9" * 5000) as response:
        assert response.status == 422
        expected = [{"location": "query.after", "message": "Integer value out of range"}]
        assert (await response.json())["error"]["details"] == expected


async def test_delete_is_204_then_404(client):
    note = await create(client)
    async with client.delete(f"/notes/{note['id']}", headers={"If-Match": '"7"'}) as response:
        assert response.status == 412
    async with client.delete(f"/notes/{note['id']}") as response:
        assert response.status == 204 and await response.read() == b""
    async with client.delete(f"/notes/{note['id']}") as response:
        assert response.status == 404


async def test_list_paginates_with_a_stable_cursor_and_filters(client):
    tag = unique("page")
    created = [await create(client, title=f"{tag} {i}", done=i % 2 == 0) for i in range(7)]
    seen, url = [], f"/notes?q={tag}&limit=3"
    while url:
        async with client.get(url) as response:
            page = await response.json()
        assert len(page["items"]) <= 3
        seen += [item["id"] for item in page["items"]]
        url = page["next"] and page["next"] + f"&q={tag}"
    assert seen == [note["id"] for note in created]
    async with client.get(f"/notes?q={tag}&done=true&limit=100") as response:
        assert [item["id"] for item in (await response.json())["items"]] == [n["id"] for n in created[::2]]
    async with client.get("/notes?limit=100000") as response:
        assert len((await response.json())["items"]) <= 100  # the limit is capped
    for bad in ("limit=0", "limit=abc", "after=-1", "done=maybe"):
        async with client.get(f"/notes?{bad}") as response:
            assert response.status == 422, bad


async def test_200_concurrent_creates_lose_nothing(client):
    tag = unique("bulk")
    results = await asyncio.gather(*(create(client, title=f"{tag} {i}") for i in range(200)))
    assert len({note["id"] for note in results}) == 200
    seen, url = 0, f"/notes?q={tag}&limit=100"
    while url:
        async with client.get(url) as response:
            page = await response.json()
        seen += len(page["items"])
        url = page["next"] and page["next"] + f"&q={tag}"
    assert seen == 200


async def test_200_concurrent_conflicting_updates_add_up(client):
    note = await create(client)
    url = f"/notes/{note['id']}"

    async def bump(i: int) -> int:
        async with client.patch(url, json={"body": str(i)}, headers={"If-Match": '"1"'}) as response:
            return response.status

    statuses = await asyncio.gather(*(bump(i) for i in range(200)))
    assert statuses.count(200) == 1 and statuses.count(412) == 199  # never a 500
    async with client.get(url) as response:
        assert (await response.json())["version"] == 2


async def test_out_of_range_numbers_are_answered_not_500(client):
    async with client.get("/notes/99999999999999999999") as response:
        assert response.status == 404
    async with client.get("/notes?after=99999999999999999999") as response:
        assert response.status == 422
    note = await create(client)
    async with client.patch(f"/notes/{note['id']}", json={"body": "x", "version": 1099511627776}) as response:
        assert response.status == 422  # the version column is an integer: the database refuses it


async def test_next_link_keeps_the_text_filter(client):
    tag = unique("next")
    for i in range(3):
        await create(client, title=f"{tag} {i}")
    async with client.get(f"/notes?q={tag}&limit=2") as response:
        page = await response.json()
    async with client.get(page["next"]) as response:
        assert [item["title"] for item in (await response.json())["items"]] == [f"{tag} 2"]


def conditional_write(rng: random.Random, version: int) -> tuple[str, dict, list[int] | str]:
    """A PUT, PATCH or DELETE with a precondition near ``version``.

    Returns its method, its aiohttp arguments and the versions it accepts.
    """
    method = rng.choices(("PATCH", "PUT", "DELETE"), weights=(5, 5, 1))[0]
    guess = max(1, version + rng.choice((-1, 0, 0, 1, 1, 2)))
    fields = {"title": unique(), "body": str(guess)}
    if method == "PATCH":
        del fields["title"]
    kind = rng.randrange(5)
    if kind == 0:
        headers, accepted = {"If-Match": f'"{guess}"'}, [guess]
    elif kind == 1:
        headers, accepted = {"If-Match": f'"{guess}", "{guess + 1}"'}, [guess, guess + 1]
    elif kind == 2:
        headers, accepted = {"If-Match": f'W/"{guess}"'}, []  # a weak ETag never matches
    elif kind == 3 and method != "DELETE":
        headers, accepted = {}, [guess]
        fields["version"] = guess
    else:
        headers, accepted = {"If-Match": "*"}, "*"
    arguments: dict = {"headers": headers}
    if method != "DELETE":
        arguments["json"] = fields
    return method, arguments, accepted


async def test_concurrent_conditional_writes_of_the_same_notes_add_up(client):
    # Rounds of concurrent PUT, PATCH and DELETE on a few notes, with preconditions a
    # little behind, at and ahead of each note's version: the answer to a write that
    # missed must describe the note the write saw. (Deciding 404 or 412 by a second
    # query failed here in every run: a 412 reported a version the request named.)
    rng = random.Random(18)
    live = {note["id"]: 1 for note in [await create(client) for _ in range(4)]}  # id: newest version seen
    answers: dict[int, list[tuple[str, list[int] | str, int, dict]]] = {note_id: [] for note_id in live}

    async def send(note_id: int) -> tuple[int, int, dict]:
        method, arguments, accepted = conditional_write(rng, live[note_id])
        async with client.request(method, f"/notes/{note_id}", **arguments) as response:
            body = await response.json() if response.status not in (204, 500) else {}
        answers[note_id].append((method, accepted, response.status, body))
        return note_id, response.status, body

    for _ in range(60):
        replies = await asyncio.gather(*(send(note_id) for note_id in live for _ in range(6)))
        for note_id, status, body in replies:
            if status == 200:
                live[note_id] = max(live[note_id], body["version"])
        for note_id in {note_id for note_id, status, _ in replies if status == 204}:
            del live[note_id]
            note = await create(client)
            live[note["id"]], answers[note["id"]] = 1, []

    for note_id, replies in answers.items():
        statuses = [status for _, _, status, _ in replies]
        assert set(statuses) <= {200, 204, 404, 412}, statuses
        versions = sorted(body["version"] for _, _, status, body in replies if status == 200)
        assert versions == list(range(2, 2 + len(versions)))  # each 200 made one new version
        async with client.get(f"/notes/{note_id}") as response:
            if statuses.count(204):
                assert statuses.count(204) == 1 and response.status == 404
            else:
                assert 404 not in statuses  # no note vanished without a delete
                assert (await response.json())["version"] == 1 + len(versions)
        for method, accepted, status, body in replies:
            if status == 200:
                assert accepted == "*" or body["version"] - 1 in accepted, (method, accepted, body)
            elif status == 412:
                found = body["error"]["details"]["version"]
                assert 1 <= found <= 1 + len(versions), (method, accepted, found)  # a version that existed
                assert accepted != "*" and found not in accepted, (method, accepted, found)


async def test_notes_are_compressed_techempower_routes_never(client):
    import gzip
    import json

    for _ in range(20):
        await create(client, body="some words " * 5)
    gzip_please = {"Accept-Encoding": "gzip, br;q=0"}
    async with client.get("/notes?limit=20", headers=gzip_please, auto_decompress=False) as response:
        assert response.status == 200
        assert response.headers["Content-Encoding"] == "gzip" and response.headers["Vary"] == "Accept-Encoding"
        body = await response.read()
        assert int(response.headers["Content-Length"]) == len(body)
        assert len(json.loads(gzip.decompress(body))["items"]) == 20
    for path in ("/json", "/plaintext", "/db", "/queries?queries=20", "/fortunes", "/updates?queries=20"):
        async with client.get(path, headers=gzip_please, auto_decompress=False) as response:
            assert response.status == 200, path
            assert "Content-Encoding" not in response.headers and "Vary" not in response.headers, path
            assert len(await response.read()) > 0
    upload = gzip.compress(json.dumps({"title": unique()}).encode())
    headers = {"Content-Encoding": "gzip", "Content-Type": "application/json"}
    async with client.post("/notes", data=upload, headers=headers) as response:
        assert response.status == 201, await response.text()


async def test_the_index_names_the_api_and_links_its_docs_and_routes(aiorest_client, shared_database_url, caplog):
    caplog.set_level("INFO", logger="example_app")
    client = await aiorest_client(create_app(Database(shared_database_url, min_size=1, max_size=2)))
    # what a newcomer is told at startup: the migrations ran, the data is there
    (ready,) = [record.getMessage() for record in caplog.records if record.name == "example_app"]
    assert ready.startswith("database ready: ") and "seeded with 10000 World rows and 12 fortunes" in ready
    async with client.get("/") as response:
        assert response.status == 200 and response.content_type == "text/html"
        page = await response.text()
    assert "<title>aiorest example: notes 1.0</title>" in page
    for link in ("/docs", "/redoc", "/openapi.json", "/notes", "/db", "/fortunes"):
        assert f'<a href="{link}">' in page, link
    assert "<td>GET</td><td>/notes/{note_id}</td>" in page and "<td>POST</td><td>/login</td>" in page
    # each route's summary: its first sentence whole, code as code, no reStructuredText left
    assert "past 10 registrations a minute from the client's address.</td>" in page
    assert "its URL in <code>Location</code>, its version in <code>ETag</code>.</td>" in page
    assert "`" not in page


async def test_a_write_retried_with_its_idempotency_key_applies_once(client):
    title, key = unique("idem"), {"Idempotency-Key": str(uuid.uuid4())}
    async with client.post("/notes", json={"title": title}, headers=key) as first:
        assert first.status == 201 and "Idempotent-Replayed" not in first.headers
        note = await first.json()
    async with client.post("/notes", json={"title": title}, headers=key) as again:
        assert again.status == 201 and again.headers["Idempotent-Replayed"] == "true"
        assert await again.json() == note and again.headers["Location"] == first.headers["Location"]
    async with client.post("/notes", json={"title": title + "!"}, headers=key) as other_body:
        assert other_body.status == 422
    async with client.get(f"/notes?q={title}") as response:
        assert [item["id"] for item in (await response.json())["items"]] == [note["id"]]
    patch_key = {"Idempotency-Key": str(uuid.uuid4()), "If-Match": '"1"'}
    for replayed in (None, "true"):  # the repeat is not a stale write (412): it is the first's answer
        async with client.patch(f"/notes/{note['id']}", json={"done": True}, headers=patch_key) as response:
            assert response.status == 200 and response.headers.get("Idempotent-Replayed") == replayed
            assert (await response.json())["version"] == 2 and response.headers["ETag"] == '"2"'
    async with client.get(f"/notes/{note['id']}") as response:
        assert (await response.json())["version"] == 2


async def test_a_keyed_compressed_write_replays_compressed_for_the_replaying_request(client):
    title, key = unique("gz"), {"Idempotency-Key": str(uuid.uuid4())}
    body = {"title": title, "body": "x" * 2048}
    answers = []
    for accept in ("gzip", "gzip", "identity", None):  # None: aiohttp's own default, gzip among others
        headers = {**key, **({"Accept-Encoding": accept} if accept else {})}
        async with client.post("/notes", json=body, headers=headers, auto_decompress=False) as response:
            assert response.status == 201
            raw = await response.read()
            if accept == "identity":
                assert "Content-Encoding" not in response.headers
            else:
                assert response.headers["Content-Encoding"] in ("gzip", "br", "deflate")
                raw = decompressed(raw, response.headers["Content-Encoding"])
            answers.append((json.loads(raw), response.headers.get("Idempotent-Replayed")))
    assert [replayed for _, replayed in answers] == [None, "true", "true", "true"]
    assert all(note == answers[0][0] for note, _ in answers) and answers[0][0]["body"] == "x" * 2048


def decompressed(raw: bytes, coding: str) -> bytes:
    if coding == "br":
        import brotli

        return bytes(brotli.decompress(raw))
    return zlib.decompress(raw, 16 + zlib.MAX_WBITS if coding == "gzip" else zlib.MAX_WBITS)


async def test_a_keyed_write_under_another_precondition_is_not_the_first(client):
    note = await create(client)
    key = {"Idempotency-Key": str(uuid.uuid4())}
    async with client.patch(f"/notes/{note['id']}", json={"done": True}, headers={**key, "If-Match": '"1"'}) as first:
        assert first.status == 200
    async with client.patch(f"/notes/0{note['id']}", json={"done": True}, headers={**key, "If-Match": '"1"'}) as same:
        assert same.status == 200 and same.headers["Idempotent-Replayed"] == "true"  # the one note
    async with client.patch(f"/notes/{note['id']}", json={"done": True}, headers={**key, "If-Match": '"2"'}) as other:
        assert other.status == 422  # not the 200 given to If-Match "1"


async def test_readyz_names_every_store_and_is_503_while_redis_is_down(shared_database_url, monkeypatch):
    # issue 34: with Redis down every login and cookie request answered 503, yet /readyz stayed 200
    from aiorest import Server
    from harness.fixtures import RedisServer
    from tests.ops.test_readiness import readyz_once_it_is

    with RedisServer() as redis:
        monkeypatch.setenv("SESSION_STORE", redis.url)
        monkeypatch.setenv("RATE_LIMIT_STORE", redis.url)
        server = Server(create_app(Database(shared_database_url, min_size=1, max_size=4)), port=0, health=True)
        await server.start()
        try:
            async with aiohttp.ClientSession(server.url) as session:
                status, _, body = await readyz_once_it_is(session, 200)
                stores = ["limit store", "idempotency store", "session store"]
                checks = dict.fromkeys(["database", *stores], "ok")
                assert (status, body) == (200, {"status": "ready", "checks": checks})
                redis.stop()
                credentials = {"username": "nobody-here", "password": "correct horse battery"}
                async with session.post("/login", json=credentials) as response:
                    assert response.status == 503
                status, _, body = await readyz_once_it_is(session, 503)
                assert body["error"]["message"] == "not ready: the limit store and the session store are unreachable"
                assert body["error"]["details"] == {
                    "database": "ok",
                    "limit store": "unreachable",
                    "idempotency store": "ok",
                    "session store": "unreachable",
                }
        finally:
            await server.stop(timeout=2)

"""Idempotency keys (aiorest/middleware/idempotency): replay, 409 in flight, 422 on another body, expiry,
the size bound, key validation, concurrent duplicates, in memory, Redis and PostgreSQL; and a process
killed mid-request, before and after its commit, with the PostgreSQL store."""

from __future__ import annotations

import asyncio
import contextvars
import io
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import pytest

from aiorest import App, HTTPServiceUnavailable, Request, Response
from aiorest.db import Database, migrate
from aiorest.middleware.idempotency import (
    Idempotency,
    IdempotencyStore,
    MemoryIdempotencyStore,
    PostgresIdempotencyStore,
    RedisIdempotencyStore,
    Stored,
    idempotency_exempt,
)
from harness.fixtures import RedisServer
from harness.processes import AiorestProcess


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


@pytest.fixture
async def pg_database(database_url: str) -> AsyncIterator[Database]:
    database = Database(database_url, min_size=1, max_size=4)
    await database.open()
    try:
        await migrate(database, "aiorest:idempotency")
        await database.execute("CREATE TABLE IF NOT EXISTS idem_crash (id bigserial PRIMARY KEY, title text)")
        yield database
    finally:
        await database.close()


@pytest.fixture
async def redis_store(redis_server: RedisServer) -> AsyncIterator[RedisIdempotencyStore]:
    store = RedisIdempotencyStore(redis_server.url, prefix=f"test:{uuid.uuid4().hex}:")
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture
def pg_store(pg_database: Database) -> PostgresIdempotencyStore:
    return PostgresIdempotencyStore(pg_database)


@pytest.fixture(params=["memory", "redis", "postgres"])
def store(request: pytest.FixtureRequest) -> IdempotencyStore:
    if request.param == "memory":
        return MemoryIdempotencyStore()
    chosen: IdempotencyStore = request.getfixturevalue(f"{'redis' if request.param == 'redis' else 'pg'}_store")
    return chosen


class Notes:
    """An app whose POST /notes counts its runs; ``gate`` holds a run until set."""

    def __init__(self, store: IdempotencyStore, **options: Any) -> None:
        self.runs = 0
        self.gate = asyncio.Event()
        self.gate.set()
        self.app = App()
        self.app.add_middleware(Idempotency(store, scope=lambda request: request.headers.get("x-user", ""), **options))

        @self.app.post("/notes")
        async def create(request: Request) -> Response:
            body = await request.json()
            self.runs += 1
            await self.gate.wait()
            if body.get("fail"):
                return Response(b"boom", 503)
            response = Response(
                b'{"n": %d, "pad": "%s"}' % (self.runs, b"x" * body.get("pad", 0)), 201, media_type="application/json"
            )
            response.headers["Location"] = f"/notes/{self.runs}"
            response.headers["X-Not-Kept"] = "1"
            return response


def key() -> dict[str, str]:
    return {"Idempotency-Key": str(uuid.uuid4())}


async def test_a_repeat_gets_the_stored_answer_marked_replayed(aiorest_client: Any, store: IdempotencyStore) -> None:
    notes = Notes(store)
    client = await aiorest_client(notes.app)
    headers = key()
    async with client.post("/notes", json={"title": "a"}, headers=headers) as first:
        assert first.status == 201 and "Idempotent-Replayed" not in first.headers
        first_body = await first.read()
    async with client.post("/notes", json={"title": "a"}, headers=headers) as again:
        assert again.status == 201 and again.headers["Idempotent-Replayed"] == "true"
        assert await again.read() == first_body
        assert again.headers["Location"] == "/notes/1" and again.headers["Content-Type"] == "application/json"
        assert "X-Not-Kept" not in again.headers
    assert notes.runs == 1
    # another user's same key, another path's, or no key: other requests
    async with client.post("/notes", json={"title": "a"}, headers={**headers, "X-User": "bob"}) as other:
        assert other.status == 201 and "Idempotent-Replayed" not in other.headers
    async with client.post("/notes", json={"title": "a"}) as plain:
        assert plain.status == 201
    assert notes.runs == 3


async def test_a_repeat_in_flight_gets_409_and_another_body_422(aiorest_client: Any, store: IdempotencyStore) -> None:
    notes = Notes(store)
    client = await aiorest_client(notes.app)
    headers = key()
    notes.gate.clear()
    first = asyncio.ensure_future(client.post("/notes", json={"title": "a"}, headers=headers))
    while notes.runs == 0:
        await asyncio.sleep(0.01)
    async with client.post("/notes", json={"title": "a"}, headers=headers) as in_flight:
        assert in_flight.status == 409, await in_flight.text()
        assert "still being processed" in (await in_flight.json())["error"]["message"]
    notes.gate.set()
    async with await first as response:
        assert response.status == 201
    async with client.post("/notes", json={"title": "b"}, headers=headers) as other_body:
        assert other_body.status == 422 and "another request" in await other_body.text()
    assert notes.runs == 1


async def test_concurrent_duplicates_run_the_handler_once(aiorest_client: Any, store: IdempotencyStore) -> None:
    notes = Notes(store)
    client = await aiorest_client(notes.app)
    headers = key()

    async def post() -> tuple[int, str]:
        async with client.post("/notes", json={"title": "a"}, headers=headers) as response:
            return response.status, response.headers.get("Idempotent-Replayed", "")

    answers = await asyncio.gather(*(post() for _ in range(20)))
    assert notes.runs == 1
    assert [status for status, replayed in answers if status == 201 and not replayed] == [201]
    assert {status for status, _ in answers} <= {201, 409}


async def test_keys_expire_and_failures_are_not_kept(aiorest_client: Any, store: IdempotencyStore) -> None:
    notes = Notes(store, ttl=0.5)
    client = await aiorest_client(notes.app)
    headers = key()
    for expected_runs in (1, 1):
        async with client.post("/notes", json={"title": "a"}, headers=headers) as response:
            assert response.status == 201
        assert notes.runs == expected_runs
    await asyncio.sleep(0.7)
    async with client.post("/notes", json={"title": "a"}, headers=headers) as response:
        assert response.status == 201 and "Idempotent-Replayed" not in response.headers
    assert notes.runs == 2
    failing = key()
    for expected_runs in (3, 4):  # a 5xx is not kept: the retry runs again
        async with client.post("/notes", json={"fail": True}, headers=failing) as response:
            assert response.status == 503
        assert notes.runs == expected_runs


async def test_a_body_over_the_bound_is_not_kept(aiorest_client: Any, store: IdempotencyStore) -> None:
    notes = Notes(store, max_body=100)
    client = await aiorest_client(notes.app)
    headers = key()
    async with client.post("/notes", json={"pad": 200}, headers=headers) as response:
        assert response.status == 201 and len(await response.read()) > 200
    async with client.post("/notes", json={"pad": 200}, headers=headers) as again:
        assert again.status == 201 and await again.read() == b"" and again.headers["Location"] == "/notes/1"
        assert again.headers["Idempotent-Replayed"] == "true" and "application/json" not in again.headers.get(
            "Content-Type", ""
        )
    assert notes.runs == 1


@pytest.mark.parametrize("value", ["", "x" * 256, 'a"b', "a\\b", "caf\u00e9", '"unclosed', "tab\there"])
async def test_a_malformed_key_gets_400(aiorest_client: Any, value: str) -> None:
    notes = Notes(MemoryIdempotencyStore())
    client = await aiorest_client(notes.app)
    raw = [("Idempotency-Key", value)]
    async with client.post("/notes", json={}, headers=raw) as response:
        assert response.status == 400, value
        assert "Idempotency-Key is 1 to 255" in (await response.json())["error"]["message"]
    assert notes.runs == 0


async def test_quoted_and_bare_keys_are_one_key_and_two_keys_are_refused(aiorest_client: Any) -> None:
    notes = Notes(MemoryIdempotencyStore())
    client = await aiorest_client(notes.app)
    async with client.post("/notes", json={}, headers={"Idempotency-Key": '"k-1"'}) as response:
        assert response.status == 201
    async with client.post("/notes", json={}, headers={"Idempotency-Key": "k-1"}) as response:
        assert response.headers["Idempotent-Replayed"] == "true"
    two = [("Idempotency-Key", "a"), ("Idempotency-Key", "b")]
    async with client.post("/notes", json={}, headers=two) as response:
        assert response.status == 400
    assert notes.runs == 1


async def test_a_full_memory_store_answers_503() -> None:
    store = MemoryIdempotencyStore(max_entries=1)
    await store.begin("a", "f", 30)
    with pytest.raises(Exception) as refused:
        await store.begin("b", "f", 30)
    assert getattr(refused.value, "status", None) == 503


async def test_a_lease_that_ran_out_frees_the_key(store: IdempotencyStore) -> None:
    if store.transactional:
        pytest.skip("PostgreSQL leaves nothing in flight: its claim is a transaction")
    first = await store.begin("k", "f", 0.2)
    assert first.outcome == "started"
    assert (await store.begin("k", "f", 0.2)).outcome == "in_flight"
    await asyncio.sleep(0.3)
    second = await store.begin("k", "f", 30)
    assert second.outcome == "started"
    await store.finish("k", first, None, 60)  # the first, finishing late, no longer holds it
    assert (await store.begin("k", "f", 30)).outcome == "in_flight"


# -- a process killed mid-request: the transaction is the claim -----------------------------------


@pytest.mark.parametrize("when", ["before-commit", "after-commit"])
async def test_a_retry_after_a_crash_applies_the_write_once(
    database_url: str, pg_database: Database, when: str
) -> None:
    title = f"crash-{uuid.uuid4().hex}"
    headers = {**key(), "Content-Type": "application/json"}
    env_server = {"DATABASE_URL": database_url}
    body = f'{{"title": "{title}"}}'
    with AiorestProcess("tests.apps.idem_app:app", env={**os.environ, **env_server}, ready_path="/ready") as dying:
        async with aiohttp.ClientSession() as http:
            with pytest.raises(aiohttp.ClientError):
                async with http.post(f"{dying.url}/notes", data=body, headers={**headers, "X-Die": when}):
                    pass
        dying.process.wait(timeout=10)  # type: ignore[union-attr]
        dead_pid = dying.process.pid  # type: ignore[union-attr]
    with AiorestProcess("tests.apps.idem_app:app", env={**os.environ, **env_server}, ready_path="/ready") as server:
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{server.url}/notes", data=body, headers=headers) as retry:
                assert retry.status == 200 or retry.status == 201, await retry.text()
                answer = await retry.json()
                replayed = retry.headers.get("Idempotent-Replayed")
    rows = await pg_database.fetchall("SELECT id FROM idem_crash WHERE title = %s", (title,))
    assert [row["id"] for row in rows] == [answer["id"]]  # exactly once
    if when == "after-commit":  # the dead process's answer, kept with its write
        assert replayed == "true" and answer["pid"] == dead_pid
    else:  # nothing committed: the retry ran it
        assert replayed is None and answer["pid"] != dead_pid


async def test_a_silent_transaction_is_ended_and_its_key_freed(pg_database: Database) -> None:
    store = PostgresIdempotencyStore(pg_database, idle_timeout=0.3)
    key = uuid.uuid4().hex

    def as_request(context: contextvars.Context, step: Any) -> Any:  # each request its task, its transaction
        return asyncio.create_task(step, context=context)

    first, second, third = contextvars.Context(), contextvars.Context(), contextvars.Context()
    silent = await as_request(first, store.begin(key, "f", 30))  # its client is cut off: it sends nothing more
    assert silent.outcome == "started"
    assert (await as_request(second, store.begin(key, "f", 30))).outcome == "in_flight"
    await asyncio.sleep(0.8)
    taken = await as_request(second, store.begin(key, "f", 30))  # PostgreSQL ended the silent one
    assert taken.outcome == "started"
    await as_request(second, store.finish(key, taken, Stored("f", 201, (), b"{}"), 60))
    with pytest.raises(HTTPServiceUnavailable):  # the silent one, back: its transaction is gone
        await as_request(first, store.finish(key, silent, Stored("f", 201, (), b"late"), 60))
    again = await as_request(third, store.begin(key, "f", 30))
    assert again.outcome == "done" and again.stored is not None and again.stored.body == b"{}"


# -- what is a request, what is kept, which routes are keyed ----------------------------------------


def keyed_app(store: IdempotencyStore, runs: list[str]) -> App:
    app = App(middleware=[Idempotency(store)])

    @app.patch("/notes/{note_id:int}")
    async def patch(request: Request, note_id: int) -> dict[str, Any]:
        runs.append(f"patch {note_id} {request.headers.get('if-match')}")
        return {"id": note_id, "run": len(runs)}

    @app.post("/login")
    async def login(request: Request) -> Response:
        runs.append("login")
        response = Response(b'{"ok": true}', media_type="application/json")
        response.set_cookie("session", f"secret-{len(runs)}")
        return response

    @app.post("/tokens", status=201)
    async def token(request: Request) -> Response:
        runs.append("token")
        return Response(b'{"token": "t-%d"}' % len(runs), 201, headers={"Cache-Control": "no-store"})

    @app.post("/exempt")
    @idempotency_exempt
    async def exempt(request: Request) -> dict[str, int]:
        runs.append("exempt")
        return {"run": len(runs)}

    return app


async def test_the_fingerprint_is_the_resolved_route_the_body_and_the_preconditions(
    aiorest_client: Any, store: IdempotencyStore
) -> None:
    runs: list[str] = []
    client = await aiorest_client(keyed_app(store, runs))
    headers = {**key(), "If-Match": '"1"'}
    async with client.patch("/notes/7", json={"done": True}, headers=headers) as first:
        assert first.status == 200 and await first.json() == {"id": 7, "run": 1}
    async with client.patch("/notes/07", json={"done": True}, headers=headers) as same:  # the one note 7
        assert same.headers.get("Idempotent-Replayed") == "true" and await same.json() == {"id": 7, "run": 1}
    for path, changed in (("/notes/7", {"If-Match": '"2"'}), ("/notes/8", {}), ("/notes/7?x=1", {})):
        async with client.patch(path, json={"done": True}, headers={**headers, **changed}) as other:
            assert other.status == 422, (path, changed)  # another request under the key: never the first's answer
            assert "another request" in (await other.json())["error"]["message"]
    assert runs == ['patch 7 "1"']


async def test_answers_with_credentials_are_never_kept_and_exempt_routes_never_keyed(
    aiorest_client: Any, store: IdempotencyStore
) -> None:
    runs: list[str] = []
    client = await aiorest_client(keyed_app(store, runs))
    for path in ("/login", "/tokens", "/exempt"):
        headers = key()
        answers = []
        for _ in range(2):  # the retry runs again: nothing was kept to replay
            async with client.post(path, json={}, headers=headers) as response:
                assert response.status < 300 and "Idempotent-Replayed" not in response.headers, path
                answers.append((await response.read(), response.headers.get("Set-Cookie")))
        assert answers[0] != answers[1], path
    assert runs == ["login", "login", "token", "token", "exempt", "exempt"]
    if isinstance(store, PostgresIdempotencyStore):
        rows = await store.database.fetchval(
            "SELECT count(*) FROM aiorest_idempotency WHERE convert_from(body, 'UTF8') LIKE '%%token%%'"
            " OR headers::text ILIKE '%%secret-%%'"
        )
        assert rows == 0


async def test_a_credential_answer_commits_its_writes(pg_database: Database, aiorest_client: Any) -> None:
    app = App(middleware=[Idempotency(PostgresIdempotencyStore(pg_database))])
    title = f"cookie-{uuid.uuid4().hex}"

    @app.post("/login")
    async def login(request: Request) -> Response:
        await pg_database.execute("INSERT INTO idem_crash (title) VALUES (%s)", (title,))
        response = Response(b"{}", media_type="application/json")
        response.set_cookie("session", "secret")
        return response

    client = await aiorest_client(app)
    async with client.post("/login", json={}, headers=key()) as response:
        assert response.status == 200
    assert await pg_database.fetchval("SELECT count(*) FROM idem_crash WHERE title = %s", (title,)) == 1


async def test_expired_keys_are_swept_as_fast_as_keys_are_kept(pg_database: Database) -> None:
    store = PostgresIdempotencyStore(pg_database)  # its periodic sweep is not due for a minute
    await pg_database.execute("DELETE FROM aiorest_idempotency WHERE expires_at <= now()")
    await pg_database.execute(
        "INSERT INTO aiorest_idempotency (key, fingerprint, status, headers, body, expires_at)"
        " SELECT 'old-' || i || %s, 'f', 201, '[]', '', now() - interval '1 second' FROM generate_series(1, 40) i",
        (uuid.uuid4().hex,),
    )
    for _ in range(20):  # each in its own task, as requests are: each its own transaction
        name = uuid.uuid4().hex

        async def keep(name: str = name) -> None:
            claim = await store.begin(name, "f", 30)
            await store.finish(name, claim, Stored("f", 201, (), b"{}"), 3600)

        await asyncio.create_task(keep())
    expired = await pg_database.fetchval("SELECT count(*) FROM aiorest_idempotency WHERE expires_at <= now()")
    assert expired == 0


def _multipart(boundary: str, data: bytes, filename: str = "a.bin", title: str = "t") -> tuple[bytes, dict[str, str]]:
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="title"\r\n\r\n{title}\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        + data
        + f"\r\n--{boundary}--\r\n".encode()
    )
    return body, {"Content-Type": f"multipart/form-data; boundary={boundary}"}


async def test_a_form_is_fingerprinted_by_its_contents_not_its_boundary(aiorest_client: Any) -> None:
    # Each client encodes a retried form with a fresh random boundary: the same file in other
    # bytes. The fingerprint reads the form (its files from disk, a chunk at a time), never
    # the raw body, which for an upload past the server's own limit would be read whole.
    app = App()
    app.add_middleware(Idempotency(MemoryIdempotencyStore(), scope=lambda request: ""))
    runs: list[int] = []

    @app.post("/files", status=201, max_body_size=8 << 20)
    async def upload(request: Request) -> dict[str, Any]:
        form = await request.form()
        file = form["file"]
        runs.append(file.size)
        return {"size": file.size, "head": (await file.read(4)).hex()}

    client = await aiorest_client(app)
    data = os.urandom(3 << 20)
    headers = key()
    for boundary in ("first-boundary", "another-one"):
        body, content_type = _multipart(boundary, data)
        async with client.post("/files", data=io.BytesIO(body), headers={**headers, **content_type}) as response:
            assert response.status == 201, await response.text()
            assert await response.json() == {"size": len(data), "head": data[:4].hex()}
    assert runs == [len(data)]
    assert response.headers["Idempotent-Replayed"] == "true"
    for body, content_type in (
        _multipart("b", data[:-1] + b"!"),
        _multipart("b", data, filename="b.bin"),
        _multipart("b", data, title="u"),
    ):
        async with client.post("/files", data=io.BytesIO(body), headers={**headers, **content_type}) as response:
            assert response.status == 422, await response.text()
    assert runs == [len(data)]

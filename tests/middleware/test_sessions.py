"""Sessions (aiorest/middleware/sessions/): served for real, cookies read off the wire."""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import pytest

from aiorest import (
    App,
    CookieSessionStore,
    HTTPConflict,
    PostgresSessionStore,
    RedisSessionStore,
    Request,
    Router,
    SessionMiddleware,
)
from aiorest.db import Database, MigrationError, load_migrations, migrate
from aiorest.middleware.sessions import COOKIE_LIMIT, Session, SessionStore, stored_id
from aiorest.server import Server
from harness.fixtures import RedisServer
from harness.fixtures import redis_answers as answers

OLD = "o" * 32
NEW = "n" * 32


def make_app(store: Any, barrier: asyncio.Barrier | None = None, **options: Any) -> App:
    """An app whose routes under /s use sessions; /plain has no session middleware."""
    app = App()
    group = Router(middleware=[SessionMiddleware(store, **options)])

    @group.get("/get")
    async def get_all(request: Request) -> Any:
        return {"data": dict(request.session), "id": request.session.id}

    @group.post("/set")
    async def set_keys(request: Request) -> Any:
        request.session.update(await request.json())
        return {"id": request.session.id}

    @group.post("/together")
    async def together(request: Request) -> Any:
        request.session.update(await request.json())
        assert barrier is not None
        await barrier.wait()  # both requests have loaded the session before either saves
        return {}

    @group.post("/del/{key}")
    async def del_key(request: Request) -> Any:
        del request.session[request.path_params["key"]]
        return {}

    @group.get("/untouched")
    async def untouched(request: Request) -> Any:
        return {}

    @group.post("/rotate")
    async def rotate(request: Request) -> Any:
        request.session.rotate()
        return {"id": request.session.id}

    @group.post("/invalidate")
    async def invalidate(request: Request) -> Any:
        request.session.invalidate()
        return {}

    @group.post("/error")
    async def error(request: Request) -> Any:
        request.session["lost"] = True
        raise HTTPConflict("no")

    @app.get("/plain")
    async def plain(request: Request) -> Any:
        return {"session": request.session}

    app.include(group, "/s")
    return app


def set_cookies(response: Any) -> list[str]:
    return response.headers.getall("Set-Cookie", [])


async def client_for(aiorest_client: Any, store: Any, **options: Any) -> Any:
    return await aiorest_client(make_app(store, **options))  # its jar keeps 127.0.0.1's cookies


def forge(payload: dict[str, Any], signature: str = "AAAA") -> str:
    body = base64.urlsafe_b64encode(json.dumps(payload).encode()).rstrip(b"=").decode()
    return f"{body}.{signature}"


# -- the cookie store ---------------------------------------------------------------


async def test_set_then_read_across_requests(aiorest_client: Any) -> None:
    client = await client_for(aiorest_client, CookieSessionStore([NEW]))
    async with client.post("/s/set", json={"user": "ann", "n": [1, 2]}) as response:
        assert response.status == 200
        (cookie,) = set_cookies(response)
        assert cookie.startswith("session=")
        for attribute in ("HttpOnly", "SameSite=Lax", "Path=/", f"Max-Age={14 * 24 * 3600}"):
            assert attribute in cookie.split("; ")
        assert "Secure" not in cookie.split("; ")  # plain http
    async with client.get("/s/get") as response:
        assert (await response.json())["data"] == {"user": "ann", "n": [1, 2]}
        assert set_cookies(response) == []  # read, not changed: nothing written


async def test_untouched_and_unchanged_sessions_send_no_cookie(aiorest_client: Any) -> None:
    client = await client_for(aiorest_client, CookieSessionStore([NEW]))
    async with client.get("/s/untouched") as response:
        assert response.status == 200 and set_cookies(response) == []
    async with client.get("/s/get") as response:  # read while empty: nothing to write
        assert (await response.json())["data"] == {} and set_cookies(response) == []


def test_session_without_middleware_names_the_fix() -> None:
    request = Request("GET", "/", b"/", "", "1.1", [], App())
    with pytest.raises(RuntimeError, match="SessionMiddleware"):
        _ = request.session


async def test_tampered_malformed_and_oversized_cookies_give_an_empty_session(aiorest_client: Any) -> None:
    store = CookieSessionStore([NEW])
    client = await client_for(aiorest_client, store)
    good = await store.save(Session({"role": "user"}), 60)
    payload, _, signature = good.rpartition(".")
    decoded = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    decoded["d"]["role"] = "admin"
    for value in [
        forge(decoded, signature),  # data changed, signature kept
        good[:-2] + ("AA" if not good.endswith("AA") else "BB"),  # signature changed
        "no-dot-at-all",
        "!!!.???",
        forge({"t": "x", "i": 1, "d": []}, signature),
        "a." + "b" * COOKIE_LIMIT,
    ]:
        async with client.get("/s/get", cookies={"session": value}) as response:
            assert response.status == 200, value
            assert (await response.json())["data"] == {}, value
    async with client.get("/s/get", cookies={"session": good}) as response:
        assert (await response.json())["data"] == {"role": "user"}


async def test_expired_cookie_gives_an_empty_session(aiorest_client: Any) -> None:
    store = CookieSessionStore([NEW])
    client = await client_for(aiorest_client, store, max_age=60)
    old = Session({"user": "ann"})
    value = await store.save(old, 60)
    assert store.load_now(value, 60) is not None
    # Re-sign a payload issued 61 seconds ago, as a client cannot (it needs the secret).
    payload = {"t": int(time.time()) - 61, "i": old.id, "d": {"user": "ann"}}
    body = base64.urlsafe_b64encode(json.dumps(payload).encode()).rstrip(b"=").decode()
    signature = base64.urlsafe_b64encode(store._sign(store._keys[0], body)).rstrip(b"=").decode()
    async with client.get("/s/get", cookies={"session": f"{body}.{signature}"}) as response:
        assert (await response.json())["data"] == {}


async def test_a_cookie_verified_once_still_expires_and_loads_a_fresh_copy_each_time() -> None:
    store = CookieSessionStore([NEW])
    value = await store.save(Session({"roles": ["user"]}), 60)
    first = store.load_now(value, 60)  # verified, and remembered as verified
    assert first is not None
    first["roles"].append("admin")  # changed in place: not saved, and not seen by the next request
    again = store.load_now(value, 60)
    assert again is not None and again["roles"] == ["user"] and again.id == first.id
    assert store.load_now(value[:-2] + ("AA" if not value.endswith("AA") else "BB"), 60) is None
    # Issued 30 seconds ago (re-signed, as a client cannot): loaded within 60 s, then past 20 s, from the cache.
    body = base64.urlsafe_b64encode(json.dumps({"t": int(time.time()) - 30, "i": first.id, "d": {}}).encode())
    payload = body.rstrip(b"=").decode()
    signature = base64.urlsafe_b64encode(store._sign(store._keys[0], payload)).rstrip(b"=").decode()
    assert store.load_now(f"{payload}.{signature}", 60) is not None
    assert store.load_now(f"{payload}.{signature}", 20) is None  # the expiry is checked on every load


async def test_a_session_nested_deeper_than_lists_is_a_fresh_copy_on_every_load_too() -> None:
    store = CookieSessionStore([NEW])
    value = await store.save(Session({"cart": {"items": [{"sku": "a"}]}, "tags": ["x"], "n": 1}), 60)
    for _ in range(3):
        loaded = store.load_now(value, 60)
        assert loaded is not None
        assert dict(loaded) == {"cart": {"items": [{"sku": "a"}]}, "tags": ["x"], "n": 1}
        loaded["cart"]["items"].append({"sku": "b"})  # in place: never saved, never seen again
        loaded["tags"].append("y")


async def test_the_verified_cookies_kept_are_bounded() -> None:
    store = CookieSessionStore([NEW])
    values = [await store.save(Session({"n": n}), 60) for n in range(600)]
    for n, value in enumerate(values):
        loaded = store.load_now(value, 60)
        assert loaded is not None and loaded["n"] == n
    assert len(store._verified) == 512
    assert store.load_now(values[0], 60)["n"] == 0  # gone from the cache: verified again


async def test_key_rotation(aiorest_client: Any) -> None:
    signed_by_old = await CookieSessionStore([OLD]).save(Session({"k": 1}), 60)
    rotated = CookieSessionStore([NEW, OLD])
    assert rotated.load_now(signed_by_old, 60) is not None  # the old secret still verifies
    assert CookieSessionStore([NEW]).load_now(signed_by_old, 60) is None  # once dropped, it does not
    signed_now = await rotated.save(Session({"k": 1}), 60)
    assert CookieSessionStore([NEW]).load_now(signed_now, 60) is not None  # the new one signs
    assert CookieSessionStore([OLD]).load_now(signed_now, 60) is None


def test_secrets_are_checked() -> None:
    for bad in (["short"], [], "x" * 40, [NEW, b"tiny"]):
        with pytest.raises(ValueError):
            CookieSessionStore(bad)  # type: ignore[arg-type]


async def test_oversized_session_is_a_clear_error(aiorest_client: Any, caplog: pytest.LogCaptureFixture) -> None:
    client = await client_for(aiorest_client, CookieSessionStore([NEW]))
    async with client.post("/s/set", json={"big": "x" * 4000}) as response:
        assert response.status == 500 and set_cookies(response) == []
    assert "over the 4096 browsers keep" in caplog.text


def test_values_must_be_json() -> None:
    session = Session()
    with pytest.raises(TypeError, match="JSON value"):
        session["when"] = object()
    with pytest.raises(TypeError, match="JSON value"):
        session["ratio"] = float("nan")
    with pytest.raises(TypeError, match="strings"):
        session[1] = 2  # type: ignore[index]
    assert not session.modified


async def test_rotate_changes_the_id_and_keeps_the_data(aiorest_client: Any) -> None:
    client = await client_for(aiorest_client, CookieSessionStore([NEW]))
    async with client.post("/s/set", json={"user": "ann"}) as response:
        first = (await response.json())["id"]
    async with client.post("/s/rotate") as response:
        second = (await response.json())["id"]
        assert len(set_cookies(response)) == 1
    async with client.get("/s/get") as response:
        body = await response.json()
    assert first != second == body["id"] and body["data"] == {"user": "ann"}


async def test_invalidate_expires_the_cookie(aiorest_client: Any) -> None:
    client = await client_for(aiorest_client, CookieSessionStore([NEW]))
    await (await client.post("/s/set", json={"user": "ann"})).release()
    async with client.post("/s/invalidate") as response:
        (cookie,) = set_cookies(response)
        assert cookie.startswith("session=;") and "Max-Age=0" in cookie
    async with client.get("/s/get") as response:
        assert (await response.json())["data"] == {}
    await (await client.post("/s/set", json={"a": 1, "b": 2})).release()
    async with client.post("/s/del/a") as response:
        assert len(set_cookies(response)) == 1
    async with client.get("/s/get") as response:
        assert (await response.json())["data"] == {"b": 2}


async def test_a_raised_error_saves_nothing(aiorest_client: Any) -> None:
    client = await client_for(aiorest_client, CookieSessionStore([NEW]))
    async with client.post("/s/error") as response:
        assert response.status == 409 and set_cookies(response) == []


async def test_route_without_middleware_fails_clearly(aiorest_client: Any, caplog: pytest.LogCaptureFixture) -> None:
    client = await client_for(aiorest_client, CookieSessionStore([NEW]))
    async with client.get("/plain") as response:
        assert response.status == 500
    assert "needs SessionMiddleware" in caplog.text


async def test_secure_only_over_https_from_a_trusted_proxy() -> None:
    server = Server(make_app(CookieSessionStore([NEW])), host="127.0.0.1", port=0, forwarded_allow_ips="127.0.0.1")
    await server.start()
    try:
        async with aiohttp.ClientSession(base_url=server.url) as client:
            for proto, secure in (("https", True), ("http", False)):
                headers = {"X-Forwarded-Proto": proto}
                async with client.post("/s/set", json={"a": 1}, headers=headers) as response:
                    assert ("Secure" in set_cookies(response)[0].split("; ")) is secure
    finally:
        await server.stop(timeout=5.0)


async def test_middleware_options_are_checked() -> None:
    with pytest.raises(ValueError):
        SessionMiddleware(CookieSessionStore([NEW]), max_age=0)
    with pytest.raises(ValueError):
        SessionMiddleware(CookieSessionStore([NEW]), cookie_name="bad name")


# -- the Redis store --------------------------------------------------------------


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    """The Redis on 127.0.0.1:6379, or a throwaway redis-server on a free port."""
    if answers(6379):
        yield "redis://127.0.0.1:6379/0"
        return
    with RedisServer() as server:
        yield server.url


@pytest.fixture
async def redis_store(redis_url: str) -> AsyncIterator[RedisSessionStore]:
    """A store under a prefix of its own; its keys are removed afterwards."""
    store = RedisSessionStore(redis_url, prefix=f"test:{uuid.uuid4().hex}:")
    try:
        yield store
    finally:
        keys = [key async for key in store.redis.scan_iter(match=store.prefix + "*")]
        if keys:
            await store.redis.delete(*keys)
        await store.close()


def cookie_of(client: Any) -> str:
    return next(cookie.value for cookie in client.session.cookie_jar if cookie.key == "session")


async def test_a_silent_redis_is_a_503_after_the_timeout_never_a_hang(aiorest_client: Any) -> None:
    silent = socket.socket()  # accepts connections (the backlog does) and never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    store = RedisSessionStore(f"redis://127.0.0.1:{silent.getsockname()[1]}/0", timeout=0.3)
    try:
        client = await client_for(aiorest_client, store)
        started = time.monotonic()
        async with client.get("/s/get", cookies={"session": "A" * 43}) as response:
            assert response.status == 503 and response.headers["Retry-After"] == "1"
            assert (await response.json())["error"]["message"] == "the session store is unavailable"
        assert time.monotonic() - started < 10  # a breakage guard, generous on purpose: not a hang
    finally:
        await store.close()
        silent.close()


async def test_redis_set_read_and_ttl(aiorest_client: Any, redis_store: RedisSessionStore) -> None:
    client = await client_for(aiorest_client, redis_store, max_age=120)
    async with client.get("/s/untouched", cookies={"session": "x" * 43}) as response:
        assert set_cookies(response) == []  # an unknown id: nothing written
    async with client.post("/s/set", json={"user": "ann", "n": [1]}) as response:
        session_id = (await response.json())["id"]
        (cookie,) = set_cookies(response)
        assert cookie.startswith(f"session={session_id};") and "HttpOnly" in cookie
    key = redis_store.prefix + stored_id(session_id)
    assert await redis_store.redis.hgetall(key) == {b"user": b'"ann"', b"n": b"[1]"}
    assert 110 < await redis_store.redis.ttl(key) <= 120
    async with client.get("/s/get") as response:
        assert await response.json() == {"data": {"user": "ann", "n": [1]}, "id": session_id}
        assert set_cookies(response) == []


async def test_redis_bad_or_unknown_ids_never_become_sessions(
    aiorest_client: Any, redis_store: RedisSessionStore
) -> None:
    client = await client_for(aiorest_client, redis_store)
    chosen = "A" * 43  # well-formed, but no such session: a fixation attempt
    for value in (chosen, "short", "../../etc", "x" * 5000):
        async with client.post("/s/set", json={"k": 1}, cookies={"session": value}) as response:
            assert response.status == 200
            assert (await response.json())["id"] != value
    assert await redis_store.redis.exists(redis_store.prefix + stored_id(chosen)) == 0


async def test_redis_rotate_and_invalidate(aiorest_client: Any, redis_store: RedisSessionStore) -> None:
    client = await client_for(aiorest_client, redis_store)
    async with client.post("/s/set", json={"user": "ann"}) as response:
        first = (await response.json())["id"]
    async with client.post("/s/rotate") as response:
        second = (await response.json())["id"]
    assert first != second
    assert await redis_store.redis.exists(redis_store.prefix + stored_id(first)) == 0
    assert await redis_store.redis.hgetall(redis_store.prefix + stored_id(second)) == {b"user": b'"ann"'}
    async with client.get("/s/get", cookies={"session": first}) as response:  # the old id is dead
        assert (await response.json())["data"] == {}
    async with client.post("/s/invalidate", cookies={"session": second}) as response:
        assert "Max-Age=0" in set_cookies(response)[0]
    assert await redis_store.redis.exists(redis_store.prefix + stored_id(second)) == 0


async def test_redis_deletes_only_the_deleted_key(aiorest_client: Any, redis_store: RedisSessionStore) -> None:
    client = await client_for(aiorest_client, redis_store)
    async with client.post("/s/set", json={"a": 1, "b": 2}) as response:
        session_id = (await response.json())["id"]
    await (await client.post("/s/del/a")).release()
    assert await redis_store.redis.hgetall(redis_store.prefix + stored_id(session_id)) == {b"b": b"2"}


async def write_two_keys_at_once(aiorest_client: Any, store: SessionStore) -> tuple[Any, str]:
    """Two requests of one session, each setting a key, both loaded before either saves."""
    client = await aiorest_client(make_app(store, asyncio.Barrier(2)), cookie_jar=aiohttp.CookieJar(unsafe=True))
    async with client.post("/s/set", json={"start": 0}) as response:
        session_id = (await response.json())["id"]

    async def post(body: dict[str, int]) -> int:
        async with client.post("/s/together", json=body) as response:
            return int(response.status)

    assert await asyncio.wait_for(asyncio.gather(post({"a": 1}), post({"b": 2})), 5) == [200, 200]
    return client, session_id


async def test_redis_concurrent_requests_keep_both_keys(aiorest_client: Any, redis_store: RedisSessionStore) -> None:
    client, session_id = await write_two_keys_at_once(aiorest_client, redis_store)
    async with client.get("/s/get") as response:
        assert (await response.json())["data"] == {"start": 0, "a": 1, "b": 2}
    assert cookie_of(client) == session_id


def test_redis_store_options_are_checked() -> None:
    with pytest.raises(ValueError):
        RedisSessionStore("redis://127.0.0.1:6379/0", ttl=0)


async def test_no_cookie_never_reaches_the_store(aiorest_client: Any) -> None:
    store = RedisSessionStore("redis://127.0.0.1:1/0")  # nothing listens there: a round trip would fail
    try:
        client = await client_for(aiorest_client, store)
        async with client.get("/s/get") as response:
            assert response.status == 200 and (await response.json())["data"] == {}
        async with client.get("/s/get", cookies={"session": "x" * 43}) as response:
            assert response.status == 503  # with a cookie it does go to the (dead) store: unavailable
    finally:
        await store.close()


class CountingStore(CookieSessionStore):
    loads = 0

    def load_now(self, value: str, max_age: int) -> Session | None:
        self.loads += 1
        return super().load_now(value, max_age)


async def test_cookie_is_decoded_only_when_the_session_is_read(aiorest_client: Any) -> None:
    store = CountingStore([NEW])
    client = await client_for(aiorest_client, store)
    cookie = await store.save(Session({"a": 1}), 60)
    await (await client.get("/s/untouched", cookies={"session": cookie})).release()
    assert store.loads == 0
    await (await client.get("/s/get", cookies={"session": cookie})).release()
    assert store.loads == 1


async def test_nested_middleware_serves_once(aiorest_client: Any) -> None:
    store = CountingStore([NEW])
    inner = SessionMiddleware(store, cookie_name="inner")
    app = App(middleware=[SessionMiddleware(store)])

    @app.post("/both", middleware=[inner])
    async def both(request: Request) -> Any:
        request.session["k"] = 1
        return {}

    client = await aiorest_client(app)
    async with client.post("/both") as response:
        (cookie,) = set_cookies(response)
        assert cookie.startswith("session=")  # the outer one's


# -- the PostgreSQL store -------------------------------------------------------------


@pytest.fixture
async def pg_store(database_url: str) -> AsyncIterator[PostgresSessionStore]:
    """A fresh database migrated by the command line, as an app would be, and a store on it."""
    command = [sys.executable, "-m", "aiorest", "migrate", "--dir", "aiorest:sessions", "--dsn", database_url]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "1 migration(s) applied" in done.stdout, done.stderr
    database = Database(database_url, min_size=1, max_size=4)
    await database.open()
    try:
        yield PostgresSessionStore(database)
    finally:
        await database.close()


async def row(store: PostgresSessionStore, session_id: str) -> Any:
    return await store.database.fetchval("SELECT data FROM aiorest_sessions WHERE id = %s", (stored_id(session_id),))


async def test_aiorest_migrations_do_not_collide_with_the_app_s(database_url: str, tmp_path: Any) -> None:
    (tmp_path / "0001_things.sql").write_text("CREATE TABLE things (id int PRIMARY KEY);")
    database = Database(database_url, min_size=1, max_size=2)
    await database.open()
    try:
        assert [m.version for m in await migrate(database, tmp_path)] == [1]
        assert [m.version for m in await migrate(database, "aiorest:sessions")] == [-1]
        assert await migrate(database, tmp_path) == [] and await migrate(database, "aiorest:sessions") == []
        assert await database.fetchval("SELECT count(*) FROM aiorest_sessions") == 0
    finally:
        await database.close()
    with pytest.raises(MigrationError, match="ships no migrations named 'nope'"):
        load_migrations("aiorest:nope")


async def test_postgres_set_read_rotate_invalidate(aiorest_client: Any, pg_store: PostgresSessionStore) -> None:
    client = await client_for(aiorest_client, pg_store)
    async with client.get("/s/get", cookies={"session": "A" * 43}) as response:  # unknown id
        assert (await response.json())["data"] == {} and set_cookies(response) == []
    async with client.post("/s/set", json={"user": "ann", "n": [1]}) as response:
        first = (await response.json())["id"]
    assert await row(pg_store, first) == {"user": "ann", "n": [1]}
    ids = await pg_store.database.fetchall("SELECT id FROM aiorest_sessions")
    assert [r["id"] for r in ids] == [stored_id(first)] and len(stored_id(first)) == 64  # its hash, never the id
    async with client.get("/s/get") as response:
        assert (await response.json())["data"] == {"user": "ann", "n": [1]} and set_cookies(response) == []
    await (await client.post("/s/del/n")).release()
    assert await row(pg_store, first) == {"user": "ann"}
    async with client.post("/s/rotate") as response:
        second = (await response.json())["id"]
    assert first != second and await row(pg_store, first) is None
    assert await row(pg_store, second) == {"user": "ann"}
    async with client.post("/s/invalidate") as response:
        assert "Max-Age=0" in set_cookies(response)[0]
    assert await row(pg_store, second) is None


async def test_postgres_concurrent_requests_keep_both_keys(aiorest_client: Any, pg_store: PostgresSessionStore) -> None:
    _, session_id = await write_two_keys_at_once(aiorest_client, pg_store)
    assert await row(pg_store, session_id) == {"start": 0, "a": 1, "b": 2}


async def test_postgres_expired_rows_are_ignored_then_purged(
    aiorest_client: Any, pg_store: PostgresSessionStore
) -> None:
    client = await client_for(aiorest_client, pg_store)
    async with client.post("/s/set", json={"k": 1}) as response:
        session_id = (await response.json())["id"]
    await pg_store.database.execute("UPDATE aiorest_sessions SET expires_at = now() - interval '1 second'")
    async with client.get("/s/get") as response:
        assert (await response.json())["data"] == {}
    pg_store.purge_every = 0  # the next save purges
    await (await client.post("/s/set", json={"other": 1}, cookies={"session": ""})).release()
    assert await row(pg_store, session_id) is None
    assert await pg_store.database.fetchval("SELECT count(*) FROM aiorest_sessions") == 1

"""aiorest.security: identity and permissions on real servers, passwords, login rate limiting."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from typing import Any

import argon2
import msgspec
import pytest

from aiorest import App, HTTPServiceUnavailable, HTTPTooManyRequests, Request, Router
from aiorest.security import (
    Auth,
    BearerTokenIdentity,
    LoginRateLimiter,
    Passwords,
    RateLimit,
    hash_password,
    identity,
    login_required,
    needs_rehash,
    permits,
    requires,
    token_hash,
    tokens_equal,
    verify_password,
)


@dataclasses.dataclass(frozen=True)
class User:
    name: str
    permissions: frozenset[str] = frozenset()


# the app's token table: sha256 of the token -> user
TOKENS = {
    token_hash("reader-token"): User("ada", frozenset({"notes:read"})),
    token_hash("writer-token"): User("bob", frozenset({"notes:read", "notes:write"})),
}
LOOKUPS: list[str] = []


async def lookup(token: str) -> User | None:
    LOOKUPS.append(token)
    return TOKENS.get(token_hash(token))


class Note(msgspec.Struct):
    text: str


def auth_app() -> App:
    auth = Auth(identity=BearerTokenIdentity(lookup, realm="notes"))
    app = App(middleware=[auth])

    @app.get("/me")
    @login_required
    async def me(request: Request) -> dict[str, Any]:
        who = await identity(request)
        return {"name": who.name, "can_write": await permits(request, "notes:write")}

    @app.get("/whoami")
    async def whoami(request: Request) -> dict[str, Any]:
        who = await identity(request)
        return {"name": who.name if who else None}

    @app.post("/notes/{note_id:int}")
    @requires("notes:write")
    async def write(note_id: int, body: Note) -> dict[str, Any]:  # a typed handler
        return {"id": note_id, "text": body.text}

    return app


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_anonymous_gets_401_with_a_bearer_challenge(aiorest_client: Any) -> None:
    client = await aiorest_client(auth_app())
    async with client.get("/me") as response:
        assert response.status == 401
        assert response.headers["WWW-Authenticate"] == 'Bearer realm="notes"'
        assert (await response.json())["error"]["status"] == 401


INVALID = 'Bearer realm="notes", error="invalid_token"'
PLAIN = 'Bearer realm="notes"'  # RFC 6750: no error code for another scheme


@pytest.mark.parametrize(
    ("header", "challenge"),
    [
        ("Bearer", INVALID),
        ("Bearer ", INVALID),
        ("bearer a b", INVALID),
        ("Bearer tok\u00e9n", INVALID),
        ("Bearer " + "a" * 513, INVALID),
        ("Bearer ==abc", INVALID),
        ("Bearer abc=def", INVALID),
        ("Token reader-token", PLAIN),
        ("Basic cmVhZGVyOnRva2Vu", PLAIN),
        ("Bearerreader-token", PLAIN),
    ],
)
async def test_malformed_authorization_is_not_authenticated(aiorest_client: Any, header: str, challenge: str) -> None:
    client = await aiorest_client(auth_app())
    LOOKUPS.clear()
    async with client.get("/me", headers={"Authorization": header.encode("utf-8").decode("latin-1")}) as response:
        assert response.status == 401
        assert response.headers["WWW-Authenticate"] == challenge
        assert (await response.json())["error"]["message"] == "authentication required"
    assert LOOKUPS == []  # never reached the app's lookup


async def test_two_authorization_fields_are_not_authenticated(aiorest_client: Any) -> None:
    client = await aiorest_client(auth_app())
    headers = [("Authorization", "Bearer reader-token"), ("Authorization", "Bearer reader-token")]
    async with client.get("/me", headers=headers) as response:
        assert response.status == 401


async def test_unknown_token_is_401_invalid_token(aiorest_client: Any) -> None:
    client = await aiorest_client(auth_app())
    async with client.get("/me", headers=bearer("stolen-token")) as response:
        assert response.status == 401
        assert response.headers["WWW-Authenticate"] == 'Bearer realm="notes", error="invalid_token"'


async def test_valid_token_identifies_once_a_request(aiorest_client: Any) -> None:
    client = await aiorest_client(auth_app())
    LOOKUPS.clear()
    async with client.get("/me", headers=bearer("reader-token")) as response:
        assert response.status == 200
        assert await response.json() == {"name": "ada", "can_write": False}
    assert LOOKUPS == ["reader-token"]  # login_required, identity() and permits() shared one lookup
    async with client.get("/me", headers={"Authorization": "bEARER  writer-token"}) as response:
        assert await response.json() == {"name": "bob", "can_write": True}


async def test_identity_is_none_for_anonymous_on_an_open_route(aiorest_client: Any) -> None:
    client = await aiorest_client(auth_app())
    LOOKUPS.clear()
    async with client.get("/whoami") as response:
        assert await response.json() == {"name": None}
    async with client.get("/whoami", headers=bearer("reader-token")) as response:
        assert await response.json() == {"name": "ada"}


async def test_requires_on_a_typed_handler_403_then_200(aiorest_client: Any) -> None:
    client = await aiorest_client(auth_app())
    async with client.post("/notes/7", json={"text": "hi"}) as response:
        assert response.status == 401
    async with client.post("/notes/7", json={"text": "hi"}, headers=bearer("reader-token")) as response:
        assert response.status == 403
        error = (await response.json())["error"]
        assert error["details"] == {"permission": "notes:write"}
        assert "WWW-Authenticate" not in response.headers
    async with client.post("/notes/7", json={"text": "hi"}, headers=bearer("writer-token")) as response:
        assert response.status == 200
        assert await response.json() == {"id": 7, "text": "hi"}
    async with client.post("/notes/x", json={"text": "hi"}, headers=bearer("writer-token")) as response:
        assert response.status in (404, 422)  # typing still applies behind the decorator


async def test_per_router_and_per_route_auth(aiorest_client: Any) -> None:
    auth = Auth(identity=BearerTokenIdentity(lookup))
    admin = Router(middleware=[auth])

    @admin.get("/stats")
    @requires("notes:read")
    async def stats(request: Request) -> dict[str, int]:
        return {"users": 2}

    app = App()
    app.include(admin, "/admin")

    @app.get("/me", middleware=[auth])
    @login_required
    async def me(request: Request) -> dict[str, str]:
        return {"name": (await identity(request)).name}

    @app.get("/open")
    async def open_(request: Request) -> dict[str, str]:
        return {"ok": "yes"}

    @app.get("/misconfigured")
    @login_required
    async def misconfigured(request: Request) -> dict[str, str]:
        return {}

    client = await aiorest_client(app)
    async with client.get("/admin/stats") as response:
        assert response.status == 401
        assert response.headers["WWW-Authenticate"] == 'Bearer realm="api"'
    async with client.get("/admin/stats", headers=bearer("reader-token")) as response:
        assert response.status == 200
    async with client.get("/me", headers=bearer("writer-token")) as response:
        assert await response.json() == {"name": "bob"}
    async with client.get("/open") as response:
        assert response.status == 200
    async with client.get("/misconfigured") as response:
        assert response.status == 500  # a decorator without Auth is a bug, never an open door


def test_decorators_list_401_and_403_in_openapi() -> None:
    document = auth_app().openapi(title="t", version="1")
    assert {"401"} <= set(document["paths"]["/me"]["get"]["responses"])
    assert {"401", "403"} <= set(document["paths"]["/notes/{note_id}"]["post"]["responses"])
    assert "401" not in document["paths"]["/whoami"]["get"]["responses"]


def test_openapi_lists_the_security_schemes_of_the_routes_that_need_a_login() -> None:
    from aiorest.security import AnyIdentity, SessionIdentity

    document = auth_app().openapi(title="t", version="1")
    assert document["components"]["securitySchemes"] == {"bearerAuth": {"type": "http", "scheme": "bearer"}}
    assert document["paths"]["/me"]["get"]["security"] == [{"bearerAuth": []}]
    assert "security" not in document["paths"]["/whoami"]["get"]  # Auth around it, but no login needed

    both = Auth(AnyIdentity(SessionIdentity(lookup, cookie_name="sid"), BearerTokenIdentity(lookup)))
    router = Router(middleware=[both])

    @router.get("/mine")
    @login_required
    async def mine(request: Request) -> None: ...

    app = App()
    app.include(router)
    document = app.openapi(title="t", version="1")
    assert document["paths"]["/mine"]["get"]["security"] == [{"sessionCookie": []}, {"bearerAuth": []}]
    assert document["components"]["securitySchemes"]["sessionCookie"] == {
        "type": "apiKey",
        "in": "cookie",
        "name": "sid",
    }


def test_bad_configuration_is_refused() -> None:
    with pytest.raises(ValueError):
        BearerTokenIdentity(lookup, realm='a"b')
    with pytest.raises(ValueError):
        BearerTokenIdentity(lookup, max_token_length=0)
    with pytest.raises(TypeError):
        requires()
    with pytest.raises(ValueError):
        LoginRateLimiter(per_account=(0, 60))
    with pytest.raises(ValueError):
        Passwords(max_in_flight=0)


def test_tokens_equal() -> None:
    assert tokens_equal("abc", "abc") and tokens_equal(b"abc", "abc")
    assert not tokens_equal("abc", "abd") and not tokens_equal("abc", "abcd")


# -- passwords ------------------------------------------------------------------------


async def test_hash_and_verify() -> None:
    stored = await hash_password("correct horse")
    assert stored.startswith("$argon2id$")
    assert await verify_password(stored, "correct horse")
    assert not await verify_password(stored, "wrong horse")
    assert not await verify_password("not a hash", "correct horse")
    assert not await verify_password("$argon2id$v=19$m=1,t=1,p=1$YWFh$YWFh", "correct horse")
    assert not await verify_password(None, "not a password")  # unknown account: still False
    assert not needs_rehash(stored)
    assert needs_rehash("not a hash")


async def test_needs_rehash_after_parameters_change() -> None:
    weak = Passwords(hasher=argon2.PasswordHasher(time_cost=1, memory_cost=8192))
    stored = await weak.hash("pw")
    assert await Passwords().verify(stored, "pw")
    assert needs_rehash(stored)


async def test_hashing_does_not_block_the_loop(aiorest_client: Any) -> None:
    app = App()

    @app.get("/ping")
    async def ping(request: Request) -> dict[str, bool]:
        return {"pong": True}

    class HeldHasher(argon2.PasswordHasher):
        """Real argon2id hashes that start only once the test lets them: no clock in the test."""

        def __init__(self) -> None:
            super().__init__()
            self.go = threading.Event()
            self.started = threading.Semaphore(0)

        def hash(self, password: str | bytes, *, salt: bytes | None = None) -> str:
            self.started.release()
            assert self.go.wait(30)  # a breakage guard: the test sets it once /ping answers
            return super().hash(password, salt=salt)

    client = await aiorest_client(app)
    hasher = HeldHasher()
    passwords = Passwords(max_in_flight=2, max_waiting=8, hash_in_flight=2, hasher=hasher)
    hashes = asyncio.gather(*(passwords.hash(f"pw{i}") for i in range(6)))
    for _ in range(2):  # both threads are busy hashing
        assert await asyncio.to_thread(hasher.started.acquire, timeout=30)
    async with client.get("/ping") as response:  # answered while every thread hashes
        assert response.status == 200
    assert not hashes.done()
    hasher.go.set()
    assert all(stored.startswith("$argon2id$") for stored in await hashes)


async def test_hash_waiters_are_bounded() -> None:
    passwords = Passwords(max_in_flight=1, max_waiting=2)
    results = await asyncio.gather(*(passwords.hash("pw") for _ in range(5)), return_exceptions=True)
    refused = [r for r in results if isinstance(r, HTTPServiceUnavailable)]
    assert len(refused) == 2 and refused[0].headers["Retry-After"] == "1"
    assert sum(isinstance(r, str) for r in results) == 3


async def test_a_cancelled_hash_holds_its_thread_until_done() -> None:
    passwords = Passwords(max_in_flight=1, max_waiting=0)
    first = asyncio.ensure_future(passwords.hash("pw"))
    await asyncio.sleep(0.01)  # the thread has started hashing (it takes 50 to 100 ms)
    first.cancel()
    with pytest.raises(HTTPServiceUnavailable):  # the thread still hashes: no room yet
        await passwords.hash("pw")
    for _ in range(200):
        await asyncio.sleep(0.01)
        try:
            assert (await passwords.hash("pw")).startswith("$argon2id$")
            break
        except HTTPServiceUnavailable:
            continue
    else:
        pytest.fail("the cancelled hash never gave its thread back")


async def test_hashes_have_a_lane_of_their_own_that_verifications_keep_their_share_of() -> None:
    # issue 27: registrations filled the shared pool, and every login answered 503
    passwords = Passwords(max_in_flight=2, max_waiting=4, hash_in_flight=1, hash_waiting=2)
    stored = await passwords.hash("pw")
    finished: list[str] = []

    async def run(kind: str, call: Any) -> Any:
        try:
            return await call
        finally:
            finished.append(kind)

    hashes = [asyncio.ensure_future(run("hash", passwords.hash("pw"))) for _ in range(10)]
    await asyncio.sleep(0.01)  # the hashes are in their lane
    verified = await asyncio.gather(*(run("verify", passwords.verify(stored, "pw")) for _ in range(4)))
    assert verified == [True] * 4  # none refused, none waiting behind the hashes
    results = await asyncio.gather(*hashes, return_exceptions=True)
    assert sum(isinstance(r, HTTPServiceUnavailable) for r in results) == 7  # 1 at work, 2 waiting
    assert finished.index("verify") < max(i for i, kind in enumerate(finished) if kind == "hash")
    with pytest.raises(ValueError):
        Passwords(max_in_flight=2, hash_in_flight=3)


# -- login rate limiting --------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_per_account_limit_and_retry_after() -> None:
    clock = Clock()
    limiter = LoginRateLimiter(per_account=(3, 60), per_address=(100, 60), clock=clock)
    for address in ("10.0.0.1", "10.0.0.2", "10.0.0.3"):
        limiter.check("ada", address)
    clock.now += 20
    with pytest.raises(HTTPTooManyRequests) as refused:
        limiter.check("ada", "10.0.0.4")
    assert refused.value.headers["Retry-After"] == "40"
    limiter.check("bob", "10.0.0.4")  # another account is not affected
    clock.now += 40
    limiter.check("ada", "10.0.0.4")  # a new window


def test_per_address_limit() -> None:
    limiter = LoginRateLimiter(per_account=(100, 60), per_address=(2, 60), clock=Clock())
    limiter.check("a", "10.0.0.1")
    limiter.check("b", "10.0.0.1")
    with pytest.raises(HTTPTooManyRequests):
        limiter.check("c", "10.0.0.1")
    limiter.check("c", "10.0.0.2")


def test_reset_on_success() -> None:
    limiter = LoginRateLimiter(per_account=(2, 60), clock=Clock())
    limiter.check("ada", "10.0.0.1")
    limiter.check("ada", "10.0.0.1")
    limiter.reset("ada")
    limiter.check("ada", "10.0.0.1")
    limiter.check("ada", "10.0.0.1")
    with pytest.raises(HTTPTooManyRequests):
        limiter.check("ada", "10.0.0.1")


def test_memory_is_bounded_and_a_counted_key_is_forgotten_only_after_the_table_turns_over() -> None:
    # issue 34: a table full of keys in their window refused every new account with 503; now a
    # new key forgets the oldest, which gives that key a fresh count only after max_entries others
    clock = Clock()
    limiter = LoginRateLimiter(per_account=(1, 60), per_address=(10**6, 60), max_entries=100, clock=clock)
    limiter.check("victim", "10.0.0.1")
    for i in range(99):
        limiter.check(f"junk{i}", f"10.1.0.{i}")
    assert len(limiter.accounts) == 100
    with pytest.raises(HTTPTooManyRequests):
        limiter.check("victim", "10.0.0.1")  # still counted
    clock.now += 15
    limiter.check("junk-more", "10.1.1.1")  # counted: the victim's key, the oldest, made room
    assert len(limiter.accounts) == 100 and len(limiter.addresses) == 100
    limiter.check("victim", "10.0.0.1")


def test_a_refused_address_wears_down_no_account_s_count() -> None:
    # issue 27: attempts from an address already refused still filled the accounts' table,
    # and pushed out the count of the account another address was guessing at
    limiter = LoginRateLimiter(per_account=(2, 60), per_address=(3, 60), max_entries=50, clock=Clock())
    limiter.check("victim", "10.0.0.1")
    limiter.check("victim", "10.0.0.1")
    for i in range(3):
        limiter.check(f"spray{i}", "10.0.0.2")
    for i in range(1000):
        with pytest.raises(HTTPTooManyRequests):
            limiter.check(f"spray-more{i}", "10.0.0.2")
    assert len(limiter.accounts) == 4
    with pytest.raises(HTTPTooManyRequests):
        limiter.check("victim", "10.0.0.1")


def test_an_attempt_that_checked_no_password_is_taken_back() -> None:
    limiter = LoginRateLimiter(per_account=(2, 60), per_address=(100, 60), clock=Clock())
    for _ in range(5):
        with pytest.raises(HTTPServiceUnavailable), limiter.check("ada", "10.0.0.1"):
            raise HTTPServiceUnavailable("the hashing pool is full", retry_after=1)
    with limiter.check("ada", "10.0.0.1"):
        pass  # a wrong password, say: counted
    attempt = limiter.check("ada", "10.0.0.1")
    attempt.refund()
    attempt.refund()  # once only
    limiter.check("ada", "10.0.0.1")
    with pytest.raises(HTTPTooManyRequests):
        limiter.check("ada", "10.0.0.1")


def test_rate_limit_counts_refunds_and_resets_by_key() -> None:
    clock = Clock()
    limit = RateLimit(2, 10, max_entries=2, message="slow down", clock=clock)
    limit.hit("a")
    receipt = limit.hit("a")
    with pytest.raises(HTTPTooManyRequests) as refused:
        limit.hit("a")
    assert refused.value.message == "slow down" and refused.value.headers["Retry-After"] == "10"
    limit.refund("a", receipt)
    limit.hit("a")
    limit.reset("a")
    limit.hit("a")
    clock.now += 10
    old = limit.hit("a")  # a new window
    limit.refund("b", old)  # another key's receipt: nothing
    limit.hit("b")
    limit.hit("c")  # full: "a", the oldest, is forgotten
    assert len(limit) == 2
    limit.hit("a")
    with pytest.raises(ValueError):
        RateLimit(1, 10, max_entries=0)


def test_long_keys_are_counted_by_the_whole_key() -> None:
    limiter = LoginRateLimiter(per_account=(1, 60), clock=Clock())
    name = "x" * 100_000
    limiter.check(name, "10.0.0.1")
    limiter.check(name + "y", "10.0.0.1")  # the same first 64 characters, another account
    with pytest.raises(HTTPTooManyRequests):
        limiter.check(name, "10.0.0.2")
    limiter.reset(name)
    limiter.check(name, "10.0.0.3")


# -- identity from the session -----------------------------------------------------------------


def _session_app(load: Any) -> App:
    from aiorest import CookieSessionStore, SessionMiddleware
    from aiorest.security import AnyIdentity, SessionIdentity

    app = App(
        middleware=[
            SessionMiddleware(CookieSessionStore(secrets=["s" * 32])),
            Auth(AnyIdentity(SessionIdentity(load, key="uid", realm="notes"))),
        ]
    )

    @app.post("/login/{uid:int}")
    async def login(request: Request, uid: int) -> None:
        request.session.rotate()
        request.session["uid"] = uid

    @app.post("/logout")
    async def logout(request: Request) -> None:
        request.session.invalidate()

    @app.get("/me")
    @login_required
    async def me(request: Request) -> dict[str, Any]:
        return {"me": await identity(request)}

    return app


async def test_session_identity_follows_login_and_logout_and_the_users_existence(aiorest_client):
    users = {1: "ada", 2: "grace"}

    async def load(uid: int) -> str | None:
        return users.get(uid)

    client = await aiorest_client(_session_app(load))
    async with client.get("/me") as response:
        assert response.status == 401 and response.headers["WWW-Authenticate"] == 'Session realm="notes"'
    async with client.post("/login/1") as response:
        cookie = response.headers["Set-Cookie"].split(";", 1)[0]
    async with client.get("/me", headers={"Cookie": cookie}) as response:
        assert await response.json() == {"me": "ada"}
    async with client.post("/logout", headers={"Cookie": cookie}) as response:
        expired = response.headers["Set-Cookie"].split(";", 1)[0]
    async with client.get("/me", headers={"Cookie": expired}) as response:
        assert response.status == 401
    async with client.post("/login/2") as response:
        cookie = response.headers["Set-Cookie"].split(";", 1)[0]
    del users[2]  # deleted since: the session no longer identifies anyone
    async with client.get("/me", headers={"Cookie": cookie}) as response:
        assert response.status == 401
    tampered = cookie[:-4] + ("AAAA" if not cookie.endswith("AAAA") else "BBBB")
    async with client.get("/me", headers={"Cookie": tampered}) as response:
        assert response.status == 401


def test_session_identity_and_any_identity_refuse_bad_settings():
    from aiorest.security import AnyIdentity, SessionIdentity

    async def load(uid: Any) -> None:
        return None

    with pytest.raises(ValueError, match="realm"):
        SessionIdentity(load, realm='a"b')
    with pytest.raises(ValueError, match="at least one"):
        AnyIdentity()

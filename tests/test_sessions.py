"""Sessions (aiorest/sessions.py): served for real, cookies read off the wire."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import aiohttp
import pytest

from aiorest import App, CookieStore, Request, Router, SessionMiddleware
from aiorest.server import Server
from aiorest.sessions import COOKIE_LIMIT, Session

OLD = "o" * 32
NEW = "n" * 32


def make_app(store: Any, **options: Any) -> App:
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
        from aiorest import HTTPConflict

        raise HTTPConflict("no")

    @app.get("/plain")
    async def plain(request: Request) -> Any:
        return {"session": request.session}

    app.include(group, "/s")
    return app


def set_cookies(response: Any) -> list[str]:
    return response.headers.getall("Set-Cookie", [])


async def client_for(aiorest_client: Any, store: Any, **options: Any) -> Any:
    # unsafe=True: aiohttp keeps cookies for the IP-address host 127.0.0.1
    return await aiorest_client(make_app(store, **options), cookie_jar=aiohttp.CookieJar(unsafe=True))


def forge(payload: dict[str, Any], signature: str = "AAAA") -> str:
    body = base64.urlsafe_b64encode(json.dumps(payload).encode()).rstrip(b"=").decode()
    return f"{body}.{signature}"


# -- the cookie store ---------------------------------------------------------------


async def test_set_then_read_across_requests(aiorest_client: Any) -> None:
    client = await client_for(aiorest_client, CookieStore([NEW]))
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
    client = await client_for(aiorest_client, CookieStore([NEW]))
    async with client.get("/s/untouched") as response:
        assert response.status == 200 and set_cookies(response) == []
    async with client.get("/s/get") as response:  # read while empty: nothing to write
        assert (await response.json())["data"] == {} and set_cookies(response) == []


def test_session_without_middleware_names_the_fix() -> None:
    request = Request("GET", "/", b"/", "", "1.1", [], App())
    with pytest.raises(RuntimeError, match="SessionMiddleware"):
        _ = request.session


async def test_tampered_malformed_and_oversized_cookies_give_an_empty_session(aiorest_client: Any) -> None:
    store = CookieStore([NEW])
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
    store = CookieStore([NEW])
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


async def test_key_rotation(aiorest_client: Any) -> None:
    signed_by_old = await CookieStore([OLD]).save(Session({"k": 1}), 60)
    rotated = CookieStore([NEW, OLD])
    assert rotated.load_now(signed_by_old, 60) is not None  # the old secret still verifies
    assert CookieStore([NEW]).load_now(signed_by_old, 60) is None  # once dropped, it does not
    signed_now = await rotated.save(Session({"k": 1}), 60)
    assert CookieStore([NEW]).load_now(signed_now, 60) is not None  # the new one signs
    assert CookieStore([OLD]).load_now(signed_now, 60) is None


def test_secrets_are_checked() -> None:
    for bad in (["short"], [], "x" * 40, [NEW, b"tiny"]):
        with pytest.raises(ValueError):
            CookieStore(bad)  # type: ignore[arg-type]


async def test_oversized_session_is_a_clear_error(aiorest_client: Any, caplog: pytest.LogCaptureFixture) -> None:
    client = await client_for(aiorest_client, CookieStore([NEW]))
    async with client.post("/s/set", json={"big": "x" * 4000}) as response:
        assert response.status == 500 and set_cookies(response) == []
    assert "over the 4096 browsers keep" in caplog.text


def test_values_must_be_json() -> None:
    session = Session()
    with pytest.raises(TypeError, match="JSON value"):
        session["when"] = object()
    with pytest.raises(TypeError, match="strings"):
        session[1] = 2  # type: ignore[index]
    assert not session.modified


async def test_rotate_changes_the_id_and_keeps_the_data(aiorest_client: Any) -> None:
    client = await client_for(aiorest_client, CookieStore([NEW]))
    async with client.post("/s/set", json={"user": "ann"}) as response:
        first = (await response.json())["id"]
    async with client.post("/s/rotate") as response:
        second = (await response.json())["id"]
        assert len(set_cookies(response)) == 1
    async with client.get("/s/get") as response:
        body = await response.json()
    assert first != second == body["id"] and body["data"] == {"user": "ann"}


async def test_invalidate_and_emptying_expire_the_cookie(aiorest_client: Any) -> None:
    client = await client_for(aiorest_client, CookieStore([NEW]))
    await (await client.post("/s/set", json={"user": "ann"})).release()
    async with client.post("/s/invalidate") as response:
        (cookie,) = set_cookies(response)
        assert cookie.startswith("session=;") and "Max-Age=0" in cookie
    async with client.get("/s/get") as response:
        assert (await response.json())["data"] == {}
    await (await client.post("/s/set", json={"a": 1})).release()
    async with client.post("/s/del/a") as response:
        assert "Max-Age=0" in set_cookies(response)[0]


async def test_a_raised_error_saves_nothing(aiorest_client: Any) -> None:
    client = await client_for(aiorest_client, CookieStore([NEW]))
    async with client.post("/s/error") as response:
        assert response.status == 409 and set_cookies(response) == []


async def test_route_without_middleware_fails_clearly(aiorest_client: Any, caplog: pytest.LogCaptureFixture) -> None:
    client = await client_for(aiorest_client, CookieStore([NEW]))
    async with client.get("/plain") as response:
        assert response.status == 500
    assert "needs SessionMiddleware" in caplog.text


async def test_secure_only_over_https_from_a_trusted_proxy() -> None:
    server = Server(make_app(CookieStore([NEW])), host="127.0.0.1", port=0, forwarded_allow_ips="127.0.0.1")
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
        SessionMiddleware(CookieStore([NEW]), max_age=0)
    with pytest.raises(ValueError):
        SessionMiddleware(CookieStore([NEW]), cookie_name="bad name")

"""Routing through the public API and a real server: registration, parameters, url_for, 404/405/HEAD/OPTIONS."""

from __future__ import annotations

import asyncio
import re
import uuid

import pytest

from aiorest import App, HTTPError, NoMatchFound, Request, Route, Router
from aiorest.testing import TestClient
from tests.rawclient import read_response


async def whoami(request: Request) -> dict[str, str]:
    return {"method": request.method, "path": request.path}


async def params(request: Request) -> dict[str, object]:
    return {name: [type(value).__name__, str(value)] for name, value in request.path_params.items()}


class EvenConvertor:
    regex = "[0-9]+"

    def convert(self, value: str) -> int:
        number = int(value)
        if number % 2:
            raise ValueError(f"{number} is odd")
        return number

    def to_string(self, value: int) -> str:
        return str(value)


class HexConvertor:
    regex = "[0-9a-f]+"

    def convert(self, value: str) -> int:
        return int(value, 16)

    def to_string(self, value: int) -> str:
        return format(value, "x")


# -- registration ----------------------------------------------------------------------


async def test_method_decorators_register_one_method_each(aiorest_client):
    app = App()
    for method in ("get", "post", "put", "patch", "delete"):
        getattr(app, method)(f"/{method}")(whoami)
    client = await aiorest_client(app)
    for method in ("GET", "POST", "PUT", "PATCH", "DELETE"):
        async with client.request(method, f"/{method.lower()}") as response:
            assert response.status == 200
            assert await response.json() == {"method": method, "path": f"/{method.lower()}"}
        other = "POST" if method != "POST" else "GET"
        async with client.request(other, f"/{method.lower()}") as response:
            assert response.status == 405


async def test_route_registers_every_listed_method(aiorest_client):
    app = App()
    app.route("/thing", methods=["get", "PUT", "Delete"])(whoami)
    client = await aiorest_client(app)
    for method in ("GET", "PUT", "DELETE"):
        async with client.request(method, "/thing") as response:
            assert await response.json() == {"method": method, "path": "/thing"}
    async with client.post("/thing") as response:
        assert response.status == 405


def test_decorators_return_the_handler_unchanged():
    app = App()
    assert app.get("/a")(whoami) is whoami
    assert app.route("/b", methods=["POST"])(whoami) is whoami


def test_route_methods_must_be_a_list_not_a_string():
    with pytest.raises(TypeError, match="list"):
        App().route("/x", methods="GET")


async def test_add_route_registers_without_a_decorator(aiorest_client):
    app = App()
    app.add_route("POST", "/added", whoami)
    client = await aiorest_client(app)
    async with client.post("/added") as response:
        assert await response.json() == {"method": "POST", "path": "/added"}


async def test_app_accepts_a_list_of_routes(aiorest_client):
    app = App([Route("GET", "/listed", whoami), Route("PATCH", "/items/{id:int}", params, name="item")])
    client = await aiorest_client(app)
    async with client.get("/listed") as response:
        assert await response.json() == {"method": "GET", "path": "/listed"}
    async with client.patch("/items/3") as response:
        assert await response.json() == {"id": ["int", "3"]}
    assert app.url_for("item", id=3) == "/items/3"


async def test_router_routes_are_served_under_the_prefix(aiorest_client):
    router = Router()
    router.get("/notes")(whoami)
    router.post("/notes/{id:int}")(params)
    app = App()
    app.include(router, "/api")
    client = await aiorest_client(app)
    async with client.get("/api/notes") as response:
        assert await response.json() == {"method": "GET", "path": "/api/notes"}
    async with client.post("/api/notes/7") as response:
        assert await response.json() == {"id": ["int", "7"]}
    async with client.get("/notes") as response:
        assert response.status == 404


async def test_one_router_included_twice_has_namespaced_names(aiorest_client):
    router = Router()
    router.get("/items/{id:int}", name="item")(params)
    router.get("/items")(whoami)
    app = App()
    app.include(router, "/v1", name="v1")
    app.include(router, "/v2", name="v2")
    assert app.url_for("v1.item", id=4) == "/v1/items/4"
    assert app.url_for("v2.item", id=4) == "/v2/items/4"
    assert app.url_for("v1.whoami") == "/v1/items"
    assert app.url_for("v2.whoami") == "/v2/items"
    client = await aiorest_client(app)
    for prefix in ("/v1", "/v2"):
        async with client.get(f"{prefix}/items/4") as response:
            assert await response.json() == {"id": ["int", "4"]}


def test_router_including_a_router_nests_the_prefixes():
    inner = Router()
    inner.get("/leaf", name="leaf")(whoami)
    outer = Router()
    outer.include(inner, "/inner", name="in")
    app = App()
    app.include(outer, "/outer", name="out")
    assert app.url_for("out.in.leaf") == "/outer/inner/leaf"


def test_include_prefix_must_start_and_not_end_with_a_slash():
    router = Router()
    router.get("/x")(whoami)
    for prefix in ("api", "/api/"):
        with pytest.raises(ValueError, match="prefix"):
            App().include(router, prefix)


def test_route_path_must_start_with_a_slash():
    with pytest.raises(ValueError, match="must start with '/'"):
        App().add_route("GET", "notes", whoami)


def test_duplicate_method_for_a_path_is_refused_naming_the_route():
    app = App()
    app.get("/notes/{id:int}")(params)
    with pytest.raises(ValueError, match=r"'/notes/\{id:int\}' is already registered for GET"):
        app.get("/notes/{id:int}")(whoami)


def test_same_method_on_a_template_with_the_same_regex_is_refused():
    # /n/{b:int} could never be reached: /n/{a:int} matches every path it matches.
    app = App()
    app.get("/n/{a:int}")(params)
    with pytest.raises(ValueError, match="already registered for GET"):
        app.get("/n/{b:int}")(whoami)


def test_duplicate_static_route_is_refused():
    app = App()
    app.post("/notes")(whoami)
    with pytest.raises(ValueError, match="'/notes' is already registered for POST"):
        app.add_route("post", "/notes", params)


def test_duplicate_explicit_name_is_refused():
    app = App()
    app.get("/a", name="same")(whoami)
    with pytest.raises(ValueError, match="'same'"):
        app.get("/b", name="same")(params)


def test_a_sync_handler_is_refused_because_it_is_not_async():
    def handler(request):
        return {}

    with pytest.raises(TypeError, match="async"):
        App().get("/sync")(handler)
    with pytest.raises(TypeError, match="async"):
        Route("GET", "/sync", handler)


async def test_an_object_with_async_call_is_a_handler(aiorest_client):
    class Endpoint:
        async def __call__(self, request: Request) -> dict[str, str]:
            return {"from": "object"}

    app = App()
    app.get("/obj")(Endpoint())
    client = await aiorest_client(app)
    async with client.get("/obj") as response:
        assert await response.json() == {"from": "object"}


def test_unknown_converter_is_refused_at_registration():
    with pytest.raises(ValueError, match="unknown converter 'nope'"):
        App().get("/x/{a:nope}")(whoami)


async def test_registering_a_route_after_startup_is_refused():
    app = App()
    app.get("/")(whoami)
    async with TestClient(app):
        with pytest.raises(RuntimeError, match="started"):
            app.get("/late")(whoami)
        with pytest.raises(RuntimeError, match="started"):
            app.add_route("GET", "/late", whoami)


# -- path parameters ---------------------------------------------------------------------


@pytest.fixture
def typed_app() -> App:
    app = App()
    app.get("/str/{name}")(params)
    app.get("/int/{id:int}")(params)
    app.get("/float/{x:float}")(params)
    app.get("/uuid/{id:uuid}")(params)
    app.get("/files/{rest:path}")(params)
    app.get("/two/{a:int}/{b}")(params)
    return app


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/str/grace", {"name": ["str", "grace"]}),
        ("/int/42", {"id": ["int", "42"]}),
        ("/float/2.5", {"x": ["float", "2.5"]}),
        ("/float/3", {"x": ["float", "3.0"]}),
        (
            "/uuid/12345678-1234-5678-1234-567812345678",
            {"id": ["UUID", "12345678-1234-5678-1234-567812345678"]},
        ),
        ("/files/a/b/c.txt", {"rest": ["str", "a/b/c.txt"]}),
        ("/files/", {"rest": ["str", ""]}),
        ("/two/1/x", {"a": ["int", "1"], "b": ["str", "x"]}),
    ],
)
async def test_converted_parameters_reach_the_handler_with_their_types(aiorest_client, typed_app, path, expected):
    client = await aiorest_client(typed_app)
    async with client.get(path) as response:
        assert response.status == 200
        assert await response.json() == expected


async def test_parameter_values_are_python_objects_in_the_handler(aiorest_client):
    seen: dict[str, object] = {}
    app = App()

    @app.get("/t/{i:int}/{f:float}/{u:uuid}")
    async def typed(request: Request) -> None:
        seen.update(request.path_params)

    client = await aiorest_client(app)
    async with client.get("/t/7/1.5/12345678-1234-5678-1234-567812345678") as response:
        assert response.status == 204
    assert seen == {"i": 7, "f": 1.5, "u": uuid.UUID("12345678-1234-5678-1234-567812345678")}


@pytest.mark.parametrize(
    "path",
    ["/int/abc", "/int/-1", "/float/1e5", "/uuid/not-a-uuid", "/str/a/b", "/str/", "/two/x/y", "/nowhere"],
)
async def test_path_the_parameters_do_not_match_is_404(aiorest_client, typed_app, path):
    client = await aiorest_client(typed_app)
    async with client.get(path) as response:
        assert response.status == 404


async def test_converters_given_to_the_app_and_added_later(aiorest_client):
    app = App(convertors={"even": EvenConvertor()})
    app.add_convertor("hex", HexConvertor())
    app.get("/even/{n:even}", name="even")(params)
    app.get("/hex/{n:hex}", name="hex")(params)
    client = await aiorest_client(app)
    async with client.get("/even/4") as response:
        assert await response.json() == {"n": ["int", "4"]}
    async with client.get("/even/5") as response:  # the converter refuses it
        assert response.status == 404
    async with client.get("/hex/ff") as response:
        assert await response.json() == {"n": ["int", "255"]}
    assert app.url_for("hex", n=255) == "/hex/ff"
    assert app.url_for("even", n=8) == "/even/8"


async def test_a_converter_refusing_lets_a_later_template_match(aiorest_client):
    app = App(convertors={"even": EvenConvertor()})
    app.get("/n/{even:even}")(params)
    app.get("/n/{odd:int}")(params)
    client = await aiorest_client(app)
    async with client.get("/n/4") as response:
        assert await response.json() == {"even": ["int", "4"]}
    async with client.get("/n/5") as response:
        assert await response.json() == {"odd": ["int", "5"]}


class LangConvertor:
    def __init__(self, regex: str) -> None:
        self.regex = regex

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


@pytest.mark.parametrize("regex", ["(en|fr)", "(?P<lang>en|fr)", r"(e)(n)|(f)\(?(r)", r"[(](?:en|fr)|(fr)"])
async def test_a_converters_groups_do_not_shift_the_parameters_of_any_route(aiorest_client, regex):
    app = App(convertors={"lang": LangConvertor(regex)})
    app.get("/{lang:lang}/docs/{page}")(params)
    app.get("/later/{n:int}/{name}")(params)
    client = await aiorest_client(app)
    async with client.get("/fr/docs/intro") as response:
        assert await response.json() == {"lang": ["str", "fr"], "page": ["str", "intro"]}
    async with client.get("/later/3/x") as response:  # registered after it: was a 500 (KeyError)
        assert await response.json() == {"n": ["int", "3"], "name": ["str", "x"]}
    async with client.get("/de/docs/intro") as response:
        assert response.status == 404


@pytest.mark.parametrize(
    ("regex", "expected"),
    [
        (r"(a)\1", "refers to its own groups"),
        ("(?P<x>a)(?P=x)", "refers to its own groups"),
        ("(a)?(?(1)b|c)", "refers to its own groups"),
        ("(?i)en", "does not compile inside a route's pattern"),
        ("[en", "does not compile"),
    ],
)
def test_a_converter_regex_the_table_cannot_hold_is_refused_naming_it(regex, expected):
    app = App(convertors={"lang": LangConvertor(regex)})
    with pytest.raises(ValueError, match=r"converter 'lang' \(LangConvertor\): regex .*" + re.escape(expected)):
        app.get("/{lang:lang}/docs")(params)
    assert not app.router.routes()


async def test_static_path_wins_over_a_template(aiorest_client):
    app = App()

    @app.get("/users/{name}")
    async def user(request: Request) -> dict[str, str]:
        return {"user": request.path_params["name"]}

    @app.get("/users/me")
    async def me(request: Request) -> dict[str, str]:
        return {"user": "me!"}

    client = await aiorest_client(app)
    async with client.get("/users/me") as response:
        assert await response.json() == {"user": "me!"}
    async with client.get("/users/bob") as response:
        assert await response.json() == {"user": "bob"}


async def test_three_hundred_dynamic_routes_each_resolve_to_their_own_handler(aiorest_client):
    app = App()

    def make(i: int):
        async def handler(request: Request) -> dict[str, object]:
            return {"route": i, "params": dict(request.path_params)}

        return handler

    for i in range(300):
        if i % 3 == 0:
            app.get(f"/r{i}/{{id:int}}")(make(i))
        elif i % 3 == 1:
            app.get(f"/r{i}/{{name}}/x/{{n:int}}")(make(i))
        else:
            app.get(f"/r{i}/{{rest:path}}")(make(i))
    client = await aiorest_client(app)
    for i in (0, 1, 2, 3, 149, 150, 151, 297, 298, 299):
        if i % 3 == 0:
            path, expected = f"/r{i}/{i * 10}", {"id": i * 10}
        elif i % 3 == 1:
            path, expected = f"/r{i}/n{i}/x/{i}", {"name": f"n{i}", "n": i}
        else:
            path, expected = f"/r{i}/deep/{i}/path", {"rest": f"deep/{i}/path"}
        async with client.get(path) as response:
            assert await response.json() == {"route": i, "params": expected}, path
    async with client.get("/r0/notanint") as response:
        assert response.status == 404
    async with client.get("/r300/1") as response:
        assert response.status == 404


# -- url_for ---------------------------------------------------------------------------------


@pytest.fixture
def named_app() -> App:
    app = App()
    app.get("/", name="home")(whoami)
    app.get("/notes/{note_id:int}", name="note")(params)
    app.get("/users/{name}", name="user")(params)
    app.get("/files/{rest:path}", name="file")(params)
    app.get("/pairs/{a:int}/{b:float}", name="pair")(params)
    return app


def test_url_for_fills_in_parameters(named_app):
    assert named_app.url_for("home") == "/"
    assert named_app.url_for("note", note_id=5) == "/notes/5"
    assert named_app.url_for("pair", a=1, b=2.5) == "/pairs/1/2.5"


def test_url_for_unknown_name_is_no_match_found(named_app):
    with pytest.raises(NoMatchFound, match="'missing'"):
        named_app.url_for("missing")


@pytest.mark.parametrize("kwargs", [{}, {"note_id": 1, "extra": 2}, {"id": 1}])
def test_url_for_with_wrong_parameter_names_is_no_match_found(named_app, kwargs):
    with pytest.raises(NoMatchFound, match="note_id"):
        named_app.url_for("note", **kwargs)


def test_url_for_quotes_parameters(named_app):
    assert named_app.url_for("user", name="grace hopper") == "/users/grace%20hopper"
    assert named_app.url_for("user", name="a?b#c&d") == "/users/a%3Fb%23c%26d"
    assert named_app.url_for("user", name="é") == "/users/%C3%A9"
    assert named_app.url_for("file", rest="dir one/f.txt") == "/files/dir%20one/f.txt"


def test_url_for_refuses_values_the_converter_could_not_match(named_app):
    with pytest.raises(ValueError):
        named_app.url_for("user", name="a/b")
    with pytest.raises(ValueError):
        named_app.url_for("note", note_id=-1)


async def test_url_for_output_routes_back_to_the_same_values(aiorest_client, named_app):
    client = await aiorest_client(named_app)
    async with client.get(named_app.url_for("user", name="grace hopper é?&")) as response:
        assert await response.json() == {"name": ["str", "grace hopper é?&"]}
    async with client.get(named_app.url_for("file", rest="a b/c%d")) as response:
        assert await response.json() == {"rest": ["str", "a b/c%d"]}


@pytest.mark.parametrize("value", [2.5, 3.0, 0.1 + 0.2, 0.00001, 1e16, 1e22])
async def test_url_for_a_float_routes_back_to_the_same_float(aiorest_client, named_app, value):
    client = await aiorest_client(named_app)
    path = named_app.url_for("pair", a=1, b=value)
    async with client.get(path) as response:
        assert response.status == 200, path
        assert await response.json() == {"a": ["int", "1"], "b": ["float", str(value)]}


def test_url_for_finds_a_route_by_its_handler_name():
    app = App()

    @app.delete("/notes/{id:int}")
    async def delete_note(request: Request) -> None:
        return None

    assert app.url_for("delete_note", id=3) == "/notes/3"


# -- 404, 405, HEAD, OPTIONS --------------------------------------------------------------------


async def test_unknown_path_is_404_with_the_error_body(aiorest_client):
    app = App()
    app.get("/")(whoami)
    client = await aiorest_client(app)
    async with client.get("/nowhere") as response:
        assert response.status == 404
        assert response.content_type == "application/json"
        body = await response.json()
    assert set(body) == {"error"}
    assert body["error"]["status"] == 404
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    assert body["error"]["details"] is None


async def test_paths_are_matched_exactly_without_trailing_slash_redirect(aiorest_client):
    app = App()
    app.get("/notes")(whoami)
    client = await aiorest_client(app)
    async with client.get("/notes/", allow_redirects=False) as response:
        assert response.status == 404


async def test_wrong_method_is_405_with_allow_listing_the_path_methods(aiorest_client):
    app = App()
    app.get("/notes")(whoami)
    app.post("/notes")(whoami)
    client = await aiorest_client(app)
    async with client.put("/notes") as response:
        assert response.status == 405
        assert response.headers["Allow"] == "GET, HEAD, OPTIONS, POST"
        assert (await response.json())["error"]["status"] == 405


async def test_405_allow_is_the_union_of_every_template_matching_the_path(aiorest_client):
    app = App()
    app.get("/items/{id:int}")(params)
    app.post("/items/{name}")(params)
    client = await aiorest_client(app)
    async with client.delete("/items/5") as response:
        assert response.status == 405
        assert response.headers["Allow"] == "GET, HEAD, OPTIONS, POST"
    async with client.delete("/items/abc") as response:  # only the str template matches
        assert response.status == 405
        assert response.headers["Allow"] == "OPTIONS, POST"
    async with client.post("/items/5") as response:  # the second template takes the method
        assert await response.json() == {"name": ["str", "5"]}
    async with client.get("/items/5") as response:
        assert await response.json() == {"id": ["int", "5"]}


async def test_a_template_answers_a_method_its_static_sibling_lacks(aiorest_client):
    app = App()
    app.get("/users/me")(whoami)
    app.delete("/users/{name}")(params)
    client = await aiorest_client(app)
    async with client.delete("/users/me") as response:
        assert await response.json() == {"name": ["str", "me"]}


async def test_head_runs_the_get_handler_and_sends_no_body(aiorest_client):
    app = App()
    calls = []

    @app.get("/text")
    async def text(request: Request) -> dict[str, str]:
        calls.append(request.method)
        return {"text": "x" * 100}

    client = await aiorest_client(app)
    async with client.get("/text") as response:
        get_length = int(response.headers["Content-Length"])
        assert len(await response.read()) == get_length
    async with client.head("/text") as response:
        assert response.status == 200
        assert response.content_type == "application/json"
        assert int(response.headers["Content-Length"]) == get_length
        assert await response.read() == b""
    assert calls == ["GET", "HEAD"]


async def test_head_response_is_followed_directly_by_the_next_response(aiorest_client):
    app = App()

    @app.get("/big")
    async def big(request: Request) -> dict[str, str]:
        return {"data": "y" * 50_000}

    client = await aiorest_client(app)
    reader, writer = await asyncio.open_connection("127.0.0.1", client.port)
    try:
        writer.write(b"HEAD /big HTTP/1.1\r\nHost: t\r\n\r\n")
        async with asyncio.timeout(5):
            head = await reader.readuntil(b"\r\n\r\n")
        assert b"Content-Length: 50011\r\n" in head  # {"data":"..."}
        writer.write(b"GET /big HTTP/1.1\r\nHost: t\r\n\r\n")
        response = await read_response(reader)
        # Had the HEAD answer carried a body, it would come before this status line.
        assert response.status == 200
        assert len(response.body) == 50011
    finally:
        writer.close()


@pytest.mark.parametrize("path", ["/users/me", "/items/5"], ids=["static-then-template", "template-then-template"])
async def test_head_uses_the_get_handler_of_another_template_matching_the_path(aiorest_client, path):
    app = App()
    app.post("/users/me")(whoami)
    app.get("/users/{name}")(params)
    app.post("/items/{id:int}")(params)
    app.get("/items/{name}")(params)
    client = await aiorest_client(app)
    async with client.get(path) as response:
        assert response.status == 200
        length = response.headers["Content-Length"]
    async with client.head(path) as response:
        assert response.status == 200
        assert response.headers["Content-Length"] == length


async def test_head_without_a_get_handler_is_405(aiorest_client):
    app = App()
    app.post("/only-post")(whoami)
    client = await aiorest_client(app)
    async with client.head("/only-post") as response:
        assert response.status == 405
        assert response.headers["Allow"] == "OPTIONS, POST"


async def test_options_is_204_with_allow(aiorest_client):
    app = App()
    app.get("/notes")(whoami)
    app.post("/notes")(whoami)
    app.delete("/notes/{id:int}")(params)
    client = await aiorest_client(app)
    async with client.options("/notes") as response:
        assert response.status == 204
        assert response.headers["Allow"] == "GET, HEAD, OPTIONS, POST"
        assert await response.read() == b""
    async with client.options("/notes/3") as response:
        assert response.status == 204
        assert response.headers["Allow"] == "DELETE, OPTIONS"
    async with client.options("/missing") as response:
        assert response.status == 404


async def test_an_options_handler_replaces_the_automatic_answer(aiorest_client):
    app = App()
    app.get("/cors")(whoami)

    @app.route("/cors", methods=["OPTIONS"])
    async def preflight(request: Request) -> dict[str, str]:
        return {"preflight": "yes"}

    client = await aiorest_client(app)
    async with client.options("/cors") as response:
        assert response.status == 200
        assert await response.json() == {"preflight": "yes"}


# -- middleware of a route and of a group --------------------------------------------------


def _tagging(tag: str):  # type: ignore[no-untyped-def]
    """A middleware that records, in order, that it ran, in the request's state and a header."""

    async def middleware(request: Request, handler):  # type: ignore[no-untyped-def]
        request.state.seen = [*getattr(request.state, "seen", []), tag]
        try:
            response = await handler(request)
        except HTTPError as exc:  # answered outside the middleware: the header goes on the error
            exc.headers = {**(exc.headers or {}), "X-Seen": ",".join(request.state.seen)}
            raise
        response.headers["X-Seen"] = ",".join(request.state.seen)
        return response

    middleware.__qualname__ = f"tag_{tag}"
    return middleware


async def seen(request: Request) -> dict[str, object]:
    return {"seen": request.state.seen}


async def test_route_middleware_runs_inside_the_apps_for_that_route_only(aiorest_client):
    app = App(middleware=[_tagging("app")])
    app.add_route("GET", "/with", seen, middleware=[_tagging("route1"), _tagging("route2")])

    @app.get("/without")
    async def without(request: Request) -> dict[str, object]:
        return {"seen": request.state.seen}

    client = await aiorest_client(app)
    async with client.get("/with") as response:
        assert await response.json() == {"seen": ["app", "route1", "route2"]}
    async with client.get("/without") as response:
        assert await response.json() == {"seen": ["app"]}
    async with client.get("/missing") as response:  # a 404 reaches no route: only the app's ran
        assert response.status == 404 and response.headers["X-Seen"] == "app"


async def test_router_middleware_wraps_each_route_outer_router_first(aiorest_client):
    inner = Router(middleware=[_tagging("inner")])
    inner.add_route("GET", "/{id:int}", seen, middleware=[_tagging("route")])
    outer = Router(middleware=[_tagging("outer")])
    outer.include(inner, "/items")
    app = App()
    app.include(outer, "/v1")
    app.add_route("GET", "/plain", whoami)
    client = await aiorest_client(app)
    async with client.get("/v1/items/7") as response:
        assert await response.json() == {"seen": ["outer", "inner", "route"]}
    async with client.get("/plain") as response:
        assert "X-Seen" not in response.headers


async def test_a_decorator_puts_middleware_on_the_handler_for_each_of_its_routes(aiorest_client):
    def audited(handler):  # type: ignore[no-untyped-def]
        handler.__aiorest_middleware__ = [_tagging("decorator")]
        return handler

    app = App()

    @app.route("/a", ["GET", "POST"], middleware=[_tagging("route")])
    @audited
    async def a(request: Request) -> dict[str, object]:
        return {"seen": request.state.seen}

    router = Router(middleware=[_tagging("router")])
    router.add_route("GET", "/b", audited(seen))
    app.include(router, "/r")
    client = await aiorest_client(app)
    for method in ("GET", "POST"):
        async with client.request(method, "/a") as response:
            assert await response.json() == {"seen": ["route", "decorator"]}
    async with client.get("/r/b") as response:  # copied by include: the decorator's middleware once
        assert await response.json() == {"seen": ["router", "decorator"]}


async def test_route_middleware_sees_a_typed_handlers_response_and_its_errors(aiorest_client):
    app = App()

    @app.get("/typed/{n:int}", middleware=[_tagging("route")])
    async def typed(n: int, limit: int = 5) -> dict[str, int]:
        return {"n": n, "limit": limit}

    client = await aiorest_client(app)
    async with client.get("/typed/3?limit=9") as response:
        assert await response.json() == {"n": 3, "limit": 9} and response.headers["X-Seen"] == "route"
    async with client.get("/typed/3?limit=x") as response:  # the 422 is a response the middleware sees
        assert response.status == 422 and response.headers["X-Seen"] == "route"


def test_middleware_that_is_not_a_list_of_callables_is_refused_naming_the_route():
    with pytest.raises(TypeError, match=r"route GET /x: middleware must be a list"):
        App().add_route("GET", "/x", whoami, middleware=_tagging("one"))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"route GET /x: middleware 'nope' is not callable"):
        App().add_route("GET", "/x", whoami, middleware=["nope"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"Router: middleware must be a list"):
        Router(middleware=_tagging("one"))  # type: ignore[arg-type]

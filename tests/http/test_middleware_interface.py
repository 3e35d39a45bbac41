"""What middleware uses of a request, a response and headers: public methods, no private field."""

from __future__ import annotations

import json

import pytest

from aiorest import App, Headers, HTTPBadRequest, JSONResponse, Request, Response
from aiorest.http.jsonbody import bad_body
from tests.rawclient import fetch


async def test_header_and_header_values_read_the_raw_lines_in_any_case(aiorest_client):
    app = App()

    @app.get("/h")
    async def h(request: Request) -> dict[str, object]:
        return {
            "first": request.header(b"x-thing"),
            "by_str": request.header("X-Thing"),
            "upper_bytes": request.header(b"X-THING"),
            "all": request.header_values("x-thing"),
            "absent": request.header(b"x-absent"),
            "none": request.header_values(b"x-absent"),
            "raw": [[n.decode(), v.decode()] for n, v in request.raw_headers if n.lower() == b"x-thing"],
        }

    client = await aiorest_client(app)
    (response,) = await fetch(
        client.port, b"GET /h HTTP/1.1\r\nHost: t\r\nX-Thing: one\r\nx-thing: two\r\nX-Other: \xe9\r\n\r\n"
    )
    assert json.loads(response.body) == {
        "first": "one",
        "by_str": "one",
        "upper_bytes": "one",
        "all": ["one", "two"],
        "absent": None,
        "none": [],
        "raw": [["X-Thing", "one"], ["x-thing", "two"]],
    }


async def test_replace_body_reads_as_if_sent_plain(aiorest_client):
    async def rot13(request: Request, handler):
        body = await request.read()
        request.replace_body(body.upper(), drop=("X-Transform",))
        return await handler(request)

    app = App(middleware=[rot13])

    @app.post("/echo")
    async def echo(request: Request) -> dict[str, object]:
        return {
            "body": (await request.read()).decode(),
            "streamed": b"".join([chunk async for chunk in request.stream()]).decode(),
            "length": request.headers.getall("content-length"),
            "transform": request.header("x-transform"),
        }

    client = await aiorest_client(app)
    async with client.post("/echo", data=b"abc", headers={"X-Transform": "upper"}) as response:
        assert await response.json() == {"body": "ABC", "streamed": "ABC", "length": ["3"], "transform": None}


async def test_attach_session_is_false_once_another_middleware_attached_one(aiorest_client):
    outcomes: list[bool] = []

    def opener(request: Request) -> dict[str, object]:
        return {"opened": True}

    async def attach(request: Request, handler):
        outcomes.append(request.attach_session(opener))
        return await handler(request)

    app = App(middleware=[attach, attach])

    @app.get("/s")
    async def s(request: Request) -> dict[str, object]:
        before = request.opened_session
        return {"before": before, "session": dict(request.session), "after": request.opened_session}

    client = await aiorest_client(app)
    async with client.get("/s") as response:
        assert await response.json() == {"before": None, "session": {"opened": True}, "after": {"opened": True}}
    assert outcomes == [True, False]


async def test_match_names_the_template_the_allowed_methods_or_the_error(aiorest_client):
    seen: list[tuple[object, ...]] = []

    async def record(request: Request, handler):
        try:
            return await handler(request)
        finally:
            match = request.match
            assert match is not None
            seen.append((match.template, sorted(match.allow), None if match.error is None else match.error.status))

    app = App(middleware=[record])

    @app.get("/notes/{note_id:int}")
    async def note(request: Request) -> None:
        return None

    client = await aiorest_client(app)
    for method, path in [("GET", "/notes/1"), ("GET", "/notes/2"), ("OPTIONS", "/notes/1"), ("POST", "/notes/1")]:
        async with client.request(method, path):
            pass
    async with client.get("/nowhere"):
        pass
    assert seen == [
        ("/notes/{note_id:int}", [], None),
        ("/notes/{note_id:int}", [], None),
        (None, ["GET", "HEAD", "OPTIONS"], None),
        (None, [], 405),
        (None, [], 404),
    ]


@pytest.mark.parametrize(
    ("content_type", "body", "kwargs", "status", "details"),
    [
        ("application/json", b"[1]", {}, 200, None),
        ("application/problem+json", b"[1]", {}, 200, None),
        ("", b"[1]", {}, 200, None),
        ("", b"[1]", {"strict_content_type": True}, 415, None),
        ("text/plain", b"", {"required": False}, 200, None),
        ("text/plain", b"[1]", {"locate": True}, 415, "header.content-type"),
        ("application/json", b"", {"locate": True}, 400, "body"),
        ("application/json", b"", {"required": False}, 200, None),
    ],
)
async def test_json_body_checks_the_type_and_emptiness_as_json_and_typed_handlers_do(
    aiorest_client, content_type, body, kwargs, status, details
):
    app = App()

    @app.post("/b")
    async def b(request: Request) -> dict[str, object]:
        return {"body": (await request.json_body(**kwargs)).decode()}

    client = await aiorest_client(app)
    typed = b"Content-Type: %s\r\n" % content_type.encode() if content_type else b""
    (response,) = await fetch(
        client.port, b"POST /b HTTP/1.1\r\nHost: t\r\n%sContent-Length: %d\r\n\r\n%s" % (typed, len(body), body)
    )
    assert response.status == status
    answer = json.loads(response.body)
    if status == 200:
        assert answer == {"body": body.decode()}
    else:
        got = answer["error"]["details"]
        assert (got if got is None else got[0]["location"]) == details


def test_headers_copy_discard_and_extend():
    headers = Headers([("Vary", "Origin"), ("X-A", "1"), ("x-a", "2")])
    copy = headers.copy()
    copy.discard(["X-A", "not-there"])
    assert headers.getall("x-a") == ["1", "2"] and "x-a" not in copy
    copy.extend(Headers({"X-B": "3"}))
    assert copy.items() == [("Vary", "Origin"), ("X-B", "3")]
    assert headers.items() == [("Vary", "Origin"), ("X-A", "1"), ("x-a", "2")]
    assert Headers.from_raw([(b"X-Raw", b"\xe9")]).items() == [("X-Raw", "\xe9")]


def test_headers_get_and_the_field_lines_a_head_writes():
    headers = Headers([("Vary", "Origin"), ("X-A", "1"), ("x-a", "2"), ("Content-Type", "text/csv")])
    assert headers.get("X-a") == "1" and headers.get("nope") is None and headers.get("nope", "d") == "d"
    assert headers.field_lines() == "Vary: Origin\r\nX-A: 1\r\nx-a: 2\r\nContent-Type: text/csv\r\n"
    assert headers.field_lines(frozenset({"x-a", "content-type"})) == "Vary: Origin\r\n"
    assert Headers().field_lines() == ""


def test_json_response_plain_answer_only_for_a_200_of_a_dict_or_list_without_the_servers_fields():
    assert JSONResponse({"a": 1}).plain_answer() == ({"a": 1}, b"")
    assert JSONResponse([1], headers={"Vary": "Origin"}).plain_answer() == ([1], b"Vary: Origin\r\n")
    assert JSONResponse({"a": 1}, status=201).plain_answer() is None
    assert JSONResponse("text").plain_answer() is None
    for name in ("ETag", "Last-Modified", "Content-Type", "X-Request-ID"):
        value = {"ETag": '"1"', "Last-Modified": "Wed, 21 Oct 2015 07:28:00 GMT"}.get(name, "x")
        assert JSONResponse({"a": 1}, headers={"Vary": "Origin", name: value}).plain_answer() is None, name


def test_response_header_and_with_body():
    response = JSONResponse({"a": 1}, status=201, headers={"X-A": "1"})
    assert response.header("x-a") == "1" and response.header("x-b") is None
    assert Response().header("x-a") is None
    plain = response.with_body(b"{}")
    assert type(plain) is Response
    assert (plain.status, plain.media_type, plain.body, plain.headers.items()) == (
        201,
        "application/json",
        b"{}",
        [("X-A", "1")],
    )
    same = Response(b"x")
    assert same.with_body(b"y") is same and same.body == b"y"


def test_bad_body_names_its_location_only_when_asked():
    assert HTTPBadRequest("x").details is None
    assert bad_body("nope").to_dict()["error"]["details"] == [{"location": "body", "message": "nope"}]
    assert bad_body("nope", locate=False).details is None

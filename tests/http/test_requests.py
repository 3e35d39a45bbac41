"""What a handler sees of a request: head, query, headers, cookies, body, client, state."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import struct

import pytest
from multidict import CIMultiDict
from yarl import URL

from aiorest import App, ClientDisconnected, Request
from tests.rawclient import fetch, get, read_response
from tests.rawhttp import exchange


def raw_url(client, path: str) -> URL:
    """An absolute URL that aiohttp sends exactly as written (no re-quoting)."""
    return URL(client.url + path, encoded=True)


async def test_method_path_and_raw_path(aiorest_client):
    app = App()

    @app.route("/inspect/{item}", methods=["GET", "PATCH"])
    async def inspect(request: Request) -> dict[str, object]:
        return {
            "method": request.method,
            "path": request.path,
            "raw_path": request.raw_path.decode(),
            "query_string": request.query_string,
            "item": request.path_params["item"],
            "http_version": request.http_version,
        }

    client = await aiorest_client(app)
    async with client.patch(raw_url(client, "/inspect/a%20b%C3%A9?x=1")) as response:
        assert await response.json() == {
            "method": "PATCH",
            "path": "/inspect/a bé",
            "raw_path": "/inspect/a%20b%C3%A9",
            "query_string": "x=1",
            "item": "a bé",
            "http_version": "1.1",
        }


async def test_an_encoded_slash_is_a_slash_that_str_does_not_match(aiorest_client):
    app = App()

    @app.get("/one/{name}")
    async def one(request: Request) -> dict[str, str]:
        return {"name": request.path_params["name"]}

    client = await aiorest_client(app)
    async with client.get(raw_url(client, "/one/a%2Fb")) as response:
        assert response.status == 404


async def test_query_is_multi_valued_and_percent_decoded(aiorest_client):
    app = App()

    @app.get("/q")
    async def query(request: Request) -> dict[str, object]:
        q = request.query
        return {
            "first_tag": q["tag"],
            "tags": q.getall("tag"),
            "plus": q["plus"],
            "encoded": q["encoded"],
            "empty": q["empty"],
            "bare": q["bare"],
            "missing": q.get("missing"),
            "items": q.multi_items(),
        }

    client = await aiorest_client(app)
    target = "/q?tag=x&tag=y&plus=a+b&encoded=%C3%A9%26%3D&empty=&bare&tag=z"
    async with client.get(raw_url(client, target)) as response:
        body = await response.json()
    assert body["first_tag"] == "x"
    assert body["tags"] == ["x", "y", "z"]
    assert body["plus"] == "a b"
    assert body["encoded"] == "é&="
    assert body["empty"] == "" and body["bare"] == ""
    assert body["missing"] is None
    assert [key for key, _ in body["items"]] == ["tag", "tag", "plus", "encoded", "empty", "bare", "tag"]


async def test_headers_are_case_insensitive_and_multi_valued(aiorest_client):
    app = App()

    @app.get("/h")
    async def headers(request: Request) -> dict[str, object]:
        h = request.headers
        return {
            "first": h["X-MULTI"],
            "all": h.getall("x-Multi"),
            "contains": "x-multi" in h,
            "absent": h.get("x-absent", "default"),
            "pairs": [pair for pair in h.items() if pair[0].lower() == "x-multi"],
        }

    client = await aiorest_client(app)
    # Same spelling each time: aiohttp replaces a header whose name differs only in case.
    sent = CIMultiDict([("X-Multi", "one"), ("X-Multi", "two, three"), ("X-Multi", "four")])
    async with client.get("/h", headers=sent) as response:
        assert await response.json() == {
            "first": "one",
            "all": ["one", "two, three", "four"],
            "contains": True,
            "absent": "default",
            "pairs": [["X-Multi", "one"], ["X-Multi", "two, three"], ["X-Multi", "four"]],
        }


async def test_header_names_differing_in_case_are_one_header(aiorest_client):
    app = App()

    @app.get("/h")
    async def headers(request: Request) -> dict[str, object]:
        return {"all": request.headers.getall("x-multi"), "names": list(request.headers)}

    client = await aiorest_client(app)
    [response] = await fetch(client.port, b"GET /h HTTP/1.1\r\nHost: t\r\nX-Multi: 1\r\nx-MULTI: 2\r\n\r\n")
    assert json.loads(response.body) == {"all": ["1", "2"], "names": ["host", "x-multi"]}


async def test_missing_header_is_key_error(aiorest_client):
    app = App()

    @app.get("/h")
    async def headers(request: Request) -> dict[str, bool]:
        try:
            request.headers["x-nope"]
        except KeyError:
            return {"key_error": True}
        return {"key_error": False}

    client = await aiorest_client(app)
    async with client.get("/h") as response:
        assert await response.json() == {"key_error": True}


async def test_cookies_merge_every_cookie_header_first_value_wins(aiorest_client):
    app = App()

    @app.get("/c")
    async def cookies(request: Request) -> dict[str, str]:
        return request.cookies

    client = await aiorest_client(app)
    reader, writer = await asyncio.open_connection("127.0.0.1", client.port)
    try:
        writer.write(
            b"GET /c HTTP/1.1\r\nHost: t\r\n"
            b'Cookie: session=abc; quoted="a b"; novalue; theme=dark\r\n'
            b"Cookie: session=second; lang=fr\r\n\r\n"
        )
        response = await read_response(reader)
    finally:
        writer.close()
    assert response.status == 200
    assert json.loads(response.body) == {"session": "abc", "quoted": "a b", "theme": "dark", "lang": "fr"}


async def test_a_cookie_line_sent_again_is_parsed_afresh_for_each_request_s_own_dict(aiorest_client):
    app = App()

    @app.get("/c")
    async def cookies(request: Request) -> dict[str, str]:
        seen = dict(request.cookies)
        request.cookies["touched"] = "yes"  # a handler's change stays in its own request
        return seen

    client = await aiorest_client(app)
    for _ in range(3):
        async with client.get("/c", headers={"Cookie": "session=abc; theme=dark"}) as response:
            assert await response.json() == {"session": "abc", "theme": "dark"}


async def test_cookies_sent_by_aiohttp(aiorest_client):
    app = App()

    @app.get("/c")
    async def cookies(request: Request) -> dict[str, str]:
        return request.cookies

    client = await aiorest_client(app)
    async with client.get("/c", cookies={"token": "t0k3n"}) as response:
        assert await response.json() == {"token": "t0k3n"}


async def test_path_invalid_utf8_after_percent_decoding_is_400(aiorest_client):
    app = App()
    calls = []

    @app.get("/x/{name}")
    async def handler(request: Request) -> None:
        calls.append(request.path)

    client = await aiorest_client(app)
    async with client.get(raw_url(client, "/x/%ff")) as response:
        assert response.status == 400
        assert (await response.json())["error"]["status"] == 400
    assert calls == []


# -- body ------------------------------------------------------------------------------------


@pytest.fixture
def body_app() -> App:
    app = App()

    @app.post("/json")
    async def json_body(request: Request) -> dict[str, object]:
        return {"received": await request.json()}

    @app.post("/text")
    async def text_body(request: Request) -> dict[str, str]:
        return {"text": await request.text()}

    @app.post("/read-twice")
    async def read_twice(request: Request) -> dict[str, object]:
        first = await request.read()
        second = await request.read()
        return {"same": first == second, "length": len(first), "sample": first[:5].decode()}

    @app.post("/stream")
    async def stream(request: Request) -> dict[str, object]:
        chunks = [chunk async for chunk in request.stream()]
        body = b"".join(chunks)
        return {
            "chunks": len(chunks),
            "length": len(body),
            "ok": body == b"".join(bytes([65 + i % 26]) * 1000 for i in range(50)),
            "transfer_encoding": request.headers.get("transfer-encoding"),
        }

    @app.post("/read-then-stream")
    async def read_then_stream(request: Request) -> dict[str, object]:
        body = await request.read()
        streamed = [chunk async for chunk in request.stream()]
        return {"same": streamed == [body]}

    @app.post("/stream-then-read")
    async def stream_then_read(request: Request) -> dict[str, object]:
        async for _ in request.stream():
            pass
        try:
            await request.read()
        except RuntimeError as exc:
            return {"refused": str(exc)}
        return {"refused": None}

    return app


async def test_json_body_is_parsed(aiorest_client, body_app):
    client = await aiorest_client(body_app)
    async with client.post("/json", json={"a": [1, 2.5, None, "é"]}) as response:
        assert await response.json() == {"received": {"a": [1, 2.5, None, "é"]}}


@pytest.mark.parametrize(
    "content_type", ["application/json; charset=utf-8", "APPLICATION/JSON", "application/problem+json"]
)
async def test_json_accepts_json_media_types(aiorest_client, body_app, content_type):
    client = await aiorest_client(body_app)
    async with client.post("/json", data=b"[1, 2]", headers={"Content-Type": content_type}) as response:
        assert response.status == 200
        assert await response.json() == {"received": [1, 2]}


async def test_json_with_no_content_type_header_at_all(aiorest_client, body_app):
    client = await aiorest_client(body_app)
    [response] = await fetch(client.port, b"POST /json HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\n\r\ntrue")
    assert response.status == 200
    assert response.body == b'{"received":true}'


@pytest.mark.parametrize(
    ("data", "status"),
    [
        (b"{not json", 400),
        (b'{"a": 1', 400),
        (b'"\xff\xfe"', 400),
        (b"", 400),
    ],
    ids=["invalid-json", "truncated", "invalid-utf8", "empty"],
)
async def test_bad_json_body_is_400_with_an_error_body(aiorest_client, body_app, data, status):
    client = await aiorest_client(body_app)
    async with client.post("/json", data=data, headers={"Content-Type": "application/json"}) as response:
        assert response.status == status
        body = await response.json()
    assert body["error"]["status"] == status
    assert isinstance(body["error"]["message"], str)
    assert set(body["error"]) == {"status", "message", "details"}


def post(path: str, body: bytes, *headers: str) -> bytes:
    """A POST request on HTTP/1.1 with a Content-Length body, with extra header lines."""
    extra = "".join(f"{header}\r\n" for header in headers)
    return f"POST {path} HTTP/1.1\r\nHost: t\r\n{extra}Content-Length: {len(body)}\r\n\r\n".encode() + body


def echo_app(codec: str) -> App:
    app = App(json=codec)

    @app.post("/echo")
    async def echo(request: Request) -> dict[str, object]:
        return {"received": await request.json()}

    return app


CODECS = ["ujson", "orjson", "json"]


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize(
    "data",
    [
        b"1e999",
        b'{"a": [-1E+400]}',
        b"1e0400",
        b"[" + b"9" * 310 + b".5]",
        b"NaN",
        b'{"a": Infinity}',
        b"[-Infinity]",
        b'"\\ud800"',
        b'"\\udc00"',
        b'"\\uD800 and then"',
        b'"\\ud800\\u0041"',
        b'{"\\ud83d": 1}',
    ],
    ids=[
        "overflow",
        "overflow-upper-plus",
        "overflow-zero-padded",
        "overflow-mantissa",
        "nan",
        "infinity",
        "minus-infinity",
        "lone-high",
        "lone-low",
        "high-then-text",
        "high-then-not-low",
        "lone-high-key",
    ],
)
async def test_json_no_codec_could_send_back_is_400(aiorest_client, codec, data):
    # Before the check, ujson and json handed these to the handler, whose echo was a 500.
    client = await aiorest_client(echo_app(codec))
    [response] = await fetch(client.port, post("/echo", data, "Content-Type: application/json"))
    assert response.status == 400
    error = json.loads(response.body)["error"]
    assert error["status"] == 400 and error["details"] is None
    assert error["message"].startswith("request body is not valid JSON: ")


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize(
    ("data", "value"),
    [
        (b'"\\ud83d\\ude00"', "😀"),
        (b'{"\\uD83D\\uDE00": "\\udbff\\udfff"}', {"😀": "\U0010ffff"}),
        (b'["NaN", "Infinity", "\\\\ud800", "e999"]', ["NaN", "Infinity", "\\ud800", "e999"]),
        (b"[1e308, -1.5E+300, 1e-999, 0.0e0999]", [1e308, -1.5e300, 0.0, 0.0]),
        (b"[" + b"9" * 200 + b".5e99]", [float("9" * 200 + ".5e99")]),
    ],
    ids=["surrogate-pair", "pairs-upper-case", "lookalikes-in-strings", "finite-exponents", "long-finite-mantissa"],
)
async def test_json_that_only_looks_unsendable_is_accepted(aiorest_client, codec, data, value):
    client = await aiorest_client(echo_app(codec))
    [response] = await fetch(client.port, post("/echo", data))
    assert response.status == 200
    assert json.loads(response.body) == {"received": value}


@pytest.mark.parametrize("codec", CODECS)
async def test_json_nested_past_the_codecs_depth_is_400(aiorest_client, codec):
    # The standard library raised RecursionError here, which was a 500.
    client = await aiorest_client(echo_app(codec))
    data = b"[" * 5000 + b"]" * 5000
    [response] = await fetch(client.port, post("/echo", data))
    assert response.status == 400
    assert json.loads(response.body)["error"]["message"].startswith("request body is not valid JSON: ")


async def test_json_with_another_content_type_is_415(aiorest_client, body_app):
    client = await aiorest_client(body_app)
    async with client.post("/json", data=b'{"a": 1}', headers={"Content-Type": "text/plain"}) as response:
        assert response.status == 415
        assert (await response.json())["error"]["status"] == 415


async def test_read_twice_returns_the_same_bytes(aiorest_client, body_app):
    client = await aiorest_client(body_app)
    payload = b"hello" + b"x" * 100_000
    async with client.post("/read-twice", data=payload) as response:
        assert await response.json() == {"same": True, "length": len(payload), "sample": "hello"}


async def test_stream_yields_a_chunked_upload(aiorest_client, body_app):
    async def upload():
        for i in range(50):
            yield bytes([65 + i % 26]) * 1000
            await asyncio.sleep(0)

    client = await aiorest_client(body_app)
    async with client.post("/stream", data=upload()) as response:
        body = await response.json()
    assert body["transfer_encoding"] == "chunked"
    assert body["length"] == 50_000
    assert body["ok"] is True
    assert body["chunks"] >= 1


async def test_stream_after_read_yields_the_kept_body(aiorest_client, body_app):
    client = await aiorest_client(body_app)
    async with client.post("/read-then-stream", data=b"kept") as response:
        assert await response.json() == {"same": True}


async def test_read_after_stream_is_refused(aiorest_client, body_app):
    client = await aiorest_client(body_app)
    async with client.post("/stream-then-read", data=b"gone") as response:
        assert await response.json() == {"refused": "the request body was already streamed"}


async def test_text_decodes_utf8(aiorest_client, body_app):
    client = await aiorest_client(body_app)
    async with client.post("/text", data="héllo wörld".encode()) as response:
        assert await response.json() == {"text": "héllo wörld"}


async def test_text_with_invalid_utf8_is_400(aiorest_client, body_app):
    client = await aiorest_client(body_app)
    async with client.post("/text", data=b"caf\xe9") as response:
        assert response.status == 400
        assert (await response.json())["error"]["status"] == 400


async def test_empty_body_reads_as_empty_bytes(aiorest_client):
    app = App()

    @app.post("/empty")
    async def empty(request: Request) -> dict[str, object]:
        return {"body": (await request.read()).decode(), "text": await request.text()}

    client = await aiorest_client(app)
    async with client.post("/empty") as response:
        assert await response.json() == {"body": "", "text": ""}


# -- client, app, state, url_for ----------------------------------------------------------------


async def test_client_is_the_peer_host_and_port(aiorest_client):
    app = App()

    @app.get("/client")
    async def client_address(request: Request) -> dict[str, object]:
        return {"client": list(request.client)}

    client = await aiorest_client(app)
    reader, writer = await asyncio.open_connection("127.0.0.1", client.port)
    try:
        local_host, local_port = writer.get_extra_info("sockname")[:2]
        writer.write(b"GET /client HTTP/1.1\r\nHost: t\r\n\r\n")
        response = await read_response(reader)
    finally:
        writer.close()
    assert json.loads(response.body) == {"client": [local_host, local_port]}


async def test_client_is_none_once_the_client_has_gone(aiorest_client):
    app = App()
    started = asyncio.Event()
    seen: list[object] = []

    @app.get("/wait")
    async def wait(request: Request) -> None:
        seen.append(request.client)
        started.set()
        for _ in range(500):
            if request.client is None:
                break
            await asyncio.sleep(0.01)
        seen.append(request.client)

    client = await aiorest_client(app)
    reader, writer = await asyncio.open_connection("127.0.0.1", client.port)
    writer.write(get("/wait"))
    async with asyncio.timeout(5):
        await started.wait()
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.close()  # with a zero linger time: a reset, the client is really gone
    async with asyncio.timeout(5):
        while len(seen) < 2:
            await asyncio.sleep(0.01)
    assert isinstance(seen[0], tuple) and seen[1] is None


async def test_body_cut_short_by_the_client_raises_client_disconnected(aiorest_client, caplog):
    app = App()
    outcome: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    @app.post("/upload")
    async def upload(request: Request) -> None:
        try:
            await request.read()
        except ClientDisconnected:
            outcome.set_result("disconnected")
            raise
        outcome.set_result("complete")

    client = await aiorest_client(app)
    reader, writer = await asyncio.open_connection("127.0.0.1", client.port)
    writer.write(b"POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n0123456789")
    await writer.drain()
    await asyncio.sleep(0.05)  # let the handler start waiting for the rest
    writer.close()
    async with asyncio.timeout(5):
        assert await outcome == "disconnected"
    await asyncio.sleep(0.05)
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []


async def test_request_app_is_the_serving_app(aiorest_client):
    app = App()
    app.state.greeting = "hi"

    @app.get("/app")
    async def handler(request: Request) -> dict[str, object]:
        return {"same": request.app is app, "greeting": request.app.state.greeting}

    client = await aiorest_client(app)
    async with client.get("/app") as response:
        assert await response.json() == {"same": True, "greeting": "hi"}


async def test_request_state_is_per_request(aiorest_client):
    app = App()

    @app.get("/state")
    async def handler(request: Request) -> dict[str, object]:
        had = "visits" in request.state
        request.state.visits = request.state.get("visits", 0) + 1
        request.state["other"] = "x"
        return {"had": had, "visits": request.state.visits, "other": request.state.other}

    client = await aiorest_client(app)
    for _ in range(3):  # the same kept-alive connection each time
        async with client.get("/state") as response:
            assert await response.json() == {"had": False, "visits": 1, "other": "x"}


async def test_request_url_for_builds_paths(aiorest_client):
    app = App()

    @app.get("/notes/{note_id:int}", name="note")
    async def note(request: Request) -> dict[str, str]:
        return {"self": request.url_for("note", note_id=request.path_params["note_id"] + 1)}

    client = await aiorest_client(app)
    async with client.get("/notes/41") as response:
        assert await response.json() == {"self": "/notes/42"}


async def test_http_10_request_version(aiorest_client):
    app = App()

    @app.get("/v")
    async def version(request: Request) -> dict[str, str]:
        return {"version": request.http_version}

    client = await aiorest_client(app)
    (response,), closed = await exchange(client.port, b"GET /v HTTP/1.0\r\n\r\n")
    assert response.body == b'{"version":"1.0"}'
    assert closed


async def test_absolute_form_target_is_reduced_to_path_and_query(aiorest_client):
    app = App()

    @app.get("/a")
    async def handler(request: Request) -> dict[str, str]:
        return {"path": request.path, "raw": request.raw_path.decode(), "query": request.query_string}

    client = await aiorest_client(app)
    [response] = await fetch(client.port, b"GET http://example.com/a?b=1 HTTP/1.1\r\nHost: example.com\r\n\r\n")
    assert response.body == b'{"path":"/a","raw":"/a","query":"b=1"}'


async def test_route_template_is_the_matched_routes_template_not_the_raw_path(aiorest_client):
    app = App()
    seen: list[str | None] = []

    async def record(request: Request, handler):
        try:
            return await handler(request)
        finally:
            seen.append(request.route_template)

    app.add_middleware(record)

    @app.get("/static")
    async def static(request: Request) -> dict[str, object]:
        return {"template": request.route_template}

    @app.get("/notes/{note_id:int}")
    async def note(request: Request) -> dict[str, object]:
        return {"template": request.route_template}

    client = await aiorest_client(app)
    async with client.get("/static") as response:
        assert await response.json() == {"template": "/static"}
    async with client.get("/notes/42") as response:
        assert await response.json() == {"template": "/notes/{note_id:int}"}
    async with client.get("/nowhere/42") as response:
        assert response.status == 404
    async with client.post("/static") as response:
        assert response.status == 405
    assert seen == ["/static", "/notes/{note_id:int}", None, "/static"]

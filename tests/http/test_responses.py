"""What handlers return, as it goes on the wire: JSON, text, bytes, cookies, streams, lengths, codecs."""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import socket
from http import HTTPStatus

import aiohttp
import pytest

from aiorest import App, Headers, HTTPError, JSONCodec, JSONResponse, Request, Response, Server, StreamResponse
from tests.rawclient import fetch, get
from tests.rawhttp import parse_responses


def app_returning(value: object) -> App:
    app = App()

    @app.get("/")
    async def handler(request: Request) -> object:
        return value() if callable(value) else value

    return app


# -- what a handler returns ----------------------------------------------------------------------


async def test_dict_is_200_json(aiorest_client):
    client = await aiorest_client(app_returning({"a": 1, "b": [True, None]}))
    async with client.get("/") as response:
        assert response.status == 200
        assert response.headers["Content-Type"] == "application/json"
        assert await response.read() == b'{"a":1,"b":[true,null]}'


async def test_list_is_200_json(aiorest_client):
    client = await aiorest_client(app_returning([1, "two", {"three": 3}]))
    async with client.get("/") as response:
        assert response.status == 200
        assert response.headers["Content-Type"] == "application/json"
        assert await response.json() == [1, "two", {"three": 3}]


async def test_none_is_204_without_body_or_content_length(aiorest_client):
    client = await aiorest_client(app_returning(None))
    [response, second] = await fetch(client.port, get("/") + get("/"), count=2)
    assert response.status == 204 and second.status == 204
    assert response.header("content-length") is None
    assert response.header("content-type") is None
    assert response.body == b""


async def test_204_response_never_carries_its_body(aiorest_client):
    client = await aiorest_client(app_returning(lambda: Response(b"ignored", status=204)))
    [first, second] = await fetch(client.port, get("/") + get("/"), count=2)
    assert first.status == 204 and second.status == 204  # no stray bytes between them
    assert first.header("content-length") is None


async def test_str_response_is_utf8_text_plain(aiorest_client):
    client = await aiorest_client(app_returning(lambda: Response("héllo")))
    async with client.get("/") as response:
        assert response.status == 200
        assert response.headers["Content-Type"] == "text/plain; charset=utf-8"
        assert await response.read() == "héllo".encode()
        assert response.headers["Content-Length"] == "6"


async def test_bytes_response_is_octet_stream(aiorest_client):
    client = await aiorest_client(app_returning(lambda: Response(b"\x00\x01\xff")))
    async with client.get("/") as response:
        assert response.headers["Content-Type"] == "application/octet-stream"
        assert await response.read() == b"\x00\x01\xff"


async def test_response_status_headers_and_media_type(aiorest_client):
    def make() -> Response:
        response = Response("<p>hi</p>", status=201, headers={"X-One": "1"}, media_type="text/html")
        response.headers.add("X-Two", "a")
        response.headers.add("X-Two", "b")
        return response

    client = await aiorest_client(app_returning(make))
    [response] = await fetch(client.port, get("/"))
    assert response.status == 201
    assert response.header("content-type") == "text/html; charset=utf-8"
    assert response.header("x-one") == "1"
    assert response.header_all("x-two") == ["a", "b"]
    assert response.body == b"<p>hi</p>"


@pytest.mark.parametrize(
    ("media_type", "sent"),
    [
        ("text/csv; charset=latin-1", "text/csv; charset=latin-1"),
        ("application/xml", "application/xml"),
        ("text/plain", "text/plain; charset=utf-8"),
    ],
)
async def test_media_type_gets_a_charset_only_when_text_without_one(aiorest_client, media_type, sent):
    client = await aiorest_client(app_returning(lambda: Response(b"x", media_type=media_type)))
    async with client.get("/") as response:
        assert response.headers["Content-Type"] == sent


async def test_content_type_header_replaces_media_type(aiorest_client):
    client = await aiorest_client(
        app_returning(lambda: Response(b"{}", headers={"content-type": "application/vnd.x+json"}))
    )
    [response] = await fetch(client.port, get("/"))
    assert response.header_all("content-type") == ["application/vnd.x+json"]


async def test_json_response_with_status_and_headers(aiorest_client):
    client = await aiorest_client(
        app_returning(lambda: JSONResponse({"id": 7}, status=201, headers={"Location": "/notes/7"}))
    )
    async with client.get("/") as response:
        assert response.status == 201
        assert response.headers["Location"] == "/notes/7"
        assert response.headers["Content-Type"] == "application/json"
        assert await response.json() == {"id": 7}


def test_response_body_must_be_bytes_or_str():
    with pytest.raises(TypeError, match="JSONResponse"):
        Response({"a": 1})  # type: ignore[arg-type]


async def test_unsupported_return_type_is_a_generic_500_and_logged(aiorest_client, caplog):
    client = await aiorest_client(app_returning(42))
    async with client.get("/") as response:
        assert response.status == 500
        body = await response.read()
    assert json.loads(body) == {"error": {"status": 500, "message": "Internal Server Error", "details": None}}
    assert b"int" not in body and b"Traceback" not in body
    assert any("int" in str(record.exc_info[1]) for record in caplog.records if record.exc_info)


async def test_connection_stays_usable_after_an_unsupported_return_type(aiorest_client):
    client = await aiorest_client(app_returning(("a", "tuple")))
    [first, second] = await fetch(client.port, get("/") + get("/"), count=2)
    assert first.status == 500 and second.status == 500


# -- cookies --------------------------------------------------------------------------------------


async def test_set_cookie_with_every_attribute(aiorest_client):
    def make() -> Response:
        response = Response(b"")
        response.set_cookie(
            "session",
            "abc123",
            max_age=3600,
            expires=datetime.datetime(2031, 1, 2, 3, 4, 5, tzinfo=datetime.UTC),
            path="/api",
            domain="example.com",
            secure=True,
            httponly=True,
            samesite="strict",
        )
        response.set_cookie("plain", "v", path=None, samesite=None)
        response.set_cookie("ts", "1", expires=0)
        response.set_cookie("spaced", "a b")
        return response

    client = await aiorest_client(app_returning(make))
    [response] = await fetch(client.port, get("/"))
    assert response.header_all("set-cookie") == [
        "session=abc123; Max-Age=3600; Expires=Thu, 02 Jan 2031 03:04:05 GMT; Path=/api; "
        "Domain=example.com; Secure; HttpOnly; SameSite=Strict",
        "plain=v",
        "ts=1; Expires=Thu, 01 Jan 1970 00:00:00 GMT; Path=/; SameSite=Lax",
        'spaced="a b"; Path=/; SameSite=Lax',
    ]


@pytest.mark.parametrize(
    ("expires", "sent"),
    [
        ("Wed, 21 Oct 2037 07:28:00 GMT", "Wed, 21 Oct 2037 07:28:00 GMT"),
        ("Wednesday, 21-Oct-37 07:28:00 GMT", "Wed, 21 Oct 2037 07:28:00 GMT"),
        ("Sunday, 06-Nov-94 08:49:37 GMT", "Sun, 06 Nov 1994 08:49:37 GMT"),
        ("Sun Nov  6 08:49:37 1994", "Sun, 06 Nov 1994 08:49:37 GMT"),
        ("Tue, 30 Jun 2015 23:59:60 GMT", "Tue, 30 Jun 2015 23:59:59 GMT"),
        (datetime.datetime(2037, 10, 21, 9, 28, tzinfo=datetime.timezone(datetime.timedelta(hours=2))), None),
        (2139722880, None),
        (2139722880.5, None),
    ],
    ids=["imf-fixdate", "rfc850", "rfc850-past-century", "asctime", "leap-second", "aware-datetime", "int", "float"],
)
async def test_cookie_expires_is_sent_as_an_imf_fixdate(aiorest_client, expires, sent):
    def make() -> Response:
        response = Response(b"")
        response.set_cookie("a", "1", expires=expires)
        return response

    client = await aiorest_client(app_returning(make))
    [response] = await fetch(client.port, get("/"))
    assert response.status == 200  # a str was a TypeError, a 500
    expected = sent or "Wed, 21 Oct 2037 07:28:00 GMT"
    assert response.header_all("set-cookie") == [f"a=1; Expires={expected}; Path=/; SameSite=Lax"]


@pytest.mark.parametrize(
    "expires",
    [
        "tomorrow",
        "",
        "Wed, 21 Oct 2037 07:28:00 UTC",
        "Wed, 21 Oct 2037 07:28:00 +0000",
        "wed, 21 oct 2037 07:28:00 gmt",
        "Wed, 21 Oct 37 07:28:00 GMT",
        "Wed,  21 Oct 2037 07:28:00 GMT",
        "Thu, 21 Oct 2037 07:28:00 GMT",
        "Wed, 31 Nov 2037 07:28:00 GMT",
        "Wed, 21 Oct 2037 24:00:00 GMT",
        "Wedday, 21-Oct-37 07:28:00 GMT",
        "Wed, \u0662\u0661 Oct 2037 07:28:00 GMT",
        "Wed, 21 Oct 2037 07:28:00 GMT\r\nX-Injected: yes",
        datetime.datetime(2037, 10, 21, 7, 28),
        1e20,
        float("nan"),
    ],
    ids=repr,
)
def test_cookie_expires_that_is_not_a_date_is_refused(expires):
    response = Response(b"")
    with pytest.raises(ValueError, match="expires"):
        response.set_cookie("a", "1", expires=expires)
    assert "set-cookie" not in response.headers


@pytest.mark.parametrize("expires", [True, datetime.date(2037, 10, 21), b"Wed, 21 Oct 2037 07:28:00 GMT"], ids=repr)
def test_cookie_expires_of_another_type_is_refused(expires):
    with pytest.raises(TypeError, match="expires must be"):
        Response(b"").set_cookie("a", "1", expires=expires)


async def test_delete_cookie_expires_it(aiorest_client):
    def make() -> Response:
        response = Response(b"")
        response.delete_cookie("session", path="/api", domain="example.com", secure=True, httponly=True)
        return response

    client = await aiorest_client(app_returning(make))
    [response] = await fetch(client.port, get("/"))
    assert response.header_all("set-cookie") == [
        "session=; Max-Age=0; Expires=Thu, 01 Jan 1970 00:00:00 GMT; Path=/api; "
        "Domain=example.com; Secure; HttpOnly; SameSite=Lax"
    ]


async def test_a_cookie_value_with_semicolons_cannot_add_attributes(aiorest_client):
    value = 'x; Domain=example.com; Max-Age=99999999, "q"'  # user input, stored in a cookie
    app = App()

    @app.get("/set")
    async def set_(request: Request) -> Response:
        response = Response(b"")
        response.set_cookie("s", value)
        return response

    @app.get("/get")
    async def get_(request: Request) -> dict[str, str]:
        return request.cookies

    client = await aiorest_client(app, cookie_jar=aiohttp.CookieJar(unsafe=True))
    [response] = await fetch(client.port, get("/set"))
    [header] = response.header_all("set-cookie")
    # Browsers end the value at the first ";", quotes or not: only aiorest's own attributes follow it.
    assert header.split(";")[1:] == [" Path=/", " SameSite=Lax"]
    async with client.get("/set"):
        pass
    async with client.get("/get") as answer:
        assert await answer.json() == {"s": value}


async def test_cookies_round_trip_through_aiohttp(aiorest_client):
    app = App()

    @app.get("/login")
    async def login(request: Request) -> Response:
        response = Response(b"")
        response.set_cookie("session", "s3cr3t", samesite="lax")
        return response

    @app.get("/me")
    async def me(request: Request) -> dict[str, str]:
        return request.cookies

    client = await aiorest_client(app, cookie_jar=aiohttp.CookieJar(unsafe=True))  # unsafe: an IP address host
    async with client.get("/login") as response:
        assert response.cookies["session"].value == "s3cr3t"
    assert [cookie.key for cookie in client.session.cookie_jar] == ["session"]
    async with client.get("/me") as response:
        assert await response.json() == {"session": "s3cr3t"}


@pytest.mark.parametrize(
    ("key", "value", "options"),
    [
        ("bad name", "v", {}),
        ("k", "a\r\nSet-Cookie: evil=1", {}),
        ("k", "v", {"path": "/; evil"}),
        ("k", "v", {"domain": "x.com\r\nX: y"}),
        ("k", "v", {"samesite": "sometimes"}),
        ("k", "a\x01b", {}),
        ("k", "€", {}),
        ("k", "v", {"path": "/a\x7fb"}),
        ("k", "v", {"domain": "x.com\tevil\x0b"}),
        ("k", "v", {"samesite": "lax\r\nX-Injected: yes"}),
        ("k", "v", {"samesite": 1}),
        ("k", "v", {"max_age": "1\r\nX-Injected: yes"}),
    ],
)
def test_invalid_cookies_are_refused_at_set_time(key, value, options):
    response = Response(b"")
    with pytest.raises(ValueError):
        response.set_cookie(key, value, **options)
    assert "set-cookie" not in response.headers


# -- header injection --------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["a\r\nX-Evil: 1", "a\nb", "a\rb", "a\x00b", "a\x01b", "a\x7fb"])
def test_header_injection_is_refused_when_setting(value):
    with pytest.raises(ValueError, match="not allowed"):
        Response(b"", headers={"X-Test": value})
    response = Response(b"")
    with pytest.raises(ValueError):
        response.headers["X-Test"] = value
    with pytest.raises(ValueError):
        response.headers.add("X-Test", value)
    with pytest.raises(ValueError):
        JSONResponse({}, headers={"X-Test": value})
    assert "X-Test" not in response.headers


def test_header_values_are_latin_1_or_refused_when_setting():
    # The server encodes a head as Latin-1: "€" used to fail only when the response was written.
    with pytest.raises(ValueError, match="Latin-1"):
        Headers({"X-Price": "5 €"})
    assert Headers({"X-Name": "Zoë\tJones"}).get("x-name") == "Zoë\tJones"


INJECTED = "text/plain\r\nX-Injected: yes"
BAD_STATUSES = ["200", "200 OK\r\nX-Injected: yes", True, 99, 100, 103, 199, 600, 200.0, None]


@pytest.mark.parametrize("status", BAD_STATUSES, ids=repr)
def test_status_is_an_int_from_200_to_599_checked_when_set(status):
    # A 1xx is interim: its body would be read as the head of the next response.
    for make in (
        lambda: Response(b"", status=status),
        lambda: JSONResponse({}, status=status),
        lambda: StreamResponse(_chunks(), status=status),
    ):
        with pytest.raises((TypeError, ValueError), match="status must be"):
            make()
    response = Response(b"", status=201)
    with pytest.raises((TypeError, ValueError), match="status must be"):
        response.status = status
    assert response.status == 201


def test_status_may_be_an_http_status_and_is_kept_as_an_int():
    response = Response(b"", status=HTTPStatus.CREATED)
    assert response.status == 201 and type(response.status) is int
    response.status = HTTPStatus.ACCEPTED
    assert response.status == 202 and type(response.status) is int
    assert JSONResponse({}, status=HTTPStatus.NOT_FOUND).status == 404


@pytest.mark.parametrize(
    "media_type", [INJECTED, "text/plain\nX-Injected: yes", "text/plain\x00", "text/\x01plain", "text/€", ""], ids=repr
)
def test_media_type_is_checked_when_set(media_type):
    for _ in range(2):  # a refused type is not cached as a good one
        with pytest.raises(ValueError, match="media type"):
            Response(b"", media_type=media_type)
        with pytest.raises(ValueError, match="media type"):
            StreamResponse(_chunks(), media_type=media_type)
    response = Response(b"", media_type="text/csv")
    with pytest.raises(ValueError, match="media type"):
        response.media_type = media_type
    assert response.media_type == "text/csv; charset=utf-8"
    response.media_type = "text/html"
    assert response.media_type == "text/html; charset=utf-8"


def test_server_header_is_checked_when_set():
    with pytest.raises(ValueError, match="server_header"):
        Server(App(), server_header="aiorest\r\nX-Injected: yes")
    with pytest.raises(ValueError, match="server_header"):
        Server(App(), server_header="aiorest \u20ac")


def _set_status(response: Response, status: object) -> Response:
    response.status = status  # type: ignore[assignment]
    return response


def _set_cookie(response: Response, **options: object) -> Response:
    response.set_cookie("k", "v", **options)  # type: ignore[arg-type]
    return response


@pytest.mark.parametrize(
    "make",
    [
        lambda: Response(b"x", media_type=INJECTED),
        lambda: JSONResponse({}, status="200 OK\r\nX-Injected: yes"),  # type: ignore[arg-type]
        lambda: StreamResponse(_chunks(), media_type=INJECTED),
        lambda: _set_status(Response(b"x"), "200 OK\r\nX-Injected: yes"),
        lambda: _set_cookie(Response(b"x"), samesite="lax\r\nX-Injected: yes"),
        lambda: _set_cookie(Response(b"x"), domain="x.com\r\nX-Injected: yes"),
        lambda: Response(b"x", headers={"X-Ok": "\r\nX-Injected: yes"}),
        lambda: HTTPError("teapot", status=418, headers={"X-Ok": "\r\nX-Injected: yes"}),
    ],
    ids=["media-type", "json-status", "stream-media-type", "status-set", "samesite", "domain", "header", "http-error"],
)
async def test_an_injection_attempt_is_a_500_without_the_extra_header(aiorest_client, caplog, make):
    caplog.set_level(logging.ERROR, logger="aiorest.error")
    client = await aiorest_client(app_returning(make))
    [response, after] = await fetch(client.port, get("/") + get("/"), count=2)
    for answer in (response, after):  # the connection stays in step
        assert answer.status == 500
        assert answer.header("x-injected") is None
        assert answer.header("content-type") == "application/json"
    assert any(isinstance(r.exc_info[1], (TypeError, ValueError)) for r in caplog.records if r.exc_info)


@pytest.mark.parametrize("name", ["Bad Name", "X-\r\nEvil", "", "X:Y"])
def test_invalid_header_names_are_refused(name):
    with pytest.raises(ValueError, match="invalid header name"):
        Headers({name: "v"})


async def _chunks():
    yield b"chunk"


# -- Content-Length ---------------------------------------------------------------------------------


@pytest.fixture
def sized_app() -> App:
    app = App()

    @app.get("/bytes/{size:int}")
    async def sized(request: Request) -> Response:
        size = request.path_params["size"]
        return Response(bytes(i % 251 for i in range(size)))

    @app.get("/text/{count:int}")
    async def text(request: Request) -> Response:
        return Response("é€" * request.path_params["count"])

    @app.get("/lying")
    async def lying(request: Request) -> Response:
        return Response(b"abc", headers={"Content-Length": "99", "Transfer-Encoding": "chunked"})

    return app


@pytest.mark.parametrize("size", [0, 1, 16 * 1024, 16 * 1024 + 1, 1024 * 1024])
async def test_content_length_is_the_body_length(aiorest_client, sized_app, size):
    client = await aiorest_client(sized_app)
    [response, after] = await fetch(client.port, get(f"/bytes/{size}") + get("/bytes/3"), count=2)
    assert response.header_all("content-length") == [str(size)]
    assert response.body == bytes(i % 251 for i in range(size))
    assert after.body == b"\x00\x01\x02"  # the first body ended exactly where its length said


async def test_content_length_counts_encoded_bytes_of_text(aiorest_client, sized_app):
    client = await aiorest_client(sized_app)
    [response, after] = await fetch(client.port, get("/text/10") + get("/bytes/1"), count=2)
    assert response.header("content-length") == str(len(("é€" * 10).encode()))
    assert response.body.decode() == "é€" * 10
    assert after.body == b"\x00"


async def test_framing_headers_from_the_handler_are_ignored(aiorest_client, sized_app):
    client = await aiorest_client(sized_app)
    [response, after] = await fetch(client.port, get("/lying") + get("/bytes/1"), count=2)
    assert response.header_all("content-length") == ["3"]
    assert response.header("transfer-encoding") is None
    assert response.body == b"abc"
    assert after.body == b"\x00"


# -- StreamResponse --------------------------------------------------------------------------------------


async def test_stream_response_is_chunked_and_reassembles(aiorest_client):
    app = App()

    @app.get("/numbers")
    async def numbers(request: Request) -> StreamResponse:
        async def produce():
            for i in range(100):
                yield f"{i}\n"
                if i % 10 == 0:
                    yield b""  # empty chunks are skipped, never a premature terminator
                    await asyncio.sleep(0)

        return StreamResponse(produce(), media_type="text/plain")

    client = await aiorest_client(app)
    async with client.get("/numbers") as response:
        assert response.headers["Transfer-Encoding"] == "chunked"
        assert "Content-Length" not in response.headers
        assert response.headers["Content-Type"] == "text/plain; charset=utf-8"
        assert await response.text() == "".join(f"{i}\n" for i in range(100))
    [raw, after] = await fetch(client.port, get("/numbers") + get("/numbers"), count=2)
    assert raw.body == after.body == "".join(f"{i}\n" for i in range(100)).encode()


async def test_stream_response_is_closed_after_sending(aiorest_client):
    app = App()
    events: list[str] = []

    @app.get("/s")
    async def stream(request: Request) -> StreamResponse:
        async def produce():
            try:
                yield b"one"
                yield b"two"
            finally:
                events.append("closed")

        return StreamResponse(produce())

    client = await aiorest_client(app)
    async with client.get("/s") as response:
        assert await response.read() == b"onetwo"
    assert events == ["closed"]


async def test_stream_response_to_head_is_not_iterated(aiorest_client):
    app = App()
    produced: list[int] = []

    @app.get("/s")
    async def stream(request: Request) -> StreamResponse:
        async def produce():
            produced.append(1)
            yield b"data"

        return StreamResponse(produce())

    client = await aiorest_client(app)
    async with client.head("/s") as response:
        assert response.status == 200
        assert await response.read() == b""
    async with client.get("/s") as response:
        assert await response.read() == b"data"
    assert produced == [1]


async def test_stream_failing_midway_is_logged_and_the_body_left_unterminated(aiorest_client, caplog):
    caplog.set_level(logging.ERROR, logger="aiorest.error")
    app = App()

    @app.get("/s")
    async def stream(request: Request) -> StreamResponse:
        async def produce():
            yield b"partial"
            raise RuntimeError("producer broke")

        return StreamResponse(produce())

    client = await aiorest_client(app)
    async with client.get("/s") as response:
        assert response.status == 200
        with pytest.raises(aiohttp.ClientPayloadError):
            await response.read()
    assert any(isinstance(r.exc_info[1], RuntimeError) for r in caplog.records if r.exc_info)


async def test_client_disconnecting_mid_stream_closes_the_producer(aiorest_client):
    app = App()
    closed = asyncio.Event()

    @app.get("/endless")
    async def endless(request: Request) -> StreamResponse:
        async def produce():
            try:
                while True:
                    yield b"e" * 65536
                    await asyncio.sleep(0)
            finally:
                closed.set()

        return StreamResponse(produce())

    @app.get("/ok")
    async def ok(request: Request) -> dict[str, bool]:
        return {"ok": True}

    client = await aiorest_client(app)
    reader, writer = await asyncio.open_connection("127.0.0.1", client.port)
    writer.write(get("/endless"))
    await reader.readexactly(100_000)
    writer.close()
    async with asyncio.timeout(5):
        await closed.wait()
    [response] = await fetch(client.port, get("/ok"))
    assert response.status == 200


def test_stream_response_needs_an_async_iterable():
    with pytest.raises(TypeError, match="async iterable"):
        StreamResponse([b"a", b"b"])  # type: ignore[arg-type]


async def test_slow_reader_pauses_the_producer_until_it_reads(aiorest_client):
    chunk_size, total = 256 * 1024, 128  # 32 MiB: far more than the socket buffers hold
    produced = 0
    finished = asyncio.Event()
    app = App()

    @app.get("/big")
    async def big(request: Request) -> StreamResponse:
        async def produce():
            nonlocal produced
            try:
                for _ in range(total):
                    produced += 1
                    yield b"z" * chunk_size
            finally:
                finished.set()

        return StreamResponse(produce())

    client = await aiorest_client(app)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", client.port))
    reader, writer = await asyncio.open_connection(sock=sock, limit=64 * 1024)
    try:
        writer.write(get("/big"))
        # Wait for the producer to stall: its count stops moving while nobody reads.
        last = -1
        async with asyncio.timeout(5):
            while produced != last:
                last = produced
                await asyncio.sleep(0.05)
        assert 0 < produced < total // 2
        assert not finished.is_set()
        data = bytearray()
        async with asyncio.timeout(10):
            while not data.endswith(b"\r\n0\r\n\r\n"):
                chunk = await reader.read(1024 * 1024)
                assert chunk, "the server closed the connection"
                data += chunk
            await finished.wait()
    finally:
        writer.close()
    assert produced == total
    (response,), rest = parse_responses(bytes(data))
    assert rest == b""
    assert response.header("transfer-encoding") == "chunked"
    assert len(response.body) == chunk_size * total
    assert response.body.count(b"z") == chunk_size * total


# -- JSON codecs ---------------------------------------------------------------------------------------


async def test_default_ujson_output_escapes_neither_slash_nor_non_ascii_nor_html(aiorest_client):
    client = await aiorest_client(app_returning({"html": "</script><b>&", "text": "é€😀", "url": "a/b"}))
    async with client.get("/") as response:
        body = await response.read()
    assert body == '{"html":"</script><b>&","text":"é€😀","url":"a/b"}'.encode()


async def test_orjson_is_one_setting(aiorest_client):
    app = App(json="orjson")
    assert app.json.name == "orjson"

    @app.get("/")
    async def handler(request: Request) -> dict[str, object]:
        # orjson encodes dates; ujson and json would fail with a 500.
        return {"day": datetime.date(2030, 1, 31), "text": "é/<"}

    @app.post("/echo")
    async def echo(request: Request) -> dict[str, object]:
        return {"got": await request.json()}

    client = await aiorest_client(app)
    async with client.get("/") as response:
        assert response.status == 200
        assert await response.read() == '{"day":"2030-01-31","text":"é/<"}'.encode()
    async with client.post("/echo", json={"a": [1, 2]}) as response:
        assert await response.json() == {"got": {"a": [1, 2]}}
    for bad in (b"{bad", b'"\xff"'):
        async with client.post("/echo", data=bad, headers={"Content-Type": "application/json"}) as response:
            assert response.status == 400


async def test_stdlib_json_codec_is_compact_utf8(aiorest_client):
    app = App(json="json")

    @app.get("/")
    async def handler(request: Request) -> dict[str, object]:
        return {"a": "é/<", "b": [1, 2]}

    client = await aiorest_client(app)
    async with client.get("/") as response:
        assert await response.read() == '{"a":"é/<","b":[1,2]}'.encode()


async def test_custom_codec_encodes_responses_and_errors(aiorest_client):
    codec = JSONCodec("upper", lambda obj: json.dumps(obj).upper().encode(), lambda data: json.loads(data))
    client = await aiorest_client(App(json=codec))
    async with client.get("/missing") as response:
        assert response.status == 404
        assert (await response.read()).startswith(b'{"ERROR": {"STATUS": 404')


def test_unknown_codec_name_is_refused():
    with pytest.raises(ValueError, match="unknown JSON codec"):
        App(json="simplejson-nope")


async def test_value_the_codec_cannot_encode_is_500(aiorest_client, caplog):
    caplog.set_level(logging.ERROR, logger="aiorest.error")
    client = await aiorest_client(app_returning(lambda: JSONResponse({"when": object()})))
    async with client.get("/") as response:
        assert response.status == 500
        assert (await response.json())["error"]["status"] == 500
    assert any("cannot send the response" in record.getMessage() for record in caplog.records)


@pytest.mark.parametrize(("codec", "status"), [("ujson", 500), ("json", 500), ("orjson", 200)])
async def test_a_float_that_is_not_finite_is_never_sent_as_invalid_json(aiorest_client, caplog, codec, status):
    caplog.set_level(logging.ERROR, logger="aiorest.error")
    app = App(json=codec)

    @app.get("/")
    async def handler(request: Request) -> dict[str, object]:
        return {"values": [float("nan"), float("inf"), -float("inf")]}

    client = await aiorest_client(app)
    async with client.get("/") as response:
        assert response.status == status
        body = await response.read()
    json.loads(body, parse_constant=lambda name: pytest.fail(f"{name} on the wire"))
    if status == 200:
        assert body == b'{"values":[null,null,null]}'

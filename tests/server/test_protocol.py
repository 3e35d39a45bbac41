"""The connection state machine, fed bytes directly, with a stand-in transport."""

from __future__ import annotations

import asyncio
import contextvars

import pytest

from aiorest import App, JSONResponse, Limits, Request, Router, StreamResponse
from aiorest.server.protocol import HttpProtocol, ServerState
from tests.rawhttp import RawResponse, parse_responses


class StubTransport:
    """Records what the protocol writes and asks of its transport."""

    def __init__(self) -> None:
        self.data = b""
        self.closed = False
        self.paused = False
        self.pause_count = 0

    def write(self, data: bytes) -> None:
        assert not self.closed, "write after close"
        self.data += bytes(data)

    def writelines(self, chunks) -> None:
        for chunk in chunks:
            self.write(chunk)

    def get_extra_info(self, name: str, default=None):
        return ("127.0.0.1", 50000) if name == "peername" else default

    def pause_reading(self) -> None:
        self.paused = True
        self.pause_count += 1

    def resume_reading(self) -> None:
        self.paused = False

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True


def make_app() -> App:
    app = App()

    @app.get("/json")
    async def json_handler(request: Request) -> dict[str, str]:
        return {"message": "Hello, World!"}

    @app.get("/slow/{ms:int}")
    async def slow(request: Request) -> dict[str, int]:
        await asyncio.sleep(request.path_params["ms"] / 1000)
        return {"slept": request.path_params["ms"]}

    @app.post("/echo")
    async def echo(request: Request) -> dict[str, int]:
        return {"length": len(await request.read())}

    @app.post("/ignore")
    async def ignore(request: Request) -> dict[str, bool]:
        return {"ignored": True}

    @app.get("/gate")
    async def gate(request: Request) -> dict[str, bool]:
        await request.app.state.gate.wait()
        return {"open": True}

    return app


class Connection:
    def __init__(self, app: App, limits: Limits | None = None) -> None:
        self.state = ServerState()
        self.state.refresh()
        self.state.now = 1000.0
        self.state.static_endpoints = app.static_endpoints()  # as the server keeps it, once the app started
        self.transport = StubTransport()
        self.protocol = HttpProtocol(app, self.state, limits or Limits(), asyncio.get_running_loop())
        self.protocol.connection_made(self.transport)  # type: ignore[arg-type]
        self.state.connections.add(self.protocol)

    def feed(self, data: bytes) -> None:
        self.protocol.data_received(data)

    async def responses(self, count: int, head: bool = False) -> list[RawResponse]:
        for _ in range(2000):  # up to 10 s: the task path (stepping.py) takes a loop turn a request
            responses, _ = parse_responses(self.transport.data, head_request=head)
            if len([r for r in responses if r.status != 100]) >= count:
                return responses
            await asyncio.sleep(0.005)
        raise AssertionError(f"expected {count} responses, got {self.transport.data!r}")


async def one_route(method: str, path: str, handler, limits: Limits | None = None) -> Connection:
    """A connection to a started app with one route."""
    app = App()
    app.add_route(method, path, handler)
    await app.startup()
    return Connection(app, limits)


@pytest.fixture
async def app() -> App:
    app = make_app()
    app.state.gate = asyncio.Event()
    await app.startup()
    yield app
    await app.shutdown()


GET_JSON = b"GET /json HTTP/1.1\r\nHost: x\r\n\r\n"


async def test_one_request_one_response_with_length_date_and_server(app):
    conn = Connection(app)
    conn.feed(GET_JSON)
    [response] = await conn.responses(1)
    assert response.status == 200
    assert response.header("server") == "aiorest"
    assert response.header("date").endswith(" GMT")
    assert response.body == b'{"message":"Hello, World!"}'
    assert response.header("content-length") == "27"
    assert response.header("content-type") == "application/json"
    assert not conn.transport.closed


async def test_request_fed_byte_by_byte(app):
    conn = Connection(app)
    for byte in GET_JSON:
        conn.feed(bytes([byte]))
    [response] = await conn.responses(1)
    assert response.status == 200


async def test_pipelined_requests_answered_in_order_even_when_first_is_slower(app):
    conn = Connection(app)
    conn.feed(
        b"GET /slow/30 HTTP/1.1\r\nHost: t\r\n\r\n"
        + GET_JSON
        + b"GET /slow/1 HTTP/1.1\r\nHost: t\r\n\r\n"
        + b"GET /nope HTTP/1.1\r\nHost: t\r\n\r\n"
    )
    responses = await conn.responses(4)
    assert [r.status for r in responses] == [200, 200, 200, 404]
    assert responses[0].body == b'{"slept":30}'
    assert responses[2].body == b'{"slept":1}'


async def test_pipeline_queue_is_bounded_reading_pauses_then_resumes(app):
    conn = Connection(app, Limits(max_pipeline=4))
    conn.feed(b"GET /gate HTTP/1.1\r\nHost: t\r\n\r\n" + GET_JSON * 3)
    await asyncio.sleep(0.01)
    assert conn.transport.paused
    app.state.gate.set()
    responses = await conn.responses(4)
    assert [r.status for r in responses] == [200] * 4
    assert not conn.transport.paused


async def test_a_large_read_is_parsed_in_slices_and_stops_at_the_pipeline_limit(app):
    conn = Connection(app, Limits(max_pipeline=8))
    conn.feed(b"GET /gate HTTP/1.1\r\nHost: t\r\n\r\n" + GET_JSON * 2000)  # one 66 kB read
    await asyncio.sleep(0.01)
    assert len(conn.protocol._conn.queue) < 1000  # not all 2001 were parsed at once
    app.state.gate.set()
    responses = await conn.responses(2001)
    assert len(responses) == 2001 and all(r.status == 200 for r in responses)


@pytest.mark.parametrize(
    "raw",
    [
        b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
        b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\n",
        b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n",
        b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n",
        b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
        b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: -1\r\n\r\n",
        b"GET /json HTTP/1.1\r\nHost: a\r\n b\r\n\r\n",
        b"GET /json HTTP/1.1\nHost: x\n\n",
        b"FOO /json HTTP/1.1\r\nHost: t\r\n\r\n",
        b"GET /js\x00on HTTP/1.1\r\nHost: t\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03garbage",
    ],
    ids=[
        "cl+te",
        "two-cl",
        "te-xchunked",
        "te-chunked-identity",
        "te-space",
        "bad-chunk-size",
        "negative-cl",
        "obs-fold",
        "bare-lf",
        "bad-method",
        "nul-in-url",
        "tls-hello",
    ],
)
async def test_malformed_and_smuggling_requests_get_400_and_close(app, raw):
    conn = Connection(app)
    conn.feed(raw)
    [response] = await conn.responses(1)
    assert response.status in (400, 501)  # 501: a transfer coding we do not implement
    assert response.header("connection") == "close"
    assert b'"status":%d' % response.status in response.body
    assert conn.transport.closed


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        # llhttp stops at the first byte no method it knows has there: an unknown
        # method and garbage look the same to it, and get 400 (as under uvicorn).
        (b"BREW /json HTTP/1.1\r\nHost: t\r\n\r\n", 400),
        (b"GET /json HTTP/2.0\r\nHost: t\r\n\r\n", 505),
        (b"GET /json HTTP/0.9\r\n\r\n", 505),
    ],
    ids=["unknown-method", "http2", "http09"],
)
async def test_unknown_method_gets_400_and_another_http_version_505_then_close(app, raw, status):
    conn = Connection(app)
    conn.feed(raw)
    [response] = await conn.responses(1)
    assert response.status == status
    assert b'"status":%d' % status in response.body
    assert conn.transport.closed


async def test_a_method_llhttp_knows_but_no_route_has_gets_405_and_keeps_the_connection(app):
    conn = Connection(app)
    conn.feed(b"PROPFIND /json HTTP/1.1\r\nHost: t\r\n\r\n")
    [response] = await conn.responses(1)
    assert response.status == 405
    assert response.header("allow") == "GET, HEAD, OPTIONS"
    assert not conn.transport.closed


async def test_malformed_request_after_a_good_one_is_answered_after_it(app):
    conn = Connection(app)
    conn.feed(b"GET /slow/10 HTTP/1.1\r\nHost: t\r\n\r\nGARBAGE\r\n\r\n")
    responses = await conn.responses(2)
    assert [r.status for r in responses] == [200, 400]
    assert conn.transport.closed


async def test_long_request_target_gets_414_and_close(app):
    conn = Connection(app, Limits(max_request_line=100))
    conn.feed(b"GET /" + b"a" * 200 + b" HTTP/1.1\r\nHost: t\r\n\r\n")
    [response] = await conn.responses(1)
    assert response.status == 414
    assert conn.transport.closed


async def test_too_many_headers_gets_431_and_close(app):
    conn = Connection(app, Limits(max_headers=10))
    conn.feed(b"GET /json HTTP/1.1\r\nHost: t\r\n" + b"".join(b"X-%d: v\r\n" % i for i in range(11)) + b"\r\n")
    [response] = await conn.responses(1)
    assert response.status == 431
    assert conn.transport.closed


async def test_headers_too_large_in_one_read_gets_431(app):
    conn = Connection(app, Limits(max_header_size=1024))
    conn.feed(b"GET /json HTTP/1.1\r\nHost: t\r\nX-Big: " + b"v" * 2000 + b"\r\n\r\n")
    [response] = await conn.responses(1)
    assert response.status == 431


async def test_a_header_trickled_past_the_limit_gets_431_before_it_ends(app):
    conn = Connection(app, Limits(max_header_size=1024))
    conn.feed(b"GET /json HTTP/1.1\r\nHost: t\r\nX-Big: ")
    for _ in range(40):
        conn.feed(b"v" * 100)
    [response] = await conn.responses(1)
    assert response.status == 431
    assert conn.transport.closed


async def test_content_length_over_limit_gets_413_before_the_body(app):
    conn = Connection(app, Limits(max_body_size=100))
    conn.feed(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 101\r\n\r\n")
    [response] = await conn.responses(1)
    assert response.status == 413
    assert conn.transport.closed


async def test_chunked_body_growing_over_limit_gets_413(app):
    conn = Connection(app, Limits(max_body_size=100))
    conn.feed(b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n")
    for _ in range(5):
        conn.feed(b"32\r\n" + b"x" * 50 + b"\r\n")
    [response] = await conn.responses(1)
    assert response.status == 413
    assert conn.transport.closed


async def test_chunked_body_is_decoded(app):
    conn = Connection(app)
    conn.feed(
        b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
    )
    [response] = await conn.responses(1)
    assert response.body == b'{"length":11}'
    assert not conn.transport.closed


async def test_expect_continue_is_sent_when_the_handler_reads_the_body(app):
    conn = Connection(app)
    conn.feed(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
    await asyncio.sleep(0.01)
    assert conn.transport.data == b"HTTP/1.1 100 Continue\r\n\r\n"
    conn.feed(b"hello")
    responses = await conn.responses(1)
    assert [r.status for r in responses] == [100, 200]
    assert not conn.transport.closed


async def test_expect_continue_not_sent_when_the_handler_ignores_the_body_then_close(app):
    conn = Connection(app)
    conn.feed(b"POST /ignore HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
    responses = await conn.responses(1)
    assert [r.status for r in responses] == [200]
    assert responses[0].header("connection") == "close"
    assert conn.transport.closed


async def test_unread_body_is_discarded_and_the_next_request_is_served(app):
    conn = Connection(app)
    conn.feed(b"POST /ignore HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\n01234")
    await asyncio.sleep(0.01)
    conn.feed(b"56789" + GET_JSON)
    responses = await conn.responses(2)
    assert [r.body for r in responses] == [b'{"ignored":true}', b'{"message":"Hello, World!"}']


async def test_http10_closes_by_default_and_keeps_alive_when_asked(app):
    conn = Connection(app)
    conn.feed(b"GET /json HTTP/1.0\r\n\r\n")
    [response] = await conn.responses(1)
    assert response.header("connection") == "close"
    assert conn.transport.closed

    conn = Connection(app)
    conn.feed(b"GET /json HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
    [response] = await conn.responses(1)
    assert response.header("connection") == "keep-alive"
    assert not conn.transport.closed


async def test_connection_close_is_honoured(app):
    conn = Connection(app)
    conn.feed(b"GET /json HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    [response] = await conn.responses(1)
    assert response.header("connection") == "close"
    assert conn.transport.closed


async def test_head_gets_the_get_length_without_a_body(app):
    conn = Connection(app)
    conn.feed(b"HEAD /json HTTP/1.1\r\nHost: t\r\n\r\n" + GET_JSON)
    data = b""
    for _ in range(100):
        data = conn.transport.data
        if data.count(b"HTTP/1.1 200") == 2:
            break
        await asyncio.sleep(0.005)
    first, second = data.split(b"HTTP/1.1 200 OK")[1:]
    assert b"Content-Length: 27\r\n" in first and first.endswith(b"\r\n\r\n")
    assert second.endswith(b'{"message":"Hello, World!"}')


async def test_body_beyond_the_buffer_pauses_reading_until_the_handler_reads(app):
    release = asyncio.Event()
    received = []

    async def slow_reader(request: Request) -> dict[str, int]:
        await release.wait()
        async for chunk in request.stream():
            received.append(len(chunk))
        return {"received": sum(received)}

    conn = await one_route("POST", "/upload", slow_reader, Limits(body_buffer=1000, max_body_size=100_000))
    conn.feed(b"POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 5000\r\n\r\n")
    for _ in range(5):
        conn.feed(b"x" * 500)
    assert conn.transport.paused
    response = await release_and_send_the_rest(conn, release)
    assert response.body == b'{"received":5000}'


async def release_and_send_the_rest(conn: Connection, release: asyncio.Event) -> RawResponse:
    """The handler reads on: reading resumes, the other half of the 5000-byte body comes, and the answer."""
    release.set()
    await asyncio.sleep(0.01)
    assert not conn.transport.paused
    for _ in range(5):
        conn.feed(b"x" * 500)
    [response] = await conn.responses(1)
    return response


async def test_a_body_the_server_stopped_reading_is_not_timed_out_until_reading_resumes(app):
    # The client is not late when the server is the one not reading (a handler busy, or in the admission queue).
    release = asyncio.Event()
    received = []

    async def reads_then_pauses(request: Request) -> dict[str, int]:
        chunks = request.stream()
        received.append(len(await chunks.__anext__()))  # the body's clock runs while it waits
        await release.wait()
        async for chunk in chunks:
            received.append(len(chunk))
        return {"received": sum(received)}

    limits = Limits(body_buffer=1000, max_body_size=100_000, body_timeout=10)
    conn = await one_route("POST", "/upload", reads_then_pauses, limits)
    conn.feed(b"POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 5000\r\n\r\n")
    await asyncio.sleep(0.01)
    for _ in range(5):
        conn.feed(b"x" * 500)
        await asyncio.sleep(0)
    assert conn.transport.paused
    conn.protocol.check_deadline(1011.0)
    response = await release_and_send_the_rest(conn, release)
    assert response.status == 200 and response.body == b'{"received":5000}'


async def test_a_request_parsed_after_reading_resumed_does_not_see_the_last_handlers_context():
    user: contextvars.ContextVar[str | None] = contextvars.ContextVar("user", default=None)
    app = App()

    @app.get("/set")
    async def set_user(request: Request) -> dict[str, str]:
        user.set("alice")
        return {"set": "alice"}

    @app.get("/get")
    async def get_user(request: Request) -> dict[str, str | None]:
        return {"user": user.get()}

    await app.startup()
    # Two padded requests fill the pipeline (max 2): reading pauses with /get left over,
    # and is parsed from a callback once /set has been answered, inside its context.
    padded = b"GET /set HTTP/1.1\r\nHost: t\r\nX-Pad: " + b"p" * 8000 + b"\r\n\r\n"
    conn = Connection(app, Limits(max_pipeline=2))
    get = b"GET /get HTTP/1.1\r\nHost: t\r\nX-Pad: " + b"p" * 1000 + b"\r\n\r\n"  # past the first 16 KiB
    conn.feed(padded + padded + get)
    responses = await conn.responses(3)
    assert [r.body for r in responses][-1] == b'{"user":null}'


async def test_client_disconnect_while_handler_reads_body_does_not_crash_or_leak(app, caplog):
    before = len(asyncio.all_tasks())
    conn = Connection(app)  # its Task, started now, must be gone at the end too
    conn.feed(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\nabc")
    await asyncio.sleep(0.01)
    conn.protocol.connection_lost(None)
    await asyncio.sleep(0.01)
    assert len(asyncio.all_tasks()) == before
    assert not [r for r in caplog.records if r.levelname == "ERROR"]
    assert conn.protocol not in conn.state.connections


async def test_client_disconnect_mid_stream_closes_the_generator(app):
    finished = asyncio.Event()

    async def produce():
        try:
            for _ in range(1000):
                yield b"x" * 1000
                await asyncio.sleep(0.001)
        finally:
            finished.set()

    async def stream(request: Request) -> StreamResponse:
        return StreamResponse(produce())

    conn = await one_route("GET", "/stream", stream)
    conn.feed(b"GET /stream HTTP/1.1\r\nHost: t\r\n\r\n")
    await asyncio.sleep(0.02)
    conn.protocol.connection_lost(None)
    await asyncio.wait_for(finished.wait(), 1)


async def test_stream_waits_while_the_transport_is_paused(app):
    produced = []
    conn: Connection

    async def produce():
        for i in range(10):
            produced.append(i)
            if i == 1:
                conn.protocol.pause_writing()  # the client stops reading
            yield b"chunk"

    async def stream(request: Request) -> StreamResponse:
        return StreamResponse(produce())

    conn = await one_route("GET", "/stream", stream)
    conn.feed(b"GET /stream HTTP/1.1\r\nHost: t\r\n\r\n" + GET_JSON)
    await asyncio.sleep(0.02)
    assert produced == [0, 1]  # wrote the chunk, then waits for the socket to drain
    conn.protocol.resume_writing()
    responses = await conn.responses(2)
    assert responses[0].body == b"chunk" * 10
    assert responses[0].header("transfer-encoding") == "chunked"
    assert responses[1].status == 404  # the next pipelined request was answered after the stream


async def test_pipelined_requests_wait_while_the_client_does_not_read(app):
    conn = Connection(app)
    conn.protocol.pause_writing()
    conn.feed(GET_JSON * 3)
    await asyncio.sleep(0.01)
    assert conn.transport.data == b""  # nothing more is buffered for a client that does not read
    conn.protocol.resume_writing()
    assert len(await conn.responses(3)) == 3


async def test_upgrade_request_is_answered_then_closed(app):
    conn = Connection(app)
    conn.feed(b"GET /json HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n\x81\x05hello")
    [response] = await conn.responses(1)
    assert response.status == 200 and response.header("connection") == "close"
    assert conn.transport.closed


async def test_missing_host_on_http11_is_400(app):
    conn = Connection(app)
    conn.feed(b"GET /json HTTP/1.1\r\n\r\n")
    [response] = await conn.responses(1)
    assert response.status == 400 and b"Host" in response.body
    assert conn.transport.closed


@pytest.mark.parametrize(
    "hosts",
    [
        b"Host: a\r\nHost: a\r\n",
        b"Host: a\r\nhost: b\r\n",
        b"Host: a b\r\n",
        b"Host: a/b\r\n",
        b"Host: a@b\r\n",
        b"Host: a:b\r\n",
        b"Host: a:80:80\r\n",
        b"Host: [::1\r\n",
        b"Host: [zz::1]\r\n",
        b"Host: ::1\r\n",
        b"Host: %zz\r\n",
        b"Host: \xe9x.com\r\n",
    ],
    ids=[
        "twice",
        "twice-other-case",
        "space",
        "slash",
        "userinfo",
        "bad-port",
        "two-ports",
        "open-bracket",
        "bad-ipv6",
        "bare-ipv6",
        "bad-pct",
        "non-ascii",
    ],
)
@pytest.mark.parametrize("version", [b"1.1", b"1.0"])
async def test_two_host_lines_or_a_host_that_is_not_a_host_get_400_and_close(app, hosts, version):
    conn = Connection(app)
    conn.feed(b"GET /json HTTP/" + version + b"\r\n" + hosts + b"\r\n" + GET_JSON)
    [response] = await conn.responses(1)
    await asyncio.sleep(0.02)
    assert response.status == 400 and b"Host" in response.body
    assert response.header("connection") == "close"
    assert len(parse_responses(conn.transport.data)[0]) == 1  # nothing after it is read
    assert conn.transport.closed


@pytest.mark.parametrize(
    "host",
    [
        b"",
        b"example.com",
        b"example.com:8080",
        b"127.0.0.1:80",
        b"[::1]:8080",
        b"[v1.fe]",
        b"a_b~c!$&'()*+,;=",
        b"ex%41mple",
        b"x:",
        b"x   ",
    ],
    ids=["empty", "name", "name-port", "ipv4", "ipv6", "ipvfuture", "sub-delims", "pct", "empty-port", "ows"],
)
async def test_a_valid_host_of_any_rfc_3986_form_is_served(app, host):
    conn = Connection(app)
    conn.feed(b"GET /json HTTP/1.1\r\nHost: " + host + b"\r\n\r\n")
    [response] = await conn.responses(1)
    assert response.status == 200 and not conn.transport.closed


async def test_a_host_is_checked_on_every_request_of_a_connection(app):
    conn = Connection(app)
    conn.feed(GET_JSON + b"GET /json HTTP/1.1\r\nHost: a b\r\n\r\n")
    responses = await conn.responses(2)
    assert [r.status for r in responses] == [200, 400]
    assert conn.transport.closed


async def test_http10_without_host_is_served(app):
    conn = Connection(app)
    conn.feed(b"GET /json HTTP/1.0\r\n\r\n")
    [response] = await conn.responses(1)
    assert response.status == 200


@pytest.mark.parametrize(
    ("codings", "status"),
    [
        # RFC 9112, 6.3: a last coding that is not chunked leaves the body's length unknown: 400
        (b"Transfer-Encoding: xchunked\r\n", 400),
        (b"Transfer-Encoding: gzip\r\n", 400),
        (b"Transfer-Encoding: identity\r\n", 400),
        # framed by a final chunked, but with a coding we do not implement: 501
        (b"Transfer-Encoding: gzip, chunked\r\n", 501),
        (b"Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n", 501),  # the same list on two lines
    ],
    ids=["xchunked", "gzip", "identity", "gzip-chunked", "gzip-then-chunked-lines"],
)
async def test_a_transfer_coding_other_than_a_lone_chunked_is_refused_and_nothing_after_it_is_read(
    app, codings, status
):
    conn = Connection(app)
    # What follows the head is a chunked body and then a request that must not be answered.
    conn.feed(b"POST /echo HTTP/1.1\r\nHost: t\r\n" + codings + b"\r\n5\r\nhello\r\n0\r\n\r\n" + GET_JSON)
    [response] = await conn.responses(1)
    await asyncio.sleep(0.02)
    assert response.status == status, response.body
    assert response.header("connection") == "close"
    assert b'"status":%d' % status in response.body
    assert len(parse_responses(conn.transport.data)[0]) == 1
    assert conn.transport.closed


async def test_the_short_path_makes_the_same_request_as_the_constructor(app):
    # on_headers_complete sets Request.__init__'s attributes itself, for speed: the two must agree.
    seen: list[Request] = []

    async def keep(request: Request) -> dict[str, bool]:
        seen.append(request)
        return {"ok": True}

    conn = await one_route("GET", "/keep", keep)
    conn.feed(b"GET /keep?a=1 HTTP/1.1\r\nHost: t\r\nX-One: 1\r\n\r\n")
    await conn.responses(1)
    [fast] = seen
    built = Request("GET", "/keep", b"/keep", "a=1", "1.1", fast.raw_headers, fast.app, conn.protocol)
    built.raw_id = fast.raw_id  # set by the driver, for either kind
    # The short path leaves the body's state and the short-answer flag to Request's class values
    # (no body; HTTP/1.1 kept alive), which __init__ sets for a request whose body is to come.
    assert (fast._incoming, fast._plain) == (None, True)
    assert built._plain is True  # the same head takes the same answer path
    assert {k: v for k, v in vars(built).items() if k not in ("_incoming", "_plain")} == vars(fast)
    assert fast.raw_headers == [(b"Host", b"t"), (b"X-One", b"1")]


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"HEAD /json\tHTTP/1.1\r\nHost: t\r\n\r\n", 400),  # a tab in the request line
        (b"HEAD /json HTTP/1.1\r\nHost: t\r\nContent-Length: abc\r\n\r\n", 400),
        (b"HEAD /json HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip\r\n\r\n", 400),
        (b"HEAD /json HTTP/1.1\r\n\r\n", 400),  # no Host
        (b"HEAD /json HTTP/1.1\r\nHost: t\r\nX: " + b"x" * 9000 + b"\r\n\r\n", 431),
        (b"HEAD /" + b"x" * 9000 + b" HTTP/1.1\r\nHost: t\r\n\r\n", 414),
    ],
    ids=["tab", "bad-content-length", "te-gzip", "no-host", "header-too-large", "target-too-long"],
)
async def test_an_error_answer_to_a_malformed_head_request_has_no_body(app, raw, status):
    conn = Connection(app, Limits(max_header_size=8192, max_request_line=8192))
    conn.feed(raw)
    [response] = await conn.responses(1, head=True)
    assert response.status == status
    assert int(response.header("content-length")) > 0  # the length a GET's answer would have
    assert conn.transport.data.endswith(b"\r\n\r\n")  # and not one byte of it
    assert conn.transport.closed


async def test_a_chunked_http10_request_is_answered_then_the_connection_closed(app):
    # RFC 9112, 6.1: Transfer-Encoding in HTTP/1.0 is suspect framing, even with keep-alive asked for.
    conn = Connection(app)
    conn.feed(
        b"POST /echo HTTP/1.0\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5\r\nhello\r\n0\r\n\r\n" + GET_JSON
    )
    [response] = await conn.responses(1)
    await asyncio.sleep(0.02)
    assert response.status == 200 and response.header("connection") == "close"
    assert len(parse_responses(conn.transport.data)[0]) == 1
    assert conn.transport.closed


async def test_garbage_after_a_head_request_is_answered_with_a_body(app):
    # The parser reports the last method it completed: HEAD, from the request before.
    conn = Connection(app)
    conn.feed(b"HEAD /json HTTP/1.1\r\nHost: t\r\n\r\n\x01GET /json HTTP/1.1\r\n\r\n")
    await asyncio.sleep(0.02)
    head, rest = conn.transport.data.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 200") and rest.startswith(b"HTTP/1.1 400")
    assert rest.endswith(b"}")  # the 400 has its JSON body
    assert conn.transport.closed


async def test_a_partial_head_request_timed_out_gets_408_without_a_body(app):
    conn = Connection(app, Limits(head_timeout=5))
    conn.feed(b"HEAD /json HTTP/1.1\r\nHost: x")
    conn.protocol.check_deadline(1006.0)
    [response] = await conn.responses(1, head=True)
    assert response.status == 408
    assert conn.transport.data.endswith(b"\r\n\r\n")
    assert conn.transport.closed


async def test_head_timeout_answers_408_to_a_partial_head_and_closes(app):
    conn = Connection(app, Limits(head_timeout=5))
    conn.feed(b"GET /json HTTP/1.1\r\nHost: x")
    conn.protocol.check_deadline(1004.0)
    assert not conn.transport.closed
    conn.protocol.check_deadline(1006.0)
    [response] = await conn.responses(1)
    assert response.status == 408
    assert conn.transport.closed


async def test_the_next_head_on_a_kept_alive_connection_is_timed_from_its_first_bytes(app):
    conn = Connection(app, Limits(head_timeout=5, keepalive_timeout=90))
    conn.feed(GET_JSON)
    await conn.responses(1)
    conn.state.now = 1050.0  # idle for 50 s: the keep-alive timeout applied until now
    conn.feed(b"GET /json HTTP/1.1\r\nHo")
    conn.protocol.check_deadline(1054.0)
    assert not conn.transport.closed
    conn.protocol.check_deadline(1056.0)
    responses = await conn.responses(2)
    assert [r.status for r in responses] == [200, 408]
    assert conn.transport.closed


@pytest.mark.parametrize("partial", [b"GET /json HTTP/1.1\r\nHo", b"GET /js"])
async def test_a_head_begun_in_the_bytes_that_ended_a_request_is_timed_from_its_answer(app, partial):
    conn = Connection(app, Limits(head_timeout=5, keepalive_timeout=90))
    conn.feed(GET_JSON + partial)
    await conn.responses(1)
    conn.protocol.check_deadline(1004.0)
    assert not conn.transport.closed
    conn.protocol.check_deadline(1006.0)  # the keep-alive timeout does not apply: a head is under way
    responses = await conn.responses(2)
    assert [r.status for r in responses] == [200, 408]
    assert conn.transport.closed


async def test_more_bytes_of_a_head_begun_with_the_previous_request_do_not_restart_its_clock(app):
    conn = Connection(app, Limits(head_timeout=5, keepalive_timeout=90))
    conn.feed(GET_JSON + b"GET /json HTTP/1.1\r\nHo")
    await conn.responses(1)  # answered at 1000: the second head's clock starts there
    conn.state.now = 1004.0
    conn.feed(b"s")
    conn.protocol.check_deadline(1006.0)
    responses = await conn.responses(2)
    assert [r.status for r in responses] == [200, 408]
    assert conn.transport.closed


async def test_silent_connection_is_closed_after_the_head_timeout(app):
    conn = Connection(app, Limits(head_timeout=5))
    conn.protocol.check_deadline(1006.0)
    assert conn.transport.closed
    assert conn.transport.data == b""


async def test_idle_keepalive_connection_closes_after_keepalive_timeout(app):
    conn = Connection(app, Limits(keepalive_timeout=90, head_timeout=5))
    conn.feed(GET_JSON)
    await conn.responses(1)
    conn.protocol.check_deadline(1080.0)
    assert not conn.transport.closed  # idle, not a head in progress: the longer timeout applies
    conn.protocol.check_deadline(1091.0)
    assert conn.transport.closed


async def test_busy_connection_is_not_timed_out(app):
    conn = Connection(app, Limits(head_timeout=5, keepalive_timeout=5))
    conn.feed(b"GET /gate HTTP/1.1\r\nHost: t\r\n\r\n")
    await asyncio.sleep(0.01)
    conn.protocol.check_deadline(2000.0)
    assert not conn.transport.closed
    app.state.gate.set()
    await conn.responses(1)


async def test_stalled_body_gets_408(app):
    conn = Connection(app, Limits(body_timeout=10))
    conn.feed(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\nabc")
    await asyncio.sleep(0.01)
    conn.protocol.check_deadline(1011.0)
    [response] = await conn.responses(1)
    assert response.status == 408
    assert conn.transport.closed


async def test_connections_over_the_limit_get_503(app):
    state = ServerState()
    limits = Limits(max_connections=1)
    first = HttpProtocol(app, state, limits, asyncio.get_running_loop())
    first.connection_made(StubTransport())  # type: ignore[arg-type]
    transport = StubTransport()
    second = HttpProtocol(app, state, limits, asyncio.get_running_loop())
    second.connection_made(transport)  # type: ignore[arg-type]
    assert transport.data == b"" and not transport.closed  # the request is read first
    second.data_received(GET_JSON)
    [response], _ = parse_responses(transport.data)
    assert response.status == 503
    assert response.header("retry-after") == "1"
    assert transport.closed
    second.connection_lost(None)
    assert len(state.connections) == 1  # the refused connection is not counted once gone


async def test_response_header_content_type_replaces_media_type_and_length_is_the_servers():
    from aiorest import Response

    async def custom(request: Request) -> Response:
        return Response(b"abc", headers={"Content-Type": "text/csv", "Content-Length": "999", "X-Id": "1"})

    conn = await one_route("GET", "/custom", custom)
    conn.feed(b"GET /custom HTTP/1.1\r\nHost: t\r\n\r\n")
    [response] = await conn.responses(1)
    assert response.header_all("content-type") == ["text/csv"]
    assert response.header_all("content-length") == ["3"]
    assert response.header("x-id") == "1" and response.body == b"abc"


async def test_handler_asking_to_close_gets_connection_close_on_the_fast_path(app):
    async def close_after(request: Request) -> dict[str, bool]:
        request.keep_alive = False
        return {"bye": True}

    conn = await one_route("GET", "/bye", close_after)
    conn.feed(b"GET /bye HTTP/1.1\r\nHost: t\r\n\r\n")
    [response] = await conn.responses(1)
    assert response.header("connection") == "close" and conn.transport.closed


async def test_middleware_chain_for_routing_errors_is_built_once():
    seen = []

    async def record(request: Request, handler):
        from aiorest import HTTPError

        try:
            return await handler(request)
        except HTTPError as exc:  # routing errors reach middleware as exceptions
            seen.append(exc.status)
            raise

    app2 = App(middleware=[record])
    await app2.startup()
    endpoint = app2._routing_error_endpoint
    conn = Connection(app2)
    conn.feed(b"GET /a HTTP/1.1\r\nHost: t\r\n\r\nOPTIONS /b HTTP/1.1\r\nHost: t\r\n\r\n")
    await conn.responses(2)
    assert seen == [404, 404]  # OPTIONS on an unknown path is a 404 too
    assert app2._routing_error_endpoint is endpoint


def test_http_error_with_a_status_without_a_phrase():
    from aiorest import HTTPError

    assert HTTPError(status=499).message == "HTTP error 499"


def test_cookie_expires_accepts_a_float_timestamp():
    from aiorest.http.cookies import format_set_cookie

    assert "Expires=Thu, 01 Jan 1970 00:00:01 GMT" in format_set_cookie("a", "b", expires=1.5)


async def test_a_request_pipelined_after_connection_close_is_never_run():
    """Its answer could never be sent: neither may its handler run (a POST's effects, say)."""
    calls: list[str] = []

    async def effect(request: Request) -> dict[str, bool]:
        calls.append(request.path)
        return {"done": True}

    conn = await one_route("POST", "/effect", effect)
    conn.feed(
        b"POST /effect HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        b"POST /effect HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n"
    )
    [response] = await conn.responses(1)
    await asyncio.sleep(0.05)
    assert response.header("connection") == "close"
    assert calls == ["/effect"]
    assert conn.transport.closed


async def test_a_shutdown_with_idle_grace_keeps_an_idle_connection_for_its_next_request(app):
    # A graceful stop with idle_grace: a connection idle after a kept-alive answer stays open, so that
    # the request its client sends next (it read a keep-alive answer) is answered, with Connection: close.
    # The driver goes over its queue again after each answer (on the task path, from the Task's
    # done-callback): that must not close it (a test of test_reload's saw "closed before the response").
    conn = Connection(app)
    conn.feed(GET_JSON)
    [first] = await conn.responses(1)
    assert first.header("connection") is None
    conn.protocol.shutdown(close_idle=False)
    conn.protocol._driver.process()  # what the task path's done-callback does after an answer
    await asyncio.sleep(0.01)
    assert not conn.transport.closed
    conn.feed(GET_JSON)
    [_, second] = await conn.responses(2)
    assert second.status == 200 and second.header("connection") == "close"
    assert conn.transport.closed


async def test_a_dict_under_middleware_is_sent_as_the_plain_routes_dict_and_a_json_response_keeps_its_own():
    app = App()

    async def passing(request: Request, handler):
        return await handler(request)

    async def plain(request: Request) -> dict[str, str]:
        return {"message": "Hello, World!"}

    async def created(request: Request) -> JSONResponse:
        return JSONResponse({"id": 1}, status=201)

    async def tagged(request: Request) -> JSONResponse:
        return JSONResponse({"id": 2}, headers={"ETag": '"v2"'})

    app.add_route("GET", "/plain", plain)
    router = Router(middleware=[passing])
    for path, handler in (("/plain", plain), ("/created", created), ("/tagged", tagged)):
        router.add_route("GET", path, handler)
    app.include(router, "/wrapped")
    await app.startup()
    conn = Connection(app)
    for path in (b"/plain", b"/wrapped/plain", b"/wrapped/created", b"/wrapped/tagged"):
        conn.feed(b"GET " + path + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    bare, wrapped, made, etagged = await conn.responses(4)
    heads = [[(k, v) for k, v in r.headers if k.lower() != "x-request-id"] for r in (bare, wrapped)]
    assert heads[0] == heads[1] and bare.body == wrapped.body  # the same head, in the same order
    assert made.status == 201 and made.body == b'{"id":1}'
    assert etagged.status == 200 and etagged.header("etag") == '"v2"' and etagged.body == b'{"id":2}'

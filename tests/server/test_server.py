"""The server over real sockets: keep-alive, pipelining, limits, timeouts, disconnects, shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import socket
import tempfile
import time

import aiohttp
import pytest

from aiorest import App, Limits, Request, Response, Server, StreamResponse
from tests.rawhttp import exchange, parse_responses, read_responses


def make_app() -> App:
    app = App()

    @app.get("/json")
    async def json_handler(request: Request) -> dict[str, str]:
        return {"message": "Hello, World!"}

    @app.get("/sleep/{ms:int}")
    async def sleep(request: Request) -> dict[str, int]:
        await asyncio.sleep(request.path_params["ms"] / 1000)
        return {"slept": request.path_params["ms"]}

    @app.post("/echo")
    async def echo(request: Request) -> Response:
        return Response(await request.read(), media_type="application/octet-stream")

    @app.get("/client")
    async def client(request: Request) -> dict[str, object]:
        return {"client": request.client}

    @app.get("/big/{size:int}")
    async def big(request: Request) -> Response:
        return Response(b"x" * request.path_params["size"])

    return app


@pytest.fixture
async def server():
    servers = []

    async def start(app: App | None = None, **options) -> Server:
        srv = Server(app or make_app(), host="127.0.0.1", port=0, **options)
        await srv.start()
        servers.append(srv)
        return srv

    yield start
    for srv in servers:
        await srv.stop(timeout=2)


GET_JSON = b"GET /json HTTP/1.1\r\nHost: x\r\n\r\n"


async def close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(ConnectionError):
        await writer.wait_closed()


async def test_keep_alive_serves_many_requests_on_one_connection(server):
    srv = await server()
    reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
    for _ in range(5):
        writer.write(GET_JSON)
        [response], closed = await read_responses(reader, 1)
        assert response.status == 200 and not closed
    await close(writer)


async def test_pipelined_requests_over_a_socket_come_back_in_order(server):
    srv = await server()
    payload = b"".join(b"GET /sleep/%d HTTP/1.1\r\nHost: t\r\n\r\n" % ms for ms in (20, 0, 10, 0, 5) * 3) + GET_JSON
    responses, closed = await exchange(srv.port, payload, count=16)
    assert [r.body for r in responses[:5]] == [b'{"slept":%d}' % ms for ms in (20, 0, 10, 0, 5)]
    assert responses[-1].body == b'{"message":"Hello, World!"}'
    assert not closed


async def test_date_header_changes_and_server_header_is_sent(server):
    srv = await server()
    [first], _ = await exchange(srv.port, GET_JSON)
    await asyncio.sleep(1.1)
    [second], _ = await exchange(srv.port, GET_JSON)
    assert first.header("server") == "aiorest"
    assert first.header("date") != second.header("date")


async def test_tcp_nodelay_is_set(server):
    srv = await server()
    reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
    writer.write(GET_JSON)
    await read_responses(reader, 1)
    [connection] = srv._state.connections
    sock = connection.transport.get_extra_info("socket")
    assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    await close(writer)


async def test_large_body_round_trip_with_exact_content_length(server):
    srv = await server(limits=Limits(max_body_size=4 * 1024 * 1024))
    body = os.urandom(3 * 1024 * 1024)
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{srv.url}/echo", data=io.BytesIO(body)) as response:
            assert response.headers["Content-Length"] == str(len(body))
            assert await response.read() == body
        async with session.get(f"{srv.url}/big/1048576") as response:
            assert len(await response.read()) == 1048576


async def test_body_over_the_limit_is_refused_before_it_is_sent(server):
    srv = await server(limits=Limits(max_body_size=1000))
    reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
    writer.write(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 1000000\r\nExpect: 100-continue\r\n\r\n")
    [response], closed = await read_responses(reader, 1)
    assert response.status == 413
    assert closed
    await close(writer)


async def test_expect_continue_over_a_socket(server):
    srv = await server()
    reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
    writer.write(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
    interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 2)
    assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
    writer.write(b"hello")
    [response], _ = await read_responses(reader, 1)
    assert response.body == b"hello"
    await close(writer)


async def test_slowloris_client_is_closed_within_the_head_timeout(server):
    srv = await server(limits=Limits(head_timeout=1))
    reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
    started = time.monotonic()
    writer.write(b"GET /json HTTP/1.1\r\nHost: t\r\n")
    closed_at = None
    for _ in range(100):  # one header byte every 100 ms: never finishes on its own (10 s)
        try:
            writer.write(b"X")
            await writer.drain()
        except ConnectionError:
            closed_at = time.monotonic()
            break
        try:
            data = await asyncio.wait_for(reader.read(1000), 0.1)
        except TimeoutError:
            continue
        if data.startswith(b"HTTP/1.1 408") or not data:
            closed_at = time.monotonic()
            break
    # closed though bytes kept coming; the 10 s of trickle are a breakage guard, generous on purpose
    assert closed_at is not None and closed_at - started >= 0.9
    await close(writer)


async def test_idle_connection_is_closed_after_keepalive_timeout(server):
    srv = await server(limits=Limits(keepalive_timeout=1))
    reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
    writer.write(GET_JSON)
    await read_responses(reader, 1)
    started = time.monotonic()
    assert await asyncio.wait_for(reader.read(1), 10) == b""  # 10 s: a breakage guard, generous on purpose
    assert time.monotonic() - started >= 0.9  # not before the timeout
    await close(writer)


async def test_client_disconnect_mid_request_leaks_no_task_and_server_goes_on(server):
    srv = await server()
    before = len(asyncio.all_tasks())
    reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
    writer.write(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 1000\r\n\r\npartial")
    await writer.drain()
    await asyncio.sleep(0.05)
    writer.transport.abort()
    await close(writer)
    await asyncio.sleep(0.1)
    assert len(asyncio.all_tasks()) <= before
    assert not srv._state.connections
    [response], _ = await exchange(srv.port, GET_JSON)
    assert response.status == 200


async def test_client_disconnect_mid_response_stops_the_stream(server):
    stopped = asyncio.Event()

    async def endless():
        try:
            while True:
                yield b"x" * 65536
        finally:
            stopped.set()

    app = App()

    @app.get("/stream")
    async def stream(request: Request) -> StreamResponse:
        return StreamResponse(endless())

    srv = await server(app)
    reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
    writer.write(b"GET /stream HTTP/1.1\r\nHost: t\r\n\r\n")
    await reader.read(100000)
    writer.transport.abort()
    await asyncio.wait_for(stopped.wait(), 2)
    await close(writer)


async def test_connection_limit_answers_503(server):
    srv = await server(limits=Limits(max_connections=2))
    held = [await asyncio.open_connection("127.0.0.1", srv.port) for _ in range(2)]
    await asyncio.sleep(0.05)
    [response], closed = await exchange(srv.port, GET_JSON)
    assert response.status == 503 and closed
    for _, writer in held:
        await close(writer)


async def test_graceful_stop_finishes_requests_in_flight(server):
    srv = Server(make_app(), host="127.0.0.1", port=0)
    await srv.start()
    reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
    writer.write(b"GET /sleep/200 HTTP/1.1\r\nHost: t\r\n\r\n")
    await writer.drain()
    await asyncio.sleep(0.05)
    stopping = asyncio.create_task(srv.stop(timeout=5))
    [response], closed = await read_responses(reader, 1)
    assert response.status == 200 and response.header("connection") == "close"
    assert closed
    await stopping
    await close(writer)
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", srv.port)


@pytest.mark.parametrize("begun", [b"GET /json HTTP/1.1\r\nHost:", b"GET /json HTTP/1.1\r\nHost: t\r\n\r\nGET /js"])
async def test_graceful_stop_answers_a_request_whose_head_is_arriving(begun):
    # Part of the head had arrived when the stop began (alone, or behind a request on the
    # same read): the request was sent before the stop, so it is answered, not cut.
    srv = Server(make_app(), host="127.0.0.1", port=0)
    await srv.start()
    reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
    writer.write(begun)
    await writer.drain()
    await asyncio.sleep(0.1)  # read by the server (and the first request answered)
    stopping = asyncio.create_task(srv.stop(timeout=5))
    await asyncio.sleep(0.1)
    writer.write(b" t\r\n\r\n" if begun.endswith(b"Host:") else b"on HTTP/1.1\r\nHost: t\r\n\r\n")
    responses, closed = await read_responses(reader, 1 if begun.endswith(b"Host:") else 2)
    assert [response.status for response in responses] == [200] * len(responses)
    assert responses[-1].header("connection") == "close" and closed
    await stopping
    await close(writer)


async def test_unix_socket_with_mode():
    path = os.path.join(tempfile.mkdtemp(), "aiorest.sock")
    srv = Server(make_app(), unix=path, unix_mode=0o660)
    await srv.start()
    try:
        assert oct(os.stat(path).st_mode & 0o777) == "0o660"
        reader, writer = await asyncio.open_unix_connection(path)
        writer.write(GET_JSON + b"GET /client HTTP/1.1\r\nHost: t\r\n\r\n")
        [response, client], _ = await read_responses(reader, 2)
        assert response.status == 200
        assert client.body == b'{"client":null}'  # no address over a unix socket
        await close(writer)
    finally:
        await srv.stop()
    assert not os.path.exists(path)


async def test_a_unix_socket_served_by_another_server_is_neither_taken_nor_removed(tmp_path):
    path = str(tmp_path / "aiorest.sock")
    first = Server(make_app(), unix=path)
    await first.start()
    try:
        second = Server(make_app(), unix=path)
        with pytest.raises(OSError, match="already"):
            await second.start()
        # Still there, and still the first server's.
        await assert_serves_json(path)
    finally:
        await first.stop()
    assert not os.path.exists(path)


async def assert_serves_json(path: str) -> None:
    """A server answers GET /json with 200 on the unix socket ``path``."""
    reader, writer = await asyncio.open_unix_connection(path)
    writer.write(GET_JSON)
    [response], _ = await read_responses(reader, 1)
    assert response.status == 200
    await close(writer)


async def test_a_file_in_the_unix_sockets_place_is_left_alone(tmp_path):
    path = tmp_path / "aiorest.sock"
    path.write_text("not a socket")
    with pytest.raises(OSError):
        await Server(make_app(), unix=str(path)).start()
    assert path.read_text() == "not a socket"


async def test_a_unix_socket_in_a_missing_folder_names_its_path(tmp_path):
    # "startup failed: FileNotFoundError: [Errno 2] No such file or directory": which file, the log did not say.
    path = tmp_path / "missing" / "aiorest.sock"
    with pytest.raises(FileNotFoundError, match=str(path)):
        await Server(make_app(), unix=str(path)).start()


async def test_stop_leaves_a_unix_socket_bound_since_by_another_server(tmp_path):
    # A new server started on the path while this one drains (a restart that overlaps):
    # this one's stop must not remove the file the new one serves.
    path = str(tmp_path / "aiorest.sock")
    old = Server(make_app(), unix=path)
    await old.start()
    os.unlink(path)
    new = Server(make_app(), unix=path)
    await new.start()
    try:
        await old.stop()
        assert os.path.exists(path)
        await assert_serves_json(path)
    finally:
        await new.stop()
    assert not os.path.exists(path)


async def test_http10_client_gets_a_body_and_a_close(server):
    srv = await server()
    reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
    writer.write(b"GET /json HTTP/1.0\r\n\r\n")
    data = await asyncio.wait_for(reader.read(), 2)  # read to EOF: the server closes
    [response], _ = parse_responses(data)
    assert response.body == b'{"message":"Hello, World!"}'
    await close(writer)


async def test_garbage_on_the_wire_gets_400_and_a_clean_close(server):
    srv = await server()
    responses, closed = await exchange(srv.port, b"\x00\x01\x02 not http\r\n\r\n")
    assert responses[0].status == 400 and closed


async def test_two_host_headers_over_a_socket_get_400_and_a_close(server):
    # RFC 9112, 3.2; before, the first was served and the second ignored by request.host
    srv = await server()
    responses, closed = await exchange(srv.port, b"GET /json HTTP/1.1\r\nHost: a\r\nHost: evil\r\n\r\n" + GET_JSON)
    assert [r.status for r in responses] == [400] and closed
    assert b"more than one Host header" in responses[0].body

"""Files out (issue 36, point 3): FileResponse and App.static over real sockets, in raw requests.

Raw requests, not aiohttp: a client library normalizes ``..`` and ``%2e%2e`` away
before they reach the server, and the traversal cases must reach it as sent.
The bodies are checked on asyncio's loop (``loop.sendfile``) and on uvloop (reads in a thread).
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import os
import socket
import struct
import time
import tracemalloc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import uvloop

from aiorest import App, Compression, FileResponse, Request, Router, Server
from aiorest.testing import TestClient
from tests.rawclient import fetch, get, read_response
from tests.rawhttp import parse_responses

TEXT = b"0123456789abcdefghij"  # 20 bytes


@pytest.fixture
def root(tmp_path: Path) -> Path:
    top = tmp_path / "root"
    (top / "sub").mkdir(parents=True)
    (top / "hello.txt").write_bytes(TEXT)
    (top / "sub" / "data.json").write_bytes(b'{"a": 1}')
    (top / "page.html").write_bytes(b"<p>hi</p>")
    (top / "blob.unknownext").write_bytes(b"\x00\x01")
    (tmp_path / "secret.txt").write_bytes(b"TOP SECRET")
    (top / "link-out").symlink_to(tmp_path / "secret.txt")
    (top / "link-in").symlink_to(top / "hello.txt")
    (top / "app.js").write_bytes(b"console.log('plain');" * 50)
    (top / "app.js.gz").write_bytes(gzip.compress(b"console.log('plain');" * 50))
    (top / "app.js.br").write_bytes(b"not really brotli")
    return top


def files_app(root: Path, **options) -> App:
    app = App(**options)
    app.static("/static", root, cache_control="public, max-age=60")

    @app.get("/one")
    async def one(request: Request) -> FileResponse:
        return FileResponse(root / "hello.txt")

    @app.get("/missing")
    async def missing(request: Request) -> FileResponse:
        return FileResponse(root / "nope.txt")

    return app


async def head(port: int, path: str, *headers: str) -> tuple:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        extra = "".join(f"{header}\r\n" for header in headers)
        writer.write(f"HEAD {path} HTTP/1.1\r\nHost: t\r\n{extra}\r\n".encode() + get("/static/hello.txt"))
        data = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        (response,), _ = parse_responses(data, head_request=True)
        return response, await read_response(reader)
    finally:
        writer.close()


async def test_get_sends_the_file_with_validators(aiorest_client, root):
    client = await aiorest_client(files_app(root))
    for path in ("/static/hello.txt", "/one"):
        [response] = await fetch(client.port, get(path))
        assert response.status == 200
        assert response.body == TEXT
        assert response.header("content-length") == "20"
        assert response.header("content-type") == "text/plain; charset=utf-8"
        assert response.header("accept-ranges") == "bytes"
        etag = response.header("etag")
        assert etag.startswith('"') and not etag.startswith("W/")  # strong: If-Range can use it
        assert response.header("last-modified").endswith(" GMT")
    [response] = await fetch(client.port, get("/static/hello.txt"))
    assert response.header("cache-control") == "public, max-age=60"


async def test_head_has_the_headers_and_no_body_and_keeps_the_connection(aiorest_client, root):
    client = await aiorest_client(files_app(root))
    response, after = await head(client.port, "/static/hello.txt")
    assert response.status == 200 and response.header("content-length") == "20"
    assert after.status == 200 and after.body == TEXT  # the next response follows at once: no body was sent


@pytest.mark.parametrize(
    ("name", "media_type"),
    [
        ("sub/data.json", "application/json"),
        ("page.html", "text/html; charset=utf-8"),
        ("blob.unknownext", "application/octet-stream"),
    ],
)
async def test_content_type_from_the_file_name(aiorest_client, root, name, media_type):
    client = await aiorest_client(files_app(root))
    [response] = await fetch(client.port, get(f"/static/{name}"))
    assert response.status == 200 and response.header("content-type") == media_type


async def test_304_on_if_none_match_with_weak_comparison(aiorest_client, root):
    client = await aiorest_client(files_app(root))
    [first] = await fetch(client.port, get("/static/hello.txt"))
    etag = first.header("etag")
    for value in (etag, f"W/{etag}", f'"other", {etag}', "*"):
        [response] = await fetch(client.port, get("/static/hello.txt", f"If-None-Match: {value}"))
        assert response.status == 304, value
        assert response.body == b"" and response.header("etag") == etag
    [response] = await fetch(client.port, get("/static/hello.txt", 'If-None-Match: "other"'))
    assert response.status == 200 and response.body == TEXT


async def test_304_on_if_modified_since_unless_if_none_match_is_there(aiorest_client, root):
    client = await aiorest_client(files_app(root))
    [first] = await fetch(client.port, get("/static/hello.txt"))
    modified = first.header("last-modified")
    [response] = await fetch(client.port, get("/static/hello.txt", f"If-Modified-Since: {modified}"))
    assert response.status == 304
    [response] = await fetch(client.port, get("/static/hello.txt", "If-Modified-Since: Sat, 01 Jan 2000 00:00:00 GMT"))
    assert response.status == 200 and response.body == TEXT
    # RFC 9110 §13.2.2: If-None-Match, when present, decides; If-Modified-Since is ignored.
    [response] = await fetch(
        client.port, get("/static/hello.txt", 'If-None-Match: "other"', f"If-Modified-Since: {modified}")
    )
    assert response.status == 200


async def test_412_on_a_failing_if_match(aiorest_client, root):
    client = await aiorest_client(files_app(root))
    [response] = await fetch(client.port, get("/static/hello.txt", 'If-Match: "other"'))
    assert response.status == 412


@pytest.mark.parametrize(
    ("value", "content_range", "body"),
    [
        ("bytes=2-5", "bytes 2-5/20", TEXT[2:6]),
        ("bytes=15-", "bytes 15-19/20", TEXT[15:]),
        ("bytes=-3", "bytes 17-19/20", TEXT[-3:]),
        ("bytes=10-999", "bytes 10-19/20", TEXT[10:]),
    ],
)
async def test_206_for_a_single_range(aiorest_client, root, value, content_range, body):
    client = await aiorest_client(files_app(root))
    [response] = await fetch(client.port, get("/static/hello.txt", f"Range: {value}"))
    assert response.status == 206
    assert response.header("content-range") == content_range
    assert response.body == body and response.header("content-length") == str(len(body))


async def test_multipart_206_for_several_ranges(aiorest_client, root):
    client = await aiorest_client(files_app(root))
    [response] = await fetch(client.port, get("/static/hello.txt", "Range: bytes=0-1, 10-12"))
    assert response.status == 206
    media_type, _, boundary = response.header("content-type").partition("; boundary=")
    assert media_type == "multipart/byteranges" and boundary
    assert int(response.header("content-length")) == len(response.body)
    parts = response.body.split(f"--{boundary}".encode())
    assert parts[0] == b"" and parts[-1] == b"--\r\n"
    bodies = []
    for part in parts[1:-1]:
        head, _, content = part.partition(b"\r\n\r\n")
        assert b"Content-Type: text/plain; charset=utf-8" in head
        bodies.append((head.split(b"Content-Range: ")[1].decode(), content.removesuffix(b"\r\n")))
    assert bodies == [("bytes 0-1/20", b"01"), ("bytes 10-12/20", b"abc")]


@pytest.mark.parametrize("value", ["bytes=0-5,3-8", "bytes=" + ",".join(f"{n}-{n}" for n in range(17)), "items=0-1"])
async def test_overlapping_too_many_or_foreign_ranges_get_the_whole_file(aiorest_client, root, value):
    client = await aiorest_client(files_app(root))
    [response] = await fetch(client.port, get("/static/hello.txt", f"Range: {value}"))
    assert response.status == 200 and response.body == TEXT


async def test_416_when_no_range_is_satisfiable(aiorest_client, root):
    client = await aiorest_client(files_app(root))
    [response] = await fetch(client.port, get("/static/hello.txt", "Range: bytes=20-30"))
    assert response.status == 416
    assert response.header("content-range") == "bytes */20"


async def test_if_range_serves_the_range_only_for_the_same_file(aiorest_client, root):
    os.utime(root / "hello.txt", (1_700_000_000, 1_700_000_000))  # a date is strong only once a second old
    client = await aiorest_client(files_app(root))
    [first] = await fetch(client.port, get("/static/hello.txt"))
    etag, modified = first.header("etag"), first.header("last-modified")
    for value in (etag, modified):
        [response] = await fetch(client.port, get("/static/hello.txt", "Range: bytes=0-1", f"If-Range: {value}"))
        assert response.status == 206 and response.body == b"01", value
    for value in ('"old"', f"W/{etag}", "Sat, 01 Jan 2000 00:00:00 GMT"):
        [response] = await fetch(client.port, get("/static/hello.txt", "Range: bytes=0-1", f"If-Range: {value}"))
        assert response.status == 200 and response.body == TEXT, value


async def test_if_range_with_the_date_of_a_file_changed_within_the_second_is_weak(aiorest_client, root):
    (root / "fresh.txt").write_bytes(TEXT)
    soon = time.time() + 30  # not yet a second old when sent, whatever the pace of the run
    os.utime(root / "fresh.txt", (soon, soon))
    client = await aiorest_client(files_app(root))
    [first] = await fetch(client.port, get("/static/fresh.txt"))
    modified = first.header("last-modified")
    [response] = await fetch(client.port, get("/static/fresh.txt", "Range: bytes=0-1", f"If-Range: {modified}"))
    assert response.status == 200 and response.body == TEXT
    [response] = await fetch(
        client.port, get("/static/fresh.txt", "Range: bytes=0-1", f"If-Range: {first.header('etag')}")
    )
    assert response.status == 206 and response.body == b"01"  # the strong tag still holds


async def test_precompressed_sibling_when_accept_encoding_allows(aiorest_client, root):
    client = await aiorest_client(files_app(root, middleware=[Compression(minimum_size=1)]))
    plain = (root / "app.js").read_bytes()
    [response] = await fetch(client.port, get("/static/app.js", "Accept-Encoding: gzip"))
    assert response.status == 200
    assert response.header("content-encoding") == "gzip"
    assert "Accept-Encoding" in response.header("vary")
    assert gzip.decompress(response.body) == plain  # compressed once: the sibling, as it is on disk
    [response] = await fetch(client.port, get("/static/app.js", "Accept-Encoding: gzip, br"))
    assert response.header("content-encoding") == "br" and response.body == b"not really brotli"
    [response] = await fetch(client.port, get("/static/app.js", "Accept-Encoding: br;q=0, gzip;q=0"))
    assert response.header("content-encoding") is None and response.body == plain
    # Each coding is a representation of its own: a tag of its own.
    [gz] = await fetch(client.port, get("/static/app.js", "Accept-Encoding: gzip"))
    assert gz.header("etag") != response.header("etag")


async def test_a_missing_file_is_404(aiorest_client, root):
    client = await aiorest_client(files_app(root))
    for path in ("/missing", "/static/nope.txt"):
        [response] = await fetch(client.port, get(path))
        assert response.status == 404


@pytest.mark.parametrize(
    "path",
    [
        "/static/../secret.txt",
        "/static/%2e%2e/secret.txt",
        "/static/%2E%2E/secret.txt",
        "/static/sub/../../secret.txt",
        "/static/sub%2f..%2f..%2fsecret.txt",
        "/static/sub%2F..%2F..%2Fsecret.txt",
        "/static/..%5csecret.txt",
        "/static/sub\\..\\..\\secret.txt",
        "/static/hello.txt%00",
        "/static/%00",
        "/static/link-out",
        "/static/C:/secret.txt",
        "/static/c:%5csecret.txt",
        "/static//etc/passwd",
        "/static/%2fetc/passwd",
        "/static/sub",
        "/static/sub/",
        "/static/",
        "/static/./hello.txt",
        "/static/%ff",
    ],
)
async def test_nothing_outside_the_directory_and_no_directory_is_served(aiorest_client, root, path):
    client = await aiorest_client(files_app(root))
    [response] = await fetch(client.port, get(path))
    assert response.status in (400, 404), (path, response.status)
    assert b"TOP SECRET" not in response.body


async def test_a_router_static_under_an_include_prefix(aiorest_client, root):
    router = Router()
    router.static("/files", root)
    app = App()
    app.include(router, "/v1")
    client = await aiorest_client(app)
    [response] = await fetch(client.port, get("/v1/files/sub/data.json"))
    assert response.status == 200 and response.body == b'{"a": 1}'
    [response] = await fetch(client.port, get("/v1/files/sub%2f..%2f..%2fsecret.txt"))
    assert response.status == 404


async def test_http_1_0_keeps_alive_after_a_file(aiorest_client, root):
    client = await aiorest_client(files_app(root))
    request = b"GET /static/hello.txt HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"
    reader, writer = await asyncio.open_connection("127.0.0.1", client.port)
    try:
        writer.write(request + request)
        data = b""
        while data.count(TEXT) < 2:
            chunk = await asyncio.wait_for(reader.read(65536), 5)
            assert chunk, data
            data += chunk
    finally:
        writer.close()
    assert data.count(b"Connection: keep-alive") == 2


async def test_a_symlink_inside_the_directory_is_served(aiorest_client, root):
    client = await aiorest_client(files_app(root))
    [response] = await fetch(client.port, get("/static/link-in"))
    assert response.status == 200 and response.body == TEXT


async def large_file_arrives_whole(tmp_path: Path) -> None:
    data = os.urandom(8 * 1024 * 1024 + 7)
    (tmp_path / "big.bin").write_bytes(data)
    async with TestClient(files_app(tmp_path)) as client:
        [response] = await fetch(client.port, get("/static/big.bin"))
        assert response.status == 200
        assert hashlib.sha256(response.body).digest() == hashlib.sha256(data).digest()
        ranges = "Range: bytes=1000000-1999999,5000000-5000009"
        [response] = await fetch(client.port, get("/static/big.bin", ranges))
        assert response.status == 206
        assert data[1000000:2000000] in response.body and data[5000000:5000010] in response.body


async def large_file_takes_bounded_memory(tmp_path: Path) -> None:
    size = 32 * 1024 * 1024
    (tmp_path / "big.bin").write_bytes(b"x" * size)
    async with TestClient(files_app(tmp_path)) as client:
        loop = asyncio.get_running_loop()
        sock = socket.socket()
        sock.setblocking(False)
        buffer = bytearray(65536)  # the client keeps nothing: what is traced is the server's
        tracemalloc.start()
        try:
            await loop.sock_connect(sock, ("127.0.0.1", client.port))
            await loop.sock_sendall(sock, get("/static/big.bin"))
            received = 0
            while received < size:  # the head's bytes too: enough to have seen the whole body go out
                count = await loop.sock_recv_into(sock, buffer)
                assert count
                received += count
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
            sock.close()
    assert peak < 4 * 1024 * 1024, peak  # a chunk and the transport's buffer, never the file


async def test_a_large_file_takes_bounded_memory_by_sendfile(tmp_path):
    await large_file_takes_bounded_memory(tmp_path)


def test_a_large_file_takes_bounded_memory_on_uvloop(tmp_path):
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(large_file_takes_bounded_memory(tmp_path))


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@asynccontextmanager
async def serving(app: App, **options: Any) -> AsyncIterator[Server]:
    server = Server(app, host="127.0.0.1", port=0, **options)
    await server.start()
    try:
        yield server
    finally:
        await server.stop(timeout=2)


async def client_leaving_mid_file_leaves_no_open_file(tmp_path: Path, **options: Any) -> None:
    (tmp_path / "big.bin").write_bytes(os.urandom(32 * 1024 * 1024))
    async with serving(files_app(tmp_path), **options) as server:
        client = SimpleNamespace(port=int(server.url.rsplit(":", 1)[1]))
        [warm] = await fetch(client.port, get("/static/big.bin", "Range: bytes=0-3"))
        assert warm.status == 206  # the server's own descriptors settle
        before = open_fds()
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        loop = asyncio.get_running_loop()
        await loop.sock_connect(sock, ("127.0.0.1", client.port))
        await loop.sock_sendall(sock, get("/static/big.bin"))
        assert (await loop.sock_recv(sock, 4096)).startswith(b"HTTP/1.1 200")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # a reset on close
        sock.close()
        for _ in range(500):  # until the server has seen the reset and closed the file (no duration asserted)
            if open_fds() <= before:
                break
            await asyncio.sleep(0.01)
        assert open_fds() <= before  # the sockets gone, and no file left open by the server
        [after] = await fetch(client.port, get("/static/big.bin", "Range: bytes=0-3"))
        assert after.status == 206  # the server goes on serving


async def test_a_large_file_arrives_whole_by_sendfile(tmp_path):
    await large_file_arrives_whole(tmp_path)


def test_a_large_file_arrives_whole_on_uvloop(tmp_path):
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(large_file_arrives_whole(tmp_path))


@pytest.mark.parametrize("cancel_on_disconnect", [False, True])
async def test_a_client_leaving_mid_file_leaves_no_open_file_by_sendfile(tmp_path, cancel_on_disconnect):
    await client_leaving_mid_file_leaves_no_open_file(tmp_path, cancel_on_disconnect=cancel_on_disconnect)


@pytest.mark.parametrize("cancel_on_disconnect", [False, True])
def test_a_client_leaving_mid_file_leaves_no_open_file_on_uvloop(tmp_path, cancel_on_disconnect):
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(client_leaving_mid_file_leaves_no_open_file(tmp_path, cancel_on_disconnect=cancel_on_disconnect))


@pytest.mark.parametrize("loop_name", ["asyncio", "uvloop"])
def test_an_empty_file_is_sent_with_its_head(root, loop_name):
    (root / "empty.txt").write_bytes(b"")

    async def main() -> None:
        app = files_app(root)
        async with TestClient(app) as client:
            [response] = await fetch(client.server.port, get("/static/empty.txt"))
            assert response.status == 200 and response.body == b"" and response.header("content-length") == "0"
            [response] = await fetch(client.server.port, get("/static/empty.txt", "Range: bytes=0-"))
            assert response.status == 200 and response.body == b""  # the range ignored (RFC 9110 §14.2: MAY)

    if loop_name == "uvloop":
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(main())
    else:
        asyncio.run(main())

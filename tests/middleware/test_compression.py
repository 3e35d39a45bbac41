"""Response compression and bounded request decompression (aiorest.middleware), over real sockets."""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import subprocess
import sys
import tracemalloc
import zlib
from collections.abc import AsyncIterator

import pytest

from aiorest import App, Compression, Decompression, JSONResponse, Limits, Request, Response, Router, StreamResponse
from aiorest.middleware.compression import BROTLI_AVAILABLE, compressible, negotiate, parse_accept_encoding
from tests.rawclient import fetch, get

BIG = {"items": [{"id": i, "name": f"note {i}", "done": i % 2 == 0} for i in range(200)]}  # ~10 KB of JSON
JSON = {"Content-Type": "application/json"}
SMALL = {"id": 1, "name": "a note", "tags": ["x", "y"], "pad": "p" * 40}  # ~100 B


def make_app(**options: object) -> App:
    app = App(middleware=[Compression(**options)])  # type: ignore[arg-type]

    @app.get("/big")
    async def big(request: Request) -> dict[str, object]:
        return BIG

    @app.get("/small")
    async def small(request: Request) -> dict[str, object]:
        return SMALL

    @app.get("/text")
    async def text(request: Request) -> Response:
        return Response("hello world " * 500)

    @app.get("/random")
    async def random(request: Request) -> Response:
        # the 8 KiB sample does not shrink: sent as is, though the zeros after it would
        return Response(os.urandom(10_000) + bytes(40_000), media_type="text/plain")

    @app.get("/noise")
    async def noise(request: Request) -> Response:
        return Response(os.urandom(5_000), media_type="text/plain")  # below the sample size: tried whole

    @app.get("/png")
    async def png(request: Request) -> Response:
        return Response(b"\x00" * 10_000, media_type="image/png")

    @app.get("/encoded")
    async def encoded(request: Request) -> Response:
        return Response(gzip.compress(b"a" * 10_000), headers={"Content-Encoding": "gzip"}, media_type="text/plain")

    @app.get("/vary")
    async def vary(request: Request) -> Response:
        return Response("v" * 2000, headers={"Vary": "Origin"})

    @app.get("/vary-star")
    async def vary_star(request: Request) -> Response:
        return Response("v" * 2000, headers={"Vary": "*"})

    @app.get("/typed-by-header")
    async def typed_by_header(request: Request) -> Response:
        return Response(b"\x00" * 2000, headers={"Content-Type": "image/webp"}, media_type="text/plain")

    @app.get("/stream")
    async def stream(request: Request) -> StreamResponse:
        async def lines() -> AsyncIterator[str]:
            for i in range(5):
                yield json.dumps({"line": i, "text": "x" * 200}) + "\n"
                await asyncio.sleep(0)

        return StreamResponse(lines(), media_type="application/x-ndjson")

    @app.get("/nothing")
    async def nothing(request: Request) -> None:
        return None

    return app


# -- negotiation ----------------------------------------------------------------------


def test_parse_accept_encoding_q_values_bounded() -> None:
    assert parse_accept_encoding("gzip;q=0.5, BR , identity;q=0, x;q=abc, y;q=2") == {
        "gzip": 0.5,
        "br": 1.0,
        "identity": 0.0,
        "x": 0.0,
        "y": 0.0,
    }
    assert len(parse_accept_encoding(", ".join(f"c{i}" for i in range(1000)))) == 16
    assert parse_accept_encoding("a" * 10_000 + ", gzip") == {"a" * 512: 1.0}


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("gzip, deflate, br", "br"),
        ("gzip", "gzip"),
        ("x-gzip", "gzip"),
        ("br;q=0.5, gzip", "gzip"),
        ("br;q=0, gzip;q=0", None),
        ("gzip;q=0, *", "br"),
        ("*;q=0", None),
        ("*", "br"),
        ("deflate", None),
        ("gzip;q=0.5, identity", None),
        ("gzip;q=0.5", "gzip"),
        ("identity", None),
        ("", None),
    ],
)
def test_negotiate(header: str, expected: str | None) -> None:
    assert negotiate(header, ("br", "gzip")) == expected


def test_negotiate_without_brotli() -> None:
    assert negotiate("br, gzip;q=0.9", ("gzip",)) == "gzip"
    assert negotiate("br", ("gzip",)) is None


# -- responses ------------------------------------------------------------------------


async def test_big_json_gzip_ratio_and_content_length(aiorest_client) -> None:
    client = await aiorest_client(make_app(), auto_decompress=False)
    plain = json.dumps(BIG, separators=(",", ":")).encode()
    async with client.get("/big", headers={"Accept-Encoding": "gzip"}) as response:
        body = await response.read()
        assert response.status == 200
        assert response.headers["Content-Encoding"] == "gzip"
        assert response.headers["Vary"] == "Accept-Encoding"
        assert response.headers["Content-Type"] == "application/json"
        assert int(response.headers["Content-Length"]) == len(body)
    assert json.loads(gzip.decompress(body)) == BIG
    assert len(plain) >= 8000
    assert len(plain) / len(body) >= 3, (len(plain), len(body))


async def test_no_accept_encoding_is_identity_but_varies(aiorest_client) -> None:
    client = await aiorest_client(make_app(), auto_decompress=False)
    for headers in ({}, {"Accept-Encoding": "identity"}, {"Accept-Encoding": "gzip;q=0, br;q=0"}):
        async with client.get("/big", headers=headers | {"Accept-Encoding": headers.get("Accept-Encoding", "")}) as r:
            assert "Content-Encoding" not in r.headers
            assert r.headers["Vary"] == "Accept-Encoding"
            assert json.loads(await r.read()) == BIG


async def test_small_body_untouched(aiorest_client) -> None:
    client = await aiorest_client(make_app(), auto_decompress=False)
    async with client.get("/small", headers={"Accept-Encoding": "gzip"}) as response:
        body = await response.read()
        assert len(body) < 500
        assert "Content-Encoding" not in response.headers
        assert response.headers["Vary"] == "Accept-Encoding"
        assert json.loads(body) == SMALL


async def test_threshold_is_configurable(aiorest_client) -> None:
    client = await aiorest_client(make_app(minimum_size=10), auto_decompress=False)
    async with client.get("/small", headers={"Accept-Encoding": "gzip"}) as response:
        body = await response.read()
        # a 100 B body does not shrink by 10% either way: sent as is, or compressed and smaller
        if "Content-Encoding" in response.headers:
            assert json.loads(gzip.decompress(body)) == SMALL
        else:
            assert json.loads(body) == SMALL
    async with client.get("/text", headers={"Accept-Encoding": "gzip"}) as response:
        assert response.headers["Content-Encoding"] == "gzip"
        assert gzip.decompress(await response.read()) == b"hello world " * 500


async def test_incompressible_sample_sent_as_is(aiorest_client) -> None:
    client = await aiorest_client(make_app(), auto_decompress=False)
    async with client.get("/random", headers={"Accept-Encoding": "gzip"}) as response:
        body = await response.read()
        assert response.headers["Content-Type"].startswith("text/plain")
        assert "Content-Encoding" not in response.headers
        assert response.headers["Vary"] == "Accept-Encoding"
        assert len(body) == 50_000
    async with client.get("/noise", headers={"Accept-Encoding": "gzip"}) as response:
        assert "Content-Encoding" not in response.headers
        assert len(await response.read()) == 5_000


async def test_already_compressed_type_untouched(aiorest_client) -> None:
    client = await aiorest_client(make_app(), auto_decompress=False)
    async with client.get("/png", headers={"Accept-Encoding": "gzip, br"}) as response:
        assert await response.read() == b"\x00" * 10_000
        assert "Content-Encoding" not in response.headers
        assert "Vary" not in response.headers


async def test_existing_content_encoding_untouched(aiorest_client) -> None:
    client = await aiorest_client(make_app(), auto_decompress=False)
    async with client.get("/encoded", headers={"Accept-Encoding": "br, gzip"}) as response:
        assert response.headers["Content-Encoding"] == "gzip"
        assert gzip.decompress(await response.read()) == b"a" * 10_000


async def test_vary_appended(aiorest_client) -> None:
    client = await aiorest_client(make_app(), auto_decompress=False)
    async with client.get("/vary", headers={"Accept-Encoding": "gzip"}) as response:
        assert response.headers["Vary"] == "Origin, Accept-Encoding"
        assert response.headers["Content-Encoding"] == "gzip"
    async with client.get("/vary-star", headers={"Accept-Encoding": "gzip"}) as response:
        assert response.headers.getall("Vary") == ["*"]
        assert response.headers["Content-Encoding"] == "gzip"
    async with client.get("/typed-by-header", headers={"Accept-Encoding": "gzip"}) as response:
        assert response.headers["Content-Type"] == "image/webp" and "Content-Encoding" not in response.headers
        assert await response.read() == b"\x00" * 2000


async def test_head_range_and_204_untouched(aiorest_client) -> None:
    client = await aiorest_client(make_app(), auto_decompress=False)
    plain = len(json.dumps(BIG, separators=(",", ":")))
    async with client.head("/big", headers={"Accept-Encoding": "gzip"}) as response:
        assert "Content-Encoding" not in response.headers
        assert response.headers["Vary"] == "Accept-Encoding"
        assert int(response.headers["Content-Length"]) == plain
    async with client.get("/big", headers={"Accept-Encoding": "gzip", "Range": "bytes=0-10"}) as response:
        assert "Content-Encoding" not in response.headers
        assert len(await response.read()) == plain
    async with client.get("/nothing", headers={"Accept-Encoding": "gzip"}) as response:
        assert response.status == 204 and "Content-Encoding" not in response.headers


async def test_stream_compressed_chunk_by_chunk(aiorest_client) -> None:
    client = await aiorest_client(make_app(), auto_decompress=False)
    port = client.port
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(get("/stream", "Accept-Encoding: gzip"))
        head = await reader.readuntil(b"\r\n\r\n")
        assert b"Content-Encoding: gzip\r\n" in head
        assert b"Transfer-Encoding: chunked\r\n" in head
        assert b"Content-Length" not in head
        decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
        lines = []
        while True:
            size = int((await reader.readuntil(b"\r\n"))[:-2], 16)
            chunk = await reader.readexactly(size)
            await reader.readexactly(2)
            if size == 0:
                break
            # each chunk decodes on its own to whole lines: flushed as produced
            text = decoder.decompress(chunk)
            if text:
                assert text.endswith(b"\n")
                lines.extend(text.splitlines())
        assert decoder.eof
        assert [json.loads(line)["line"] for line in lines] == [0, 1, 2, 3, 4]
    finally:
        writer.close()


@pytest.mark.skipif(not BROTLI_AVAILABLE, reason="the brotli extra is not installed")
async def test_brotli(aiorest_client) -> None:
    import brotli

    client = await aiorest_client(make_app(), auto_decompress=False)
    async with client.get("/big", headers={"Accept-Encoding": "gzip, br"}) as response:
        body = await response.read()
        assert response.headers["Content-Encoding"] == "br"
        assert int(response.headers["Content-Length"]) == len(body)
    assert json.loads(brotli.decompress(body)) == BIG
    (streamed,) = await fetch(client.port, get("/stream", "Accept-Encoding: br"))
    assert streamed.header("content-encoding") == "br"
    assert len(brotli.decompress(streamed.body).splitlines()) == 5
    client_gzip_only = await aiorest_client(make_app(brotli=False), auto_decompress=False)
    async with client_gzip_only.get("/big", headers={"Accept-Encoding": "br, gzip"}) as response:
        assert response.headers["Content-Encoding"] == "gzip"


def test_bad_options_refused() -> None:
    with pytest.raises(ValueError):
        Compression(level=0)
    with pytest.raises(ValueError):
        Compression(minimum_size=-1)
    with pytest.raises(ValueError):
        Compression(brotli_quality=12)
    with pytest.raises(ValueError):
        Decompression(max_size=0)


async def test_router_only(aiorest_client) -> None:
    notes = Router(middleware=[Compression()])

    @notes.get("/notes")
    async def list_notes(request: Request) -> dict[str, object]:
        return BIG

    app = App()
    app.include(notes)

    @app.get("/json")
    async def plain(request: Request) -> JSONResponse:
        return JSONResponse(BIG)

    client = await aiorest_client(app, auto_decompress=False)
    async with client.get("/notes", headers={"Accept-Encoding": "gzip"}) as response:
        assert response.headers["Content-Encoding"] == "gzip"
    async with client.get("/json", headers={"Accept-Encoding": "gzip"}) as response:
        assert "Content-Encoding" not in response.headers and "Vary" not in response.headers


# -- request bodies -------------------------------------------------------------------


def echo_app(max_size: int | None = None, limits: Limits | None = None) -> App:
    app = App(middleware=[Decompression(max_size=max_size)], limits=limits)

    @app.post("/echo")
    async def echo(request: Request) -> dict[str, object]:
        return {"size": len(await request.read()), "data": await request.json()}

    inner = Router(middleware=[Decompression()])  # applied twice: expands once

    @inner.post("/headers")
    async def headers(request: Request) -> dict[str, object]:
        body = await request.read()
        return {
            "size": len(body),
            "length": request.headers.get("content-length"),
            "encoding": request.headers.get("content-encoding"),
        }

    app.include(inner)

    @app.post("/stream")
    async def stream(request: Request) -> dict[str, int]:
        return {"size": sum([len(chunk) async for chunk in request.stream()])}

    return app


async def test_request_gzip_and_deflate_decompressed(aiorest_client) -> None:
    client = await aiorest_client(echo_app())
    data = {"note": "x" * 5000}
    raw = json.dumps(data).encode()
    for encoding, body in (
        ("gzip", gzip.compress(raw)),
        ("deflate", zlib.compress(raw)),
        ("identity", raw),
        (None, raw),
    ):
        headers = {"Content-Type": "application/json"}
        if encoding:
            headers["Content-Encoding"] = encoding
        async with client.post("/echo", data=body, headers=headers) as response:
            assert response.status == 200, await response.text()
            assert await response.json() == {"size": len(raw), "data": data}
    async with client.post("/stream", data=gzip.compress(raw), headers={"Content-Encoding": "gzip"}) as response:
        assert await response.json() == {"size": len(raw)}


@pytest.mark.skipif(not BROTLI_AVAILABLE, reason="the brotli extra is not installed")
async def test_request_brotli(aiorest_client) -> None:
    import brotli

    client = await aiorest_client(echo_app(max_size=1000))
    raw = json.dumps({"a": "b" * 500}).encode()
    async with client.post("/echo", data=brotli.compress(raw), headers={"Content-Encoding": "br", **JSON}) as response:
        assert (await response.json())["size"] == len(raw)
    bomb = brotli.compress(b"\x00" * 10_000_000)
    async with client.post("/echo", data=bomb, headers={"Content-Encoding": "br"}) as response:
        assert response.status == 413
        assert "exceeds the limit of 1000" in (await response.json())["error"]["message"]


async def test_gzip_bomb_refused_without_expanding(aiorest_client) -> None:
    bomb = gzip.compress(b"\x00" * 10_000_000, 9)
    assert len(bomb) < 20_000
    client = await aiorest_client(echo_app(limits=Limits(max_body_size=64 * 1024)))
    tracemalloc.start()
    try:
        async with client.post("/echo", data=bomb, headers={"Content-Encoding": "gzip"}) as response:
            assert response.status == 413
            error = (await response.json())["error"]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "decompressed request body exceeds the limit of 65536 bytes" in error["message"]
    assert peak < 2_000_000, peak  # never 10 MB


async def test_corrupt_truncated_and_trailing_are_400(aiorest_client) -> None:
    client = await aiorest_client(echo_app())
    good = gzip.compress(b'{"a": 1}')
    for body in (b"not gzip at all", good[:-6], good + b"junk"):
        async with client.post("/echo", data=body, headers={"Content-Encoding": "gzip"}) as response:
            assert response.status == 400, body
            assert "error" in await response.json()


async def test_expanded_request_reads_as_plain_even_through_two_decompressions(aiorest_client) -> None:
    client = await aiorest_client(echo_app())
    raw = b"z" * 3000
    async with client.post("/headers", data=gzip.compress(raw), headers={"Content-Encoding": "gzip"}) as response:
        assert await response.json() == {"size": 3000, "length": "3000", "encoding": None}
    async with client.post("/headers", data=raw) as response:
        assert await response.json() == {"size": 3000, "length": "3000", "encoding": None}


async def test_several_encodings_are_415_not_expanded_once(aiorest_client) -> None:
    client = await aiorest_client(echo_app())
    twice = gzip.compress(gzip.compress(b'{"a": 1}'))
    (response,) = await fetch(
        client.port,
        b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Encoding: gzip\r\nContent-Encoding: gzip\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(twice), twice),
    )
    assert response.status == 415
    assert b"gzip, gzip" in response.body


async def test_unknown_encoding_is_415(aiorest_client) -> None:
    client = await aiorest_client(echo_app())
    for encoding in ("compress", "gzip, gzip", "zstd"):
        async with client.post("/echo", data=b"{}", headers={"Content-Encoding": encoding}) as response:
            assert response.status == 415
            assert "gzip" in response.headers["Accept-Encoding"]
            assert "Content-Encoding" in (await response.json())["error"]["message"]


async def test_empty_encoded_body_is_empty(aiorest_client) -> None:
    client = await aiorest_client(echo_app())
    async with client.post("/echo", data=b"", headers={"Content-Encoding": "gzip", **JSON}) as response:
        assert response.status == 400
        assert "empty" in (await response.json())["error"]["message"]


async def test_default_limit_is_the_apps(aiorest_client) -> None:
    # App(limits=...), not the connection's: the middleware reads nothing of the server.
    client = await aiorest_client(echo_app(limits=Limits(max_body_size=1000)))
    raw = json.dumps({"a": "b" * 2000}).encode()
    (response,) = await fetch(
        client.port,
        b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n%s"
        % (len(gzip.compress(raw)), gzip.compress(raw)),
    )
    assert response.status == 413
    assert b"limit of 1000 bytes" in response.body


def test_without_brotli_only_gzip_and_deflate() -> None:
    script = (
        "import sys; sys.modules['brotli'] = None\n"
        "from aiorest.middleware import BROTLI_AVAILABLE, Compression, Decompression\n"
        "assert not BROTLI_AVAILABLE\n"
        "assert Compression().codings == ('gzip',)\n"
        "assert Decompression().codings == ('gzip', 'deflate')\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr


@pytest.mark.parametrize(
    ("media_type", "expected"),
    [
        ("text/html; charset=utf-8", True),
        ("application/json", True),
        ("application/problem+json", True),
        ("application/atom+xml", True),
        ("text/javascript", True),
        ("image/svg+xml", True),
        ("image/png", False),
        ("image/jpeg", False),
        ("application/zip", False),
        ("application/gzip", False),
        ("font/woff2", False),
        ("video/mp4", False),
        ("audio/ogg", False),
        ("application/octet-stream", False),
    ],
)
def test_compressible(media_type: str, expected: bool) -> None:
    assert compressible(media_type) is expected


async def test_a_compressed_body_gets_a_weak_etag_that_still_answers_304(aiorest_client) -> None:
    app = App(middleware=[Compression()])
    body = {"items": ["repeat me"] * 500}

    @app.get("/doc")
    async def doc(request: Request) -> JSONResponse:
        return JSONResponse(body, headers={"ETag": '"v7"'})

    client = await aiorest_client(app)
    async with client.get("/doc", headers={"Accept-Encoding": "gzip"}) as response:
        assert response.headers["Content-Encoding"] == "gzip"
        assert response.headers["ETag"] == 'W/"v7"'  # the gzip bytes are not the ones "v7" named
    async with client.get("/doc", headers={"Accept-Encoding": "identity"}) as response:
        assert "Content-Encoding" not in response.headers and response.headers["ETag"] == '"v7"'
    headers = {"Accept-Encoding": "gzip", "If-None-Match": 'W/"v7"'}
    async with client.get("/doc", headers=headers) as response:
        assert response.status == 304

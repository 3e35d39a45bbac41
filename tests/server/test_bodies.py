"""Bodies sent at the client's pace, over real sockets: what they may hold, and for how long (issue 34)."""

from __future__ import annotations

import asyncio

from aiorest import App, Limits, Server
from tests.rawhttp import read_responses


def reading_app() -> App:
    app = App()

    @app.post("/upload")
    async def upload(request):
        return {"length": len(await request.read())}

    return app


async def stalled(port: int, length: int, sent: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % length + b"x" * sent)
    await writer.drain()
    return reader, writer


async def test_bodies_a_handler_reads_whole_count_against_the_servers_memory_while_they_arrive():
    # Issue 34, point 2: read() gathered a stalled body in the handler, outside any bound: 200 connections stalled
    # after 250 KiB took the server from 37 to 88 MiB.
    limits = Limits(max_body_size=100_000, body_buffer=100_000, max_body_memory=250_000)
    server = Server(reading_app(), port=0, limits=limits)
    await server.start()
    try:
        first = [await stalled(server.port, 100_000, 90_000) for _ in range(2)]
        await asyncio.sleep(0.2)
        reader, writer = await stalled(server.port, 100_000, 90_000)  # 270,000 bytes held in all: refused
        [response], closed = await read_responses(reader, 1)
        assert response.status == 503 and response.header("Retry-After") == "1" and closed
        writer.close()
        for reader, writer in first:  # the first two are whole once their clients go on
            writer.write(b"x" * 10_000)
            [response], _ = await read_responses(reader, 1)
            assert response.status == 200 and response.body == b'{"length":100000}'
            writer.close()
        reader, writer = await stalled(server.port, 100_000, 100_000)  # given back: served
        [response], _ = await read_responses(reader, 1)
        assert response.status == 200
        writer.close()
    finally:
        await server.stop(timeout=2)

"""aiohttp.web on uvloop: the live endpoints (heartbeat.py), written the usual way.

python -m load.live.apps.aiohttp_app --port PORT
"""

from __future__ import annotations

import argparse
import asyncio

import uvloop
from aiohttp import WSMsgType, web

from load.live.apps.heartbeat import QUEUE, Heartbeat, offer_all, payload

heartbeat = Heartbeat()
sockets: set[web.WebSocketResponse] = set()
streams: set[asyncio.Queue[str]] = set()


async def ws(request: web.Request) -> web.WebSocketResponse:
    socket = web.WebSocketResponse(compress=False)
    await socket.prepare(request)
    sockets.add(socket)
    try:
        async for message in socket:
            if message.type == WSMsgType.TEXT:
                await socket.send_str(message.data)
    finally:
        sockets.discard(socket)
    return socket


async def sse(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    queue: asyncio.Queue[str] = asyncio.Queue(QUEUE)
    streams.add(queue)
    try:
        await response.write(b": ok\n\n")
        while True:
            await response.write(f"data: {await queue.get()}\n\n".encode())
    finally:
        streams.discard(queue)


async def broadcast(request: web.Request) -> web.Response:
    heartbeat.mark()
    message = payload()
    offer_all(streams, message)
    for socket in list(sockets):
        await socket.send_str(message)
    return web.json_response({"ws": len(sockets), "sse": len(streams)})


async def stats(request: web.Request) -> web.Response:
    return web.json_response(heartbeat.stats(ws=len(sockets), sse=len(streams)))


async def start(_: web.Application) -> None:
    heartbeat.start()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    port = parser.parse_args().port
    app = web.Application()
    app.router.add_get("/ws", ws)
    app.router.add_get("/sse", sse)
    app.router.add_post("/broadcast", broadcast)
    app.router.add_get("/stats", stats)
    app.on_startup.append(start)
    uvloop.install()
    web.run_app(app, host="127.0.0.1", port=port, backlog=4096, access_log=None, print=None)


if __name__ == "__main__":
    main()

"""Starlette on uvicorn (httptools, uvloop, the ``websockets`` library's implementation): the live endpoints.

python -m load.live.apps.starlette_app --port PORT
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from load.live.apps.heartbeat import QUEUE, Heartbeat, offer_all, payload

heartbeat = Heartbeat()
sockets: set[WebSocket] = set()
streams: set[asyncio.Queue[str]] = set()


async def ws(socket: WebSocket) -> None:
    await socket.accept()
    sockets.add(socket)
    try:
        while True:
            await socket.send_text(await socket.receive_text())
    except WebSocketDisconnect:
        pass
    finally:
        sockets.discard(socket)


async def sse(request: Request) -> StreamingResponse:
    async def events() -> AsyncIterator[bytes]:
        queue: asyncio.Queue[str] = asyncio.Queue(QUEUE)
        streams.add(queue)
        try:
            yield b": ok\n\n"
            while True:
                yield f"data: {await queue.get()}\n\n".encode()
        finally:
            streams.discard(queue)

    return StreamingResponse(events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


async def broadcast(request: Request) -> JSONResponse:
    heartbeat.mark()
    message = payload()
    offer_all(streams, message)
    for socket in list(sockets):
        await socket.send_text(message)
    return JSONResponse({"ws": len(sockets), "sse": len(streams)})


async def stats(request: Request) -> JSONResponse:
    return JSONResponse(heartbeat.stats(ws=len(sockets), sse=len(streams)))


@asynccontextmanager
async def lifespan(_: Starlette) -> AsyncIterator[None]:
    heartbeat.start()
    yield


app = Starlette(
    routes=[
        WebSocketRoute("/ws", ws),
        Route("/sse", sse),
        Route("/broadcast", broadcast, methods=["POST"]),
        Route("/stats", stats),
    ],
    lifespan=lifespan,
)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=parser.parse_args().port,
        loop="uvloop",
        http="httptools",
        ws="websockets",
        ws_ping_interval=None,
        ws_per_message_deflate=False,
        backlog=4096,
        log_level="warning",
        access_log=False,
    )


if __name__ == "__main__":
    main()

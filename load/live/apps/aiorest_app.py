"""aiorest: the live endpoints (heartbeat.py), served by ``python -m aiorest run``.

The broadcast writes to each WebSocket in turn (``send_text`` waits only for a client that stopped
reading); each event stream reads its own bounded queue.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from aiorest import App, EventSourceResponse, Request, ServerSentEvent, WebSocket, WebSocketLimits
from load.live.apps.heartbeat import QUEUE, Heartbeat, offer_all, payload

app = App()
heartbeat = Heartbeat()
sockets: set[WebSocket] = set()
streams: set[asyncio.Queue[str]] = set()


async def start(_: App) -> None:
    heartbeat.start()


app.on_startup.append(start)


@app.websocket("/ws", limits=WebSocketLimits(ping_interval=None, compression=False))
async def ws(socket: WebSocket) -> None:
    await socket.accept()
    sockets.add(socket)
    try:
        async for message in socket:
            await socket.send_text(message if isinstance(message, str) else message.decode())
    finally:
        sockets.discard(socket)


@app.get("/sse")
async def sse(request: Request) -> EventSourceResponse:
    async def events() -> AsyncIterator[ServerSentEvent | str]:
        queue: asyncio.Queue[str] = asyncio.Queue(QUEUE)
        streams.add(queue)
        try:
            yield ServerSentEvent(comment="ok")
            while True:
                yield await queue.get()  # plain data: each an event's data (EventSourceResponse)
        finally:
            streams.discard(queue)

    return EventSourceResponse(events(), heartbeat=None)


@app.post("/broadcast")
async def broadcast(request: Request) -> dict[str, int]:
    heartbeat.mark()
    message = payload()
    offer_all(streams, message)
    for socket in list(sockets):
        await socket.send_text(message)
    return {"ws": len(sockets), "sse": len(streams)}


@app.get("/stats")
async def stats(request: Request) -> dict[str, Any]:
    return heartbeat.stats(ws=len(sockets), sse=len(streams))

"""An app that shows what reaches it through nginx, for tests/deploy/test_nginx.py."""

import asyncio
import hashlib
import os

from aiorest import (
    App,
    EventSourceResponse,
    HTTPNotFound,
    Request,
    Response,
    ServerSentEvent,
    StreamResponse,
    WebSocket,
    WebSocketLimits,
)

app = App()
released = asyncio.Event()  # POST /release: the event stream's second event may go


@app.get("/")
async def index(request: Request) -> dict[str, object]:
    """Which process and which connection answered, and the raw request head it saw."""
    return {
        "pid": os.getpid(),
        "client": request.client,
        "id": request.id,
        "method": request.method,
        "headers": [[name, value] for name, value in request.headers.items()],
    }


@app.post("/echo")
async def echo(request: Request) -> Response:
    body = await request.read()
    return Response(
        body,
        headers={
            "X-Body-SHA256": hashlib.sha256(body).hexdigest(),
            "X-Seen-Content-Length": request.headers.get("content-length", "-"),
            "X-Seen-Transfer-Encoding": request.headers.get("transfer-encoding", "-"),
        },
        media_type="application/json",
    )


@app.get("/stream")
async def stream(request: Request) -> StreamResponse:
    count, size = int(request.query.get("chunks", "50")), int(request.query.get("size", "10000"))

    async def chunks():
        for index in range(count):
            yield bytes([65 + index % 26]) * size
            await asyncio.sleep(0.001)

    return StreamResponse(chunks())


@app.get("/events")
async def events(request: Request) -> EventSourceResponse:
    """One event, a second once ``POST /release`` came, then heartbeats until the client or the server ends it."""
    heartbeat = float(request.query.get("heartbeat", "15"))

    async def produce():
        yield ServerSentEvent(data=str(os.getpid()), event="pid", id=f"{request.last_event_id or ''}1")
        await released.wait()
        released.clear()
        yield ServerSentEvent(data="released", id="2")
        await asyncio.Event().wait()  # only the end of the stream ends this

    return EventSourceResponse(produce(), heartbeat=heartbeat)


@app.get("/counter")
async def counter(request: Request) -> EventSourceResponse:
    """Events numbered 1, 2, 3... every ``interval`` s, from after ``Last-Event-ID``: any process resumes a stream."""
    interval = float(request.query.get("interval", "0.02"))
    after = int(request.last_event_id or "0")

    async def produce():
        number = after
        while True:
            number += 1
            yield ServerSentEvent(data=str(os.getpid()), id=str(number))
            await asyncio.sleep(interval)

    return EventSourceResponse(produce(), heartbeat=1.0)


@app.websocket("/ws")
async def ws_echo(ws: WebSocket) -> None:
    """Says which process answered, then echoes each message."""
    await ws.accept()
    await ws.send_text(str(os.getpid()))
    async for message in ws:
        await ws.send(message)


@app.websocket("/ws/pinged", limits=WebSocketLimits(ping_interval=0.5, ping_timeout=1.5))
async def pinged(ws: WebSocket) -> None:
    """Pings often, and closes 1011 when a pong is late: quiet, it lives on its pongs alone."""
    await ws.accept()
    async for message in ws:
        await ws.send(message)


@app.post("/release")
async def release(request: Request) -> dict[str, bool]:
    released.set()
    return {"released": True}


@app.get("/notes/{note_id:int}")
async def note(request: Request) -> dict[str, int]:
    raise HTTPNotFound("no such note", details={"note_id": request.path_params["note_id"]})


@app.route("/slow", methods=["GET", "POST"])
async def slow(request: Request) -> dict[str, int]:
    await request.read()
    await asyncio.sleep(float(request.query.get("seconds", "1")))
    return {"pid": os.getpid()}


@app.get("/metrics")
async def metrics(request: Request) -> Response:
    return Response(b"aiorest_requests_total 1\n", media_type="text/plain")

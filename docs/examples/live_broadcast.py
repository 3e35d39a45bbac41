"""Broadcast: one message to every WebSocket and every event stream, each behind a bounded queue."""

import asyncio
from collections.abc import AsyncIterator

from aiorest import App, EventSourceResponse, Request, ServerSentEvent, WebSocket, WebSocketDisconnect

app = App()


class Subscriber:
    """What one client has not been sent yet: at most ``size`` messages, then it is dropped."""

    def __init__(self, size: int = 64) -> None:
        self.queue: asyncio.Queue[str | None] = asyncio.Queue(size)

    def offer(self, message: str) -> bool:
        try:
            self.queue.put_nowait(message)
            return True
        except asyncio.QueueFull:  # a slow client must not hold the others back, nor fill the memory
            self.queue.get_nowait()
            self.queue.put_nowait(None)  # None: "you fell behind", in place of its oldest message
            return False

    async def __aiter__(self) -> AsyncIterator[str]:
        while (message := await self.queue.get()) is not None:
            yield message


subscribers: set[Subscriber] = set()


def broadcast(message: str) -> int:
    """Queue ``message`` for every subscriber, never waiting; drop those that fell behind."""
    for subscriber in list(subscribers):
        if not subscriber.offer(message):
            subscribers.discard(subscriber)
    return len(subscribers)


@app.post("/announce")
async def announce(request: Request) -> dict[str, int]:
    return {"sent_to": broadcast((await request.json())["text"])}


@app.websocket("/live/ws")
async def live_ws(ws: WebSocket) -> None:
    await ws.accept()
    subscriber = Subscriber()
    subscribers.add(subscriber)
    sender = asyncio.create_task(send_all(ws, subscriber))
    try:
        async for _ in ws:  # this feed goes one way; reading is how the client's leaving is seen
            pass
    finally:
        sender.cancel()
        subscribers.discard(subscriber)


async def send_all(ws: WebSocket, subscriber: Subscriber) -> None:
    try:
        async for message in subscriber:
            await ws.send_text(message)  # waits for a slow client (write_limit), up to send_timeout
        await ws.close(1008, "too slow: reconnect")
    except WebSocketDisconnect:
        pass


@app.get("/live/events")
async def live_events(request: Request) -> EventSourceResponse:
    async def produce() -> AsyncIterator[ServerSentEvent]:
        subscriber = Subscriber()
        subscribers.add(subscriber)
        try:
            async for message in subscriber:
                yield ServerSentEvent(data=message, event="announcement")
        finally:  # the stream ended (fell behind), or the client left: no dead subscriber stays behind
            subscribers.discard(subscriber)

    return EventSourceResponse(produce())

"""Server-Sent Events: a clock that streams ticks, resuming where a reconnecting client left off."""

import asyncio
from collections.abc import AsyncIterator

from aiorest import App, EventSourceResponse, Request, ServerSentEvent

app = App()
app.state.closed = []  # the streams that ended, and where


@app.get("/ticks")
async def ticks(request: Request) -> EventSourceResponse:
    # A browser that reconnects sends the id of the last event it received.
    start = int(request.last_event_id or 0) + 1
    every = float(request.query.get("every", "1"))

    async def produce() -> AsyncIterator[ServerSentEvent]:
        n = start
        try:
            for n in range(start, start + 1000):
                yield ServerSentEvent(data={"n": n}, event="tick", id=str(n))  # data: JSON, with the app's codec
                await asyncio.sleep(every)
        finally:
            # Runs when the client goes away or the server stops, too: release what the stream held here.
            app.state.closed.append(n)

    # A heartbeat comment every 15 s keeps proxies from closing a quiet stream; retry: the client's
    # reconnection delay, in milliseconds.
    return EventSourceResponse(produce(), heartbeat=15.0, retry=2000)

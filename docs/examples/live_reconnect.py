"""Reconnecting: a stream resumes after Last-Event-ID from a bounded log; older than the log, it says resync."""

import asyncio
from collections import deque
from collections.abc import AsyncIterator

from aiorest import App, EventSourceResponse, Request, ServerSentEvent

app = App()
recent: deque[tuple[int, str]] = deque(maxlen=100)  # the last 100 events: (id, data)
changed = asyncio.Condition()


@app.post("/scores")
async def score(request: Request) -> dict[str, int]:
    # One process: ids from a counter. In a cluster take them from the database (a serial
    # column, as live_notes.py does) so that every process gives the same event the same id.
    event_id = recent[-1][0] + 1 if recent else 1
    recent.append((event_id, (await request.json())["score"]))
    async with changed:
        changed.notify_all()
    return {"id": event_id}


@app.get("/scores/live")
async def live(request: Request) -> EventSourceResponse:
    last = request.last_event_id  # None on a first connection; what the browser had, on a reconnection

    async def produce() -> AsyncIterator[ServerSentEvent]:
        after = int(last) if last is not None and last.isdigit() else (recent[-1][0] if recent else 0)
        if recent and after < recent[0][0] - 1:
            # Events the client missed are no longer here: tell it to reload its state, then go on from now.
            yield ServerSentEvent(event="resync", data="reload")
            after = recent[-1][0]
        while True:
            for event_id, data in list(recent):
                if event_id > after:
                    yield ServerSentEvent(data=data, id=str(event_id))
                    after = event_id
            async with changed:
                while not recent or recent[-1][0] <= after:
                    await changed.wait()

    return EventSourceResponse(produce(), retry=1000)

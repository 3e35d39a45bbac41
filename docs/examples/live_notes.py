"""Live notes: PostgreSQL's NOTIFY fanned out to every browser as Server-Sent Events."""

from collections.abc import AsyncIterator

from aiorest import App, EventSourceResponse, Request, ServerSentEvent
from aiorest.db import Database, NotificationGap, SubscriberTooSlow

app = App()
db = Database(min_size=1, max_size=8)  # $DATABASE_URL; behind PgBouncer in transaction mode add listen_dsn=
db.setup(app)


async def create_table(app: App) -> None:
    await db.execute("CREATE TABLE IF NOT EXISTS notes (id serial PRIMARY KEY, text text NOT NULL)")


app.on_startup.append(create_table)


@app.post("/notes")
async def add_note(request: Request) -> dict[str, object]:
    text = (await request.json())["text"]
    async with db.transaction():  # the NOTIFY is sent when the transaction commits, with the row
        note = await db.fetchone("INSERT INTO notes (text) VALUES (%s) RETURNING id, text", (text,))
        await db.execute("SELECT pg_notify('notes', %s)", (str(note["id"]),))
    return note


@app.get("/notes/live")
async def live(request: Request) -> EventSourceResponse:
    async def produce() -> AsyncIterator[ServerSentEvent]:
        # One LISTEN connection per process serves every subscriber; leaving the block unsubscribes.
        async with db.listen("notes", queue_size=100) as subscription:
            yield ServerSentEvent(event="ready", data="subscribed")
            try:
                async for item in subscription:
                    if isinstance(item, NotificationGap):
                        # PostgreSQL was away: notes may have been missed. The page reloads its list.
                        yield ServerSentEvent(event="resync", data=item.reason)
                        continue
                    note = await db.fetchone("SELECT id, text FROM notes WHERE id = %s", (int(item.payload),))
                    if note is not None:
                        yield ServerSentEvent(event="note", data=note, id=str(note["id"]))
            except SubscriberTooSlow:
                return  # this client fell behind: the stream ends, its browser reconnects (Last-Event-ID)

    return EventSourceResponse(produce())

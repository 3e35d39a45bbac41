"""Compressed answers for an API's list routes, and compressed uploads, in a group of routes."""

from collections.abc import AsyncIterator

from aiorest import App, Compression, Decompression, Limits, Request, Router, StreamResponse

# Only the routes of this group compress: the others pay nothing.
api = Router(middleware=[Compression(minimum_size=500), Decompression()])


@api.get("/notes")
async def list_notes(request: Request) -> dict[str, list[dict[str, object]]]:
    # about 6 KB of JSON: sent gzip- or brotli-compressed to a client that accepts it
    return {"notes": [{"id": i, "title": f"note {i}", "done": False} for i in range(150)]}


@api.get("/notes/export")
async def export(request: Request) -> StreamResponse:
    async def lines() -> AsyncIterator[str]:
        for i in range(150):
            yield f'{{"id": {i}, "title": "note {i}"}}\n'

    # compressed chunk by chunk, each flushed: the client decodes as it arrives
    return StreamResponse(lines(), media_type="application/x-ndjson")


@api.post("/notes/import")
async def import_notes(request: Request) -> dict[str, int]:
    # A body sent with Content-Encoding: gzip arrives here expanded, never past 64 KiB.
    notes = await request.json()
    return {"imported": len(notes)}


app = App(limits=Limits(max_body_size=64 * 1024))
app.include(api, "/api")


@app.get("/ping")
async def ping(request: Request) -> dict[str, bool]:
    return {"pong": True}  # outside the group: never compressed

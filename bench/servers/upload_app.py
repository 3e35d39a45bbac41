"""An app that reads request bodies: bench.slow_bodies serves it with ``aiorest run``."""

from __future__ import annotations

from aiorest import App, Request

app = App()


@app.get("/json")
async def json_endpoint(request: Request) -> dict[str, str]:
    return {"message": "Hello, World!"}


@app.post("/upload")
async def upload(request: Request) -> dict[str, int]:
    return {"length": len(await request.read())}

"""The app the production bar script (load/production/run.py) serves: fast, slow and who-answered routes."""

from __future__ import annotations

import asyncio
import os

from aiorest import App, HTTPBadRequest, Request

app = App()
_MAX_SLOW_MS = 10_000


@app.get("/json")
async def json_route(request: Request) -> dict[str, str]:
    return {"message": "Hello, World!"}


@app.get("/slow")
async def slow(request: Request) -> dict[str, int]:
    """Answers after ``ms`` milliseconds (at most 10 s): a request that is in flight when a signal comes."""
    try:
        ms = int(request.query.get("ms", "1000"))
    except ValueError:
        raise HTTPBadRequest("ms must be an integer") from None
    if not 0 <= ms <= _MAX_SLOW_MS:
        raise HTTPBadRequest(f"ms must be between 0 and {_MAX_SLOW_MS}")
    await asyncio.sleep(ms / 1000)
    return {"slept_ms": ms, "pid": os.getpid()}


@app.get("/pid")
async def pid(request: Request) -> dict[str, int]:
    return {"pid": os.getpid()}

"""An app for the health and metrics tests run in processes of their own."""

import asyncio
import os

from aiorest import App, Request

app = App()


@app.get("/pid")
async def pid(request: Request) -> dict[str, int]:
    return {"pid": os.getpid()}


@app.get("/items/{item_id:int}")
async def item(request: Request) -> dict[str, int]:
    return {"id": request.path_params["item_id"]}


@app.get("/slow")
async def slow(request: Request) -> dict[str, bool]:
    await asyncio.sleep(1.0)
    return {"slow": True}

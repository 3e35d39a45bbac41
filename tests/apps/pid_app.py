"""An app that says which process answered, for the worker tests."""

import os

from aiorest import App, Request

app = App()


@app.get("/pid")
async def pid(request: Request) -> dict[str, int]:
    return {"pid": os.getpid()}

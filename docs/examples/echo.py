"""Everything a handler can read from a request."""

from typing import Any

from aiorest import App, Request

app = App()


@app.get("/inspect/{item}")
async def inspect_request(request: Request) -> dict[str, Any]:
    return {
        "method": request.method,
        "path": request.path,
        "query_string": request.query_string,
        "tags": request.query.getall("tag"),
        "page": int(request.query.get("page", "1")),
        "user_agent": request.headers.get("user-agent"),
        "session": request.cookies.get("session"),
        "item": request.path_params["item"],
        "http_version": request.http_version,
        "client_host": request.client[0] if request.client else None,
    }


@app.post("/echo")
async def echo(request: Request) -> dict[str, Any]:
    data = await request.json()  # 415 for a non-JSON Content-Type, 400 for bad JSON
    return {"received": data}


@app.post("/upload")
async def upload(request: Request) -> dict[str, int]:
    size = 0
    async for chunk in request.stream():  # chunks as they arrive, never the whole body
        size += len(chunk)
    return {"bytes": size}


@app.post("/shout")
async def shout(request: Request) -> dict[str, str]:
    text = await request.text()  # 400 if the body is not UTF-8
    return {"text": text.upper()}

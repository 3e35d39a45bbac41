"""Files out: a directory served under /assets, and a file chosen by a handler."""

from pathlib import Path

from aiorest import App, FileResponse, HTTPNotFound, Request

HERE = Path(__file__).parent / "files_root"

app = App()
app.static("/assets", HERE, cache_control="public, max-age=3600")


@app.get("/reports/{name}")
async def report(request: Request) -> FileResponse:
    if request.path_params["name"] != "latest":
        raise HTTPNotFound("no such report")
    return FileResponse(HERE / "hello.txt", cache_control="no-cache")

"""An app with its own server limits, served on a unix socket behind a proxy."""

from aiorest import App, Limits, Request

app = App(
    limits=Limits(
        max_body_size=64 * 1024,  # 413 past 64 KiB
        max_pipeline=16,
        keepalive_timeout=90.0,  # longer than nginx's 75 s upstream keep-alive
    )
)


@app.post("/upload")
async def upload(request: Request) -> dict[str, int]:
    return {"bytes": len(await request.read())}


if __name__ == "__main__":
    app.run(unix="/tmp/aiorest.sock")

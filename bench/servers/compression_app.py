"""The same JSON routes with and without Compression, in one process (bench/batteries.py)."""

from __future__ import annotations

import argparse

from aiorest import App, Compression, Request, Router

SMALL = {"id": 1, "title": "a note", "done": False, "tags": ["x", "y"], "body": "b" * 40}  # about 100 B
BIG = {"items": [{"id": i, "title": f"note {i}", "done": i % 2 == 0} for i in range(250)]}  # about 10 KB

app = App()
gz = Router(middleware=[Compression(brotli=False)])


@app.get("/small")
@gz.get("/small")
async def small(request: Request) -> dict[str, object]:
    return SMALL


@app.get("/big")
@gz.get("/big")
async def big(request: Request) -> dict[str, object]:
    return BIG


app.include(gz, "/gz")

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    app.run(host="127.0.0.1", port=parser.parse_args().port, log_level="warning")

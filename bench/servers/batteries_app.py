"""The routes of bench/batteries.py: each battery's route beside the same route without it, in one process.

``/small`` (about 100 B of JSON) and ``/big`` (about 10 KB) plain; under ``/gz``
with ``Compression``; under ``/cors`` with ``CORS`` for one allowed origin.
"""

from __future__ import annotations

import argparse

from aiorest import CORS, App, Compression, Request, Router

SMALL = {"id": 1, "title": "a note", "done": False, "tags": ["x", "y"], "body": "b" * 40}  # about 100 B
BIG = {"items": [{"id": i, "title": f"note {i}", "done": i % 2 == 0} for i in range(250)]}  # about 10 KB
ORIGIN = "https://app.example.org"

app = App()
gz = Router(middleware=[Compression(brotli=False)])
cors = Router(middleware=[CORS([ORIGIN], allow_credentials=True)])


@app.get("/small")
@gz.get("/small")
@cors.get("/small")
async def small(request: Request) -> dict[str, object]:
    return SMALL


@app.get("/big")
@gz.get("/big")
async def big(request: Request) -> dict[str, object]:
    return BIG


app.include(gz, "/gz")
app.include(cors, "/cors")

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    app.run(host="127.0.0.1", port=parser.parse_args().port, log_level="warning")

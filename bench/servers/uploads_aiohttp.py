"""aiohttp.web in the uploads and files benchmark (bench/uploads.py), on uvloop.

Its form API, ``await request.post()`` (file parts in a temporary file), with ``client_max_size``
raised past the 1 GiB upload, and ``web.FileResponse`` through ``add_static``. See
uploads_aiorest.py for what each contender does.
"""

from __future__ import annotations

import argparse
import os

import uvloop
from aiohttp import web

LARGEST = 2 * 1024 * 1024 * 1024


async def upload(request: web.Request) -> web.Response:
    field = (await request.post())["file"]
    assert isinstance(field, web.FileField)
    return web.json_response({"size": os.fstat(field.file.fileno()).st_size})


async def form(request: web.Request) -> web.Response:
    return web.json_response({"fields": len(await request.post())})


async def ready(request: web.Request) -> web.Response:
    return web.json_response({"ready": True})


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--root", required=True)
    args = parser.parse_args()
    app = web.Application(client_max_size=LARGEST)
    app.router.add_post("/upload", upload)
    app.router.add_post("/form", form)
    app.router.add_get("/ready", ready)
    app.router.add_static("/files", args.root)
    web.run_app(app, host="127.0.0.1", port=args.port, access_log=None, print=None, loop=uvloop.new_event_loop())

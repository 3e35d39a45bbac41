"""Starlette in the uploads and files benchmark (bench/uploads.py), on uvicorn with httptools and uvloop.

Its form API (python-multipart; files in SpooledTemporaryFile, 1 MiB in memory, then disk) and its
FileResponse through StaticFiles. See uploads_aiorest.py for what each contender does.
"""

from __future__ import annotations

import argparse

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles


async def upload(request: Request) -> JSONResponse:
    async with request.form(max_part_size=1024 * 1024) as form:
        return JSONResponse({"size": form["file"].size})


async def form(request: Request) -> JSONResponse:
    async with request.form() as fields:
        return JSONResponse({"fields": len(fields.multi_items())})


async def ready(request: Request) -> JSONResponse:
    return JSONResponse({"ready": True})


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--root", required=True)
    args = parser.parse_args()
    routes = [
        Route("/upload", upload, methods=["POST"]),
        Route("/form", form, methods=["POST"]),
        Route("/ready", ready),
        Mount("/files", StaticFiles(directory=args.root)),
    ]
    uvicorn.run(
        Starlette(routes=routes),
        host="127.0.0.1",
        port=args.port,
        loop="uvloop",
        http="httptools",
        log_level="warning",
        access_log=False,
    )

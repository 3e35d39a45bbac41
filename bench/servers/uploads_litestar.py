"""Litestar in the uploads benchmark (bench/uploads.py), on uvicorn with httptools and uvloop.

Its form API (an UploadFile in a multipart body; defnull's multipart below, as aiorest's), its
request body limit raised past the 1 GiB upload. See uploads_aiorest.py for what each contender does.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Annotated, Any

import uvicorn
from litestar import Litestar, get, post
from litestar.datastructures import UploadFile
from litestar.enums import RequestEncodingType
from litestar.params import Body
from litestar.static_files import create_static_files_router

LARGEST = 2 * 1024 * 1024 * 1024
MULTIPART = Body(media_type=RequestEncodingType.MULTI_PART)


@post("/upload", status_code=200, request_max_body_size=LARGEST)
async def upload(data: Annotated[dict[str, UploadFile], MULTIPART]) -> dict[str, int]:
    file = data["file"]
    file.file.seek(0, 2)
    return {"size": file.file.tell()}


@post("/form", status_code=200)
async def form(data: Annotated[dict[str, Any], MULTIPART]) -> dict[str, int]:
    return {"fields": len(data)}


@get("/ready")
async def ready() -> dict[str, bool]:
    return {"ready": True}


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--root", required=True)
    args = parser.parse_args()
    files = create_static_files_router(path="/files", directories=[Path(args.root)])
    app = Litestar([upload, form, ready, files], request_max_body_size=LARGEST)
    uvicorn.run(
        app, host="127.0.0.1", port=args.port, loop="uvloop", http="httptools", log_level="warning", access_log=False
    )

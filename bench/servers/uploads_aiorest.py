"""aiorest in the uploads and files benchmark (bench/uploads.py): a form read whole, a file on disk, files out.

Every contender does the same: ``POST /upload`` reads a multipart form with its
framework's form API (files spilled to disk as that API does) and answers the
file's size; ``POST /form`` answers how many fields it read; ``GET
/files/{name}`` serves a file of ``--root`` with the framework's file response.
"""

from __future__ import annotations

import argparse

from aiorest import App, FormLimits, Request, UploadFile, Uploads

LARGEST = 2 * 1024 * 1024 * 1024  # a 1 GiB upload (bench/uploads.py --rss) and its form around it

app = App(uploads=Uploads(FormLimits(max_file_size=LARGEST, max_disk=2 * LARGEST)))


@app.post("/upload", max_body_size=LARGEST)
async def upload(request: Request) -> dict[str, int]:
    file = (await request.form())["file"]
    assert isinstance(file, UploadFile)
    return {"size": file.size}


@app.post("/form")
async def form(request: Request) -> dict[str, int]:
    return {"fields": len((await request.form()).multi_items())}


@app.get("/ready")
async def ready(request: Request) -> dict[str, bool]:
    return {"ready": True}


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--root", required=True, help="the directory GET /files/ serves")
    args = parser.parse_args()
    app.static("/files", args.root)
    app.run(port=args.port, access_log=False)

"""Forms and uploads: fields as text, files spilled to disk as they arrive, a route of its own size."""

import hashlib
import os
import tempfile
from pathlib import Path

from aiorest import App, FormLimits, HTTPBadRequest, Request, UploadFile, Uploads

# Where saved pictures go: named by their content, never by the name the client sent.
AVATARS = Path(os.environ.get("AVATAR_DIR", tempfile.gettempdir()))

app = App(uploads=Uploads(FormLimits(max_files=4, max_file_size=50 * 1024 * 1024)))


@app.post("/signup")
async def signup(request: Request) -> dict:
    form = await request.form()  # urlencoded or multipart, the same
    return {"name": form["name"], "languages": form.getall("language", [])}


# The server takes bodies up to Limits.max_body_size (1 MiB by default); this route takes 60 MiB,
# and its files go to disk as they arrive, never whole in memory.
@app.post("/avatars", max_body_size=60 * 1024 * 1024)
async def avatar(request: Request) -> dict:
    form = await request.form()
    upload = form.get("avatar")
    if not isinstance(upload, UploadFile):
        raise HTTPBadRequest("send the picture as a file field named 'avatar'")
    digest = hashlib.sha256()
    async for chunk in upload:  # 256 KiB at a time
        digest.update(chunk)
    name = digest.hexdigest()
    await upload.save(AVATARS / f"{name}.img")  # copied in a thread; the upload itself is gone after the response
    return {"saved": name, "size": upload.size, "type": upload.content_type, "sent_as": upload.filename}

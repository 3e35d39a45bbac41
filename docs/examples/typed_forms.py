"""Typed forms: a form model with files, a single upload, both shown as forms in Swagger UI."""

import hashlib
from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from aiorest import App, Form, UploadFile

app = App(title="Pictures", version="1.0")
app.add_openapi_routes()  # /docs: Swagger UI shows a file input for each file


class Profile(msgspec.Struct):
    """A member's profile, sent as an HTML form sends it."""

    name: Annotated[str, Meta(min_length=1, max_length=80)]
    age: Annotated[int, Meta(ge=0)] | None = None  # an empty input is absent: None
    newsletter: bool = False
    languages: list[str] = []  # a repeated key: every value
    plan: Literal["free", "pro"] = "free"
    avatar: UploadFile | None = None  # a file, or none sent
    photos: list[UploadFile] = []  # every file sent under this name


@app.post("/profiles", status=201)
async def create_profile(profile: Annotated[Profile, Form()]) -> dict:
    avatar = profile.avatar
    return {
        "name": profile.name,
        "age": profile.age,
        "newsletter": profile.newsletter,
        "languages": profile.languages,
        "plan": profile.plan,
        "avatar": avatar.filename if avatar else None,
        "photos": [photo.size for photo in profile.photos],
    }


# One file, and a field beside it: each a parameter. An UploadFile parameter needs no marker.
@app.post("/documents", max_body_size=20 * 1024 * 1024)
async def upload_document(document: UploadFile, title: Annotated[str, Form()] = "") -> dict:
    digest = hashlib.sha256()
    async for chunk in document:
        digest.update(chunk)
    return {"title": title or document.filename, "sha256": digest.hexdigest(), "size": document.size}

"""Testing forms and uploads: aiohttp's FormData sends fields and files, with either client."""

import hashlib
import io
from typing import Annotated

import aiohttp
import pytest

from aiorest import App, Form, UploadFile

# pytest-asyncio runs the async tests of this module: no setting needed (see "Settings for pytest-asyncio").
pytestmark = pytest.mark.asyncio

app = App()


@app.post("/photos")
async def upload(photo: UploadFile, caption: Annotated[str, Form()] = "", tags: Annotated[list[str], Form()] = []):  # noqa: B006
    return {
        "name": photo.filename,
        "type": photo.content_type,
        "sha256": hashlib.sha256(await photo.read()).hexdigest(),
        "caption": caption,
        "tags": tags,
    }


def photo_form(content: bytes) -> aiohttp.FormData:
    form = aiohttp.FormData()
    form.add_field("caption", "at the sea")  # a field
    form.add_field("tags", "sea")  # a repeated key: a list
    form.add_field("tags", "summer")
    # a file: its bytes (or an open file, or io.BytesIO), its name and type
    form.add_field("photo", io.BytesIO(content), filename="sea.jpg", content_type="image/jpeg")
    return form


async def test_upload(aiorest_client):
    client = await aiorest_client(app)
    async with client.post("/photos", data=photo_form(b"waves")) as resp:
        assert resp.status == 200
        assert await resp.json() == {
            "name": "sea.jpg",
            "type": "image/jpeg",
            "sha256": hashlib.sha256(b"waves").hexdigest(),
            "caption": "at the sea",
            "tags": ["sea", "summer"],
        }


async def test_upload_with_pytest_aiohttp(aiohttp_client):
    client = await aiohttp_client(app)
    resp = await client.post("/photos", data=photo_form(b"sand"))
    assert (await resp.json())["sha256"] == hashlib.sha256(b"sand").hexdigest()
    # A dict (or a list of pairs) without files is sent urlencoded; a form with files is multipart.
    resp = await client.post("/photos", data={"caption": "no photo"})
    assert resp.status == 422
    assert (await resp.json())["error"]["details"] == [{"location": "form.photo", "message": "required"}]

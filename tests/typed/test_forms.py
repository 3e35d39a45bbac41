"""Typed forms: ``Annotated[Model, Form()]``, form fields and uploads as parameters, their 422s and OpenAPI."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import io
import os
from typing import Annotated, Any, Literal, TypedDict

import aiohttp
import msgspec
import pytest
from msgspec import Meta
from openapi_spec_validator import validate

from aiorest import App, Form, Query, Request, Server, UploadFile
from tests.http.test_forms import multipart_body, raw_post, send
from tests.rawclient import read_response


class Signup(msgspec.Struct):
    name: Annotated[str, Meta(min_length=1)]
    age: Annotated[int, Meta(ge=0)] | None = None
    newsletter: bool = False
    languages: list[str] = []
    scores: list[int] = []
    plan: Literal["free", "pro"] = "free"


class Profile(msgspec.Struct):
    """A profile and its pictures."""

    name: str
    avatar: UploadFile
    banner: UploadFile | None = None
    photos: list[UploadFile] = []


@dataclasses.dataclass
class Range:
    low: int
    high: int = 10

    def __post_init__(self) -> None:
        if self.high < self.low:
            raise ValueError("high must not be below low")


class Contact(TypedDict):
    email: str
    phone: str


def form_app(seen: list[Any] | None = None) -> App:
    app = App()

    @app.post("/signup")
    async def signup(form: Annotated[Signup, Form()], page: int = 1) -> dict[str, Any]:
        return {"form": msgspec.to_builtins(form), "page": page}

    @app.post("/profile")
    async def profile(profile: Annotated[Profile, Form()]) -> dict[str, Any]:
        return {
            "name": profile.name,
            "avatar": [profile.avatar.filename, (await profile.avatar.read()).decode()],
            "banner": profile.banner.filename if profile.banner else None,
            "photos": [photo.filename for photo in profile.photos],
        }

    @app.post("/range")
    async def range_(span: Annotated[Range, Form()]) -> list[int]:
        return [span.low, span.high]

    @app.post("/contact")
    async def contact(contact: Annotated[Contact, Form()]) -> Contact:
        return contact

    @app.post("/maybe")
    async def maybe(form: Annotated[Signup | None, Form()] = None) -> dict[str, Any]:
        return {"name": form.name if form else None}

    @app.post("/avatar", max_body_size=8 * 1024 * 1024)
    async def avatar(
        request: Request,
        avatar: UploadFile,
        title: Annotated[str, Form("picture-title")] = "",
        tags: Annotated[list[str], Form()] = [],  # noqa: B006 - a default, never changed
        width: Annotated[int | None, Form()] = None,
        extra: Annotated[list[UploadFile], Form()] = [],  # noqa: B006
    ) -> dict[str, Any]:
        if seen is not None:
            seen.append(avatar)
        digest = hashlib.sha256()
        async for chunk in avatar:
            digest.update(chunk)
        same_form = (await request.form()).get("avatar") is avatar
        return {
            "sha256": digest.hexdigest(),
            "size": avatar.size,
            "title": title,
            "tags": tags,
            "width": width,
            "extra": [one.filename for one in extra],
            "same_form": same_form,
        }

    return app


async def problems(response: Any) -> list[dict[str, str]]:
    assert response.status == 422, await response.text()
    return (await response.json())["error"]["details"]


def files(*parts: tuple[str, bytes | str] | tuple[str, bytes | str, str | None]) -> aiohttp.FormData:
    """A multipart form: (name, value) a field, (name, value, filename) a file when it has a filename."""
    form = aiohttp.FormData(default_to_multipart=True)
    for name, value, *rest in parts:
        filename = rest[0] if rest else None
        if filename is None:
            form.add_field(name, value)
        else:
            form.add_field(name, io.BytesIO(value if isinstance(value, bytes) else value.encode()), filename=filename)
    return form


# -- binding ---------------------------------------------------------------------------------


async def test_a_model_is_filled_from_an_urlencoded_form_converted_as_query_parameters(aiorest_client):
    client = await aiorest_client(form_app())
    sent = [("name", "Ada"), ("age", "36"), ("newsletter", "true"), ("languages", "en"), ("languages", "fr")]
    sent += [("scores", "3"), ("scores", "5"), ("plan", "pro")]
    async with client.post("/signup?page=2", data=sent) as response:
        assert await response.json() == {
            "form": {
                "name": "Ada",
                "age": 36,
                "newsletter": True,
                "languages": ["en", "fr"],
                "scores": [3, 5],
                "plan": "pro",
            },
            "page": 2,
        }
    async with client.post("/signup", data={"name": "Bob"}) as response:  # the defaults
        assert (await response.json())["form"] == {
            "name": "Bob",
            "age": None,
            "newsletter": False,
            "languages": [],
            "scores": [],
            "plan": "free",
        }


async def test_the_same_model_from_a_multipart_form(aiorest_client):
    client = await aiorest_client(form_app())
    form = files(("name", "Ada"), ("age", "36"), ("scores", "1"), ("scores", "2"))
    async with client.post("/signup", data=form) as response:
        body = await response.json()
    assert (body["form"]["name"], body["form"]["age"], body["form"]["scores"]) == ("Ada", 36, [1, 2])


async def test_an_html_form_s_empty_inputs_are_absent_where_text_is_not_the_type(aiorest_client):
    # A browser sends every input: empty text for those left empty, a file part with no name and no bytes.
    client = await aiorest_client(form_app())
    async with client.post("/signup", data=[("name", "Ada"), ("age", ""), ("scores", ""), ("scores", "4")]) as response:
        form = (await response.json())["form"]
    assert (form["age"], form["scores"]) == (None, [4])
    async with client.post("/signup", data={"name": ""}) as response:  # text: kept, and checked
        assert await problems(response) == [{"location": "form.name", "message": "Expected `str` of length >= 1"}]
    sent = files(("name", "Ada"), ("avatar", b"A", "a.png"), ("banner", b"", ""), ("photos", b"", ""))
    async with client.post("/profile", data=sent) as response:
        assert await response.json() == {"name": "Ada", "avatar": ["a.png", "A"], "banner": None, "photos": []}


async def test_files_fill_upload_fields(aiorest_client):
    client = await aiorest_client(form_app())
    sent = files(
        ("name", "Ada", None),
        ("avatar", b"face", "me.png"),
        ("banner", b"wide", "banner.png"),
        ("photos", b"1", "one.jpg"),
        ("photos", b"2", "two.jpg"),
    )
    async with client.post("/profile", data=sent) as response:
        assert await response.json() == {
            "name": "Ada",
            "avatar": ["me.png", "face"],
            "banner": "banner.png",
            "photos": ["one.jpg", "two.jpg"],
        }


async def test_dataclass_and_typeddict_models(aiorest_client):
    client = await aiorest_client(form_app())
    async with client.post("/range", data={"low": "3"}) as response:
        assert await response.json() == [3, 10]
    async with client.post("/range", data={"low": "30", "high": "4"}) as response:
        assert await problems(response) == [{"location": "form", "message": "high must not be below low"}]
    async with client.post("/contact", data={"email": "a@b.c", "phone": "1"}) as response:
        assert await response.json() == {"email": "a@b.c", "phone": "1"}


async def test_an_optional_model_takes_its_default_when_the_form_is_empty(aiorest_client):
    client = await aiorest_client(form_app())
    async with client.post("/maybe") as response:
        assert await response.json() == {"name": None}
    async with client.post("/maybe", data={"name": "Ada"}) as response:
        assert await response.json() == {"name": "Ada"}


async def test_fields_and_files_as_parameters_on_a_route_of_its_own_size(aiorest_client):
    seen: list[UploadFile] = []
    client = await aiorest_client(form_app(seen))
    picture = os.urandom(3 * 1024 * 1024)  # past the server's 1 MiB: the route's max_body_size lets it in
    sent = files(
        ("avatar", picture, "me.png"),
        ("picture-title", "me", None),
        ("tags", "a", None),
        ("tags", "b", None),
        ("width", "640", None),
        ("extra", b"x", "x.txt"),
        ("extra", b"y", "y.txt"),
    )
    async with client.post("/avatar", data=sent) as response:
        assert await response.json() == {
            "sha256": hashlib.sha256(picture).hexdigest(),
            "size": len(picture),
            "title": "me",
            "tags": ["a", "b"],
            "width": 640,
            "extra": ["x.txt", "y.txt"],
            "same_form": True,  # the handler's request.form() is the form the parameters came from
        }
    with pytest.raises(ValueError, match="closed"):  # the files are closed once the response is sent
        await seen[0].read()


async def test_a_slow_typed_upload_holds_no_admission_slot():
    # The gate reads the form of a route of its own size before the slot, whoever binds it afterwards.
    app = form_app()

    @app.get("/ok")
    async def ok(request: Request) -> dict[str, bool]:
        return {"ok": True}

    server = Server(app, host="127.0.0.1", port=0, max_concurrency=1, max_queue=0)
    await server.start()
    try:
        picture = os.urandom(3 * 1024 * 1024)
        payload = raw_post("/avatar", multipart_body(("avatar", picture, "me.png"), ("width", b"9", None)))
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(payload[: 2 * 1024 * 1024])  # and the rest later
        await asyncio.sleep(0.3)
        for _ in range(2):
            response = await send(server.port, b"GET /ok HTTP/1.1\r\nHost: t\r\n\r\n")
            assert response.status == 200  # one slot, an upload under way: it holds none
        writer.write(payload[2 * 1024 * 1024 :])
        answer = await read_response(reader, timeout=20)
        writer.close()
    finally:
        await server.stop()
    assert answer.status == 200
    assert (answer.json()["sha256"], answer.json()["width"]) == (hashlib.sha256(picture).hexdigest(), 9)


# -- refusals --------------------------------------------------------------------------------


async def test_invalid_fields_are_all_located_in_the_form(aiorest_client):
    client = await aiorest_client(form_app())
    sent = [("age", "-1"), ("newsletter", "maybe"), ("scores", "1"), ("scores", "x"), ("plan", "gold")]
    async with client.post("/signup?page=x", data=sent) as response:
        assert await problems(response) == [
            {"location": "form.name", "message": "required"},
            {"location": "form.age", "message": "Expected `int` >= 0"},
            {"location": "form.newsletter", "message": "Expected `bool`, got `str`"},
            {"location": "form.scores[1]", "message": "Expected `int`, got `str`"},
            {"location": "form.plan", "message": "Invalid enum value 'gold'"},
            {"location": "query.page", "message": "Expected `int`, got `str`"},
        ]


async def test_a_file_where_text_is_expected_and_text_where_a_file_is(aiorest_client):
    client = await aiorest_client(form_app())
    async with client.post("/signup", data=files(("name", b"Ada", "name.txt"))) as response:
        assert await problems(response) == [{"location": "form.name", "message": "Expected `str`, got `UploadFile`"}]
    async with client.post("/profile", data={"name": "Ada", "avatar": "me.png"}) as response:
        assert await problems(response) == [{"location": "form.avatar", "message": "Expected `UploadFile`, got `str`"}]
    async with client.post("/avatar", data=files(("width", "1", None))) as response:
        assert await problems(response) == [{"location": "form.avatar", "message": "required"}]


async def test_a_body_that_is_not_a_form_gets_415_and_a_malformed_one_400(aiorest_client):
    client = await aiorest_client(form_app())
    async with client.post("/signup", json={"name": "Ada"}) as response:
        assert response.status == 415
        assert "multipart/form-data" in (await response.json())["error"]["message"]
    headers = {"Content-Type": "multipart/form-data"}  # no boundary
    async with client.post("/signup", data=b"--x\r\n", headers=headers) as response:
        assert response.status == 400
    async with client.post("/signup") as response:  # no body: an empty form
        assert await problems(response) == [{"location": "form.name", "message": "required"}]


@pytest.mark.parametrize(
    ("handler_source", "expected"),
    [
        ("async def bad(a: Signup, b: Annotated[str, Form()]): ...", "read the body as JSON and as a form"),
        ("async def bad(a: Annotated[Signup, Form()], b: UploadFile): ...", "make 'b' one of its fields"),
        ("async def bad(a: Annotated[dict[str, int], Form()]): ...", "parameter 'a': unsupported annotation"),
        ("async def bad(a: Annotated[Nested, Form()]): ...", "parameter 'a', field 'inner': unsupported annotation"),
        ("async def bad(a: Annotated[UploadFile | str, Form()]): ...", "or an UploadFile"),
        ("async def bad(a: Annotated[Signup, Query()], b: UploadFile): ...", None),
        ("async def bad(a: Profile): ...", "files come in a form: Annotated[..., Form()]"),
        ("async def bad(a: Annotated[Profile, Query()]): ...", "field 'avatar': unsupported annotation"),
        ("async def bad() -> Profile: ...", "the return annotation: unsupported annotation"),
    ],
)
def test_bad_form_declarations_fail_at_registration(handler_source: str, expected: str | None) -> None:
    namespace: dict[str, Any] = {}
    exec(handler_source, globals(), namespace)  # noqa: S102 - the handlers under test
    app = App()
    if expected is None:
        app.post("/x")(namespace["bad"])
        return
    with pytest.raises(TypeError) as caught:
        app.post("/x")(namespace["bad"])
    assert "handler 'bad' of POST /x" in str(caught.value)
    assert expected in str(caught.value)


class Nested(msgspec.Struct):
    inner: Signup


# -- OpenAPI ---------------------------------------------------------------------------------


def test_openapi_describes_forms_and_files() -> None:
    document = form_app().openapi(title="Forms", version="1")
    validate(document)
    paths, schemas = document["paths"], document["components"]["schemas"]

    signup = paths["/signup"]["post"]
    model = {"schema": {"$ref": "#/components/schemas/Signup"}}
    assert signup["requestBody"] == {
        "required": True,
        "content": {"multipart/form-data": model, "application/x-www-form-urlencoded": model},
    }
    assert set(signup["responses"]) == {"200", "400", "415", "422"}
    assert schemas["Signup"]["properties"]["scores"] == {"type": "array", "items": {"type": "integer"}, "default": []}

    profile = paths["/profile"]["post"]["requestBody"]
    assert profile["content"] == {"multipart/form-data": {"schema": {"$ref": "#/components/schemas/Profile"}}}
    assert schemas["Profile"]["properties"] == {
        "name": {"type": "string"},
        "avatar": {"type": "string", "format": "binary"},
        "banner": {"type": "string", "format": "binary"},  # optional: not required, never null
        "photos": {"type": "array", "items": {"type": "string", "format": "binary"}, "default": []},
    }
    assert schemas["Profile"]["required"] == ["name", "avatar"]
    assert schemas["Profile"]["description"] == "A profile and its pictures."

    assert paths["/maybe"]["post"]["requestBody"]["required"] is False
    fields = paths["/avatar"]["post"]["requestBody"]
    assert fields == {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "properties": {
                        "avatar": {"type": "string", "format": "binary"},
                        "picture-title": {"type": "string", "default": ""},
                        "tags": {"type": "array", "items": {"type": "string"}, "default": []},
                        "width": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
                        "extra": {"type": "array", "items": {"type": "string", "format": "binary"}, "default": []},
                    },
                    "required": ["avatar"],
                }
            }
        },
    }


async def test_an_optional_query_model_takes_its_default_too(aiorest_client):
    # The gathering is the query's as well: an Optional model of query parameters, none sent, is its default.
    app = App()

    @app.get("/search")
    async def search(found: Annotated[Signup | None, Query()] = None) -> dict[str, Any]:
        return {"name": found.name if found else None}

    client = await aiorest_client(app)
    async with client.get("/search") as response:
        assert await response.json() == {"name": None}
    async with client.get("/search?name=Ada") as response:
        assert await response.json() == {"name": "Ada"}
    async with client.get("/search?age=3") as response:
        assert await problems(response) == [{"location": "query.name", "message": "required"}]

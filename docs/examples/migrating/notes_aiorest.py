"""After: the same service on aiorest; its tests are unchanged (pytest-aiohttp's aiohttp_client)."""

from typing import Any

from aiorest import App, HTTPNotFound, JSONResponse, Request, Response, Router

GREETINGS = {"en": "Hello", "fr": "Bonjour"}

routes = Router()


@routes.post("/notes")
async def add_note(request: Request) -> JSONResponse:
    notes = request.app.state.notes
    note = {"id": len(notes) + 1, "text": (await request.json())["text"]}
    notes[note["id"]] = note
    return JSONResponse(note, status=201)


@routes.get("/notes/{note_id:int}")
async def get_note(request: Request) -> dict[str, Any]:
    note = request.app.state.notes.get(request.path_params["note_id"])
    if note is None:
        raise HTTPNotFound("no such note")
    return note  # a dict is a JSON 200


@routes.put("/lang")
async def set_lang(request: Request) -> Response:
    response = Response(status=204)
    response.set_cookie("lang", (await request.json())["lang"])
    return response


@routes.get("/hello")
async def hello(request: Request) -> dict[str, str]:
    return {"message": GREETINGS[request.cookies.get("lang", "en")]}


def create_app() -> App:
    app = App()
    app.state.notes = {}
    app.include(routes)
    return app


# -- the tests: the same in both files ------------------------------------------------


async def test_notes(aiohttp_client):
    client = await aiohttp_client(create_app())
    resp = await client.post("/notes", json={"text": "buy milk"})
    assert resp.status == 201
    assert await resp.json() == {"id": 1, "text": "buy milk"}
    resp = await client.get("/notes/1")
    assert resp.status == 200
    assert await resp.json() == {"id": 1, "text": "buy milk"}
    resp = await client.get("/notes/2")
    assert resp.status == 404


async def test_language_cookie(aiohttp_client):
    client = await aiohttp_client(create_app())
    resp = await client.get("/hello")
    assert await resp.json() == {"message": "Hello"}
    resp = await client.put("/lang", json={"lang": "fr"})
    assert resp.status == 204
    resp = await client.get("/hello")  # the client sends the cookie back
    assert await resp.json() == {"message": "Bonjour"}

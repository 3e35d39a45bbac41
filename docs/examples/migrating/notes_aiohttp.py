"""Before: a notes service on aiohttp.web, tested with pytest-aiohttp's aiohttp_client."""

from aiohttp import web

NOTES = web.AppKey("notes", dict)
GREETINGS = {"en": "Hello", "fr": "Bonjour"}

routes = web.RouteTableDef()


@routes.post("/notes")
async def add_note(request: web.Request) -> web.Response:
    notes = request.app[NOTES]
    note = {"id": len(notes) + 1, "text": (await request.json())["text"]}
    notes[note["id"]] = note
    return web.json_response(note, status=201)


@routes.get(r"/notes/{note_id:\d+}")
async def get_note(request: web.Request) -> web.Response:
    note = request.app[NOTES].get(int(request.match_info["note_id"]))
    if note is None:
        raise web.HTTPNotFound()
    return web.json_response(note)


@routes.put("/lang")
async def set_lang(request: web.Request) -> web.Response:
    response = web.Response(status=204)
    response.set_cookie("lang", (await request.json())["lang"])
    return response


@routes.get("/hello")
async def hello(request: web.Request) -> web.Response:
    return web.json_response({"message": GREETINGS[request.cookies.get("lang", "en")]})


def create_app() -> web.Application:
    app = web.Application()
    app[NOTES] = {}
    app.add_routes(routes)
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

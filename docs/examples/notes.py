"""A notes API: a Router included under a prefix, named routes, JSON in and out."""

from typing import Any

from aiorest import App, HTTPNotFound, HTTPUnprocessableEntity, JSONResponse, Request, Router

notes = Router()


@notes.get("/notes", name="list")
async def list_notes(request: Request) -> list[dict[str, Any]]:
    return list(request.app.state.notes.values())


@notes.post("/notes", name="create")
async def create_note(request: Request) -> JSONResponse:
    data = await request.json()
    if not isinstance(data, dict) or not isinstance(data.get("text"), str):
        raise HTTPUnprocessableEntity("invalid note", details=[{"field": "text", "error": "a string is required"}])
    store = request.app.state.notes
    note_id = max(store, default=0) + 1
    store[note_id] = {"id": note_id, "text": data["text"]}
    location = request.url_for("api.note", note_id=note_id)
    return JSONResponse(store[note_id], status=201, headers={"Location": location})


@notes.get("/notes/{note_id:int}", name="note")
async def get_note(request: Request) -> dict[str, Any]:
    note = request.app.state.notes.get(request.path_params["note_id"])
    if note is None:
        raise HTTPNotFound(f"no note {request.path_params['note_id']}")
    return note


@notes.delete("/notes/{note_id:int}")
async def delete_note(request: Request) -> None:
    if request.app.state.notes.pop(request.path_params["note_id"], None) is None:
        raise HTTPNotFound(f"no note {request.path_params['note_id']}")


async def create_store(app: App) -> None:
    app.state.notes = {}


app = App(on_startup=[create_store])
app.include(notes, "/api", name="api")

"""The smallest aiorest service, for the CLI and process tests: ``aiorest run tests.apps.hello_app:app``."""

from aiorest import App, HTTPNotFound, Request, Response

app = App()

NOTES = {1: {"id": 1, "text": "hello"}}


@app.get("/")
async def index(request: Request) -> dict[str, str]:
    return {"message": "Hello, World!"}


@app.get("/plaintext")
async def plaintext(request: Request) -> Response:
    return Response("Hello, World!")


@app.get("/notes/{note_id:int}", name="note")
async def get_note(request: Request) -> dict[str, object]:
    note = NOTES.get(request.path_params["note_id"])
    if note is None:
        raise HTTPNotFound("no such note")
    return note


@app.post("/notes")
async def create_note(request: Request) -> Response:
    data = await request.json()
    note_id = max(NOTES) + 1
    NOTES[note_id] = {"id": note_id, "text": str(data.get("text", ""))}
    response = Response(status=201, headers={"Location": app.url_for("note", note_id=note_id)})
    return response


if __name__ == "__main__":
    app.run(port=8080)

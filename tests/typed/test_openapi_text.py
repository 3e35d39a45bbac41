"""The words of the OpenAPI document: summaries, descriptions and schema descriptions from docstrings."""

from __future__ import annotations

import msgspec
from openapi_spec_validator import validate

from aiorest import App, Request


class NotePatch(msgspec.Struct):
    """The fields a PATCH changes, and the version it was based on.

    ``id`` and ``created_at`` are accepted and ignored, so that a
    note read may be sent back.
    """

    title: str | None = None


def app() -> App:
    app = App(title="Notes", version="1")

    @app.post("/users")
    async def register(request: Request) -> None:
        """Register a user (this does not log in): 409 when the username is taken, 429 past
        10 registrations a minute from the client's address."""

    @app.post("/logout")
    async def logout(request: Request) -> None:
        """Log out: the session is deleted, e.g. on a shared computer. Never fails."""

    @app.get("/notes")
    async def notes(request: Request) -> dict:
        """The caller's notes, ``limit`` at a time; see :class:`~aiorest.App`.

        ``limit`` above 100 is taken as 100.
        """
        return {}

    @app.patch("/notes/{note_id:int}")
    async def patch_note(note_id: int, patch: NotePatch) -> None:
        """Change the fields given of a note."""

    @app.get("/plain")
    async def plain(request: Request) -> dict:
        """A first paragraph without a full stop

        and a second one."""
        return {}

    return app


def operations() -> dict:
    document = app().openapi()
    validate(document)
    return {f"{method.upper()} {path}": op for path, ops in document["paths"].items() for method, op in ops.items()}


def test_a_summary_is_the_first_sentence_its_lines_joined():
    ops = operations()
    assert ops["POST /users"]["summary"] == (
        "Register a user (this does not log in): 409 when the username is taken, 429 past "
        "10 registrations a minute from the client's address."
    )
    assert ops["POST /logout"]["summary"] == "Log out: the session is deleted, e.g. on a shared computer."
    # no full stop: the first paragraph
    assert ops["GET /plain"]["summary"] == "A first paragraph without a full stop"


def test_a_description_is_the_whole_docstring_dedented_and_absent_when_it_is_the_summary():
    ops = operations()
    assert ops["POST /logout"]["description"] == (
        "Log out: the session is deleted, e.g. on a shared computer. Never fails."
    )
    assert ops["GET /plain"]["description"] == "A first paragraph without a full stop\n\nand a second one."
    # one sentence: said once, in the summary
    assert "description" not in ops["POST /users"] and "description" not in ops["PATCH /notes/{note_id}"]


def test_restructuredtext_markup_becomes_markdown_code():
    notes = operations()["GET /notes"]
    assert notes["summary"] == "The caller's notes, `limit` at a time; see `App`."
    assert notes["description"] == (
        "The caller's notes, `limit` at a time; see `App`.\n\n`limit` above 100 is taken as 100."
    )


def test_a_struct_docstring_is_dedented():
    schema = app().openapi()["components"]["schemas"]["NotePatch"]
    # four spaces at the start of a line are a code block in Markdown (Swagger UI, ReDoc)
    assert schema["description"] == (
        "The fields a PATCH changes, and the version it was based on.\n\n"
        "`id` and `created_at` are accepted and ignored, so that a\nnote read may be sent back."
    )

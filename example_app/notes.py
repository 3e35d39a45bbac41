"""The notes resource: list, create, read, replace, patch, delete, with optimistic concurrency.

The handlers are typed (docs/typed.rst): the bodies, the query and the
``If-Match`` header are declared, and validated by aiorest before a handler
runs, a bad one answered 422 with every problem's location; the answers are
Structs, encoded by msgspec. ``/openapi.json`` describes all of it.

A note's ``version`` is its ETag. PUT, PATCH and DELETE take the version they
were based on, in ``If-Match`` or as ``"version"`` in the body; a stale one
gets 412 and the client re-reads. Without either, PUT and PATCH get 428.
``If-Match: *`` writes whatever the version; a weak ETag never matches.
A GET with the current ETag in ``If-None-Match`` gets 304, without the note:
the server compares it with the ETag the handler sets (docs/responses.rst).

A POST or PATCH with an ``Idempotency-Key`` runs once (docs/idempotency.rst, set
up in example_app/app.py): a client whose write got no answer, or 502, sends it
again with the same key and gets the first answer. A DELETE needs no key: a
second one answers 404, the note being gone either way.

Each note belongs to the user who created it (example_app/users.py): every
route needs a login (a session or a bearer token), and a note of another user
is answered 404, as a missing one, so that ids tell nothing of others' notes.

Every write is also an event of its owner's live feed (example_app/live.py): a trigger
(migrations/0005_note_events.sql) writes it and sends NOTIFY in the write's own transaction.
"""

from __future__ import annotations

import datetime
from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from aiorest import (
    Compression,
    Decompression,
    HTTPBadRequest,
    HTTPError,
    HTTPNotFound,
    HTTPNotModified,
    HTTPPreconditionFailed,
    HTTPUnprocessableEntity,
    Request,
    Response,
    Router,
)
from aiorest.db import Database
from aiorest.http import parse_etags
from aiorest.security import (
    bearer_token,
    checks_login,
    identity,
    login_required,
    remember_identity,
    token_hash,
    unauthorized,
)
from aiorest.typed import VALIDATION_MESSAGE, Header, raises

from . import queries
from .queries import MAX_ID, MAX_LIMIT
from .users import User

# Compressed lists and uploads for the notes only: the TechEmpower routes must not pay for it.
router = Router(middleware=[Compression(), Decompression()])


# 1 to 200 characters once the whitespace around it is stripped (the title is stored stripped).
Title = Annotated[
    str, Meta(pattern=r"^\s*\S(?:[\s\S]{0,198}\S)?\s*$", description="1 to 200 characters, whitespace around stripped")
]
Text = Annotated[str, Meta(max_length=10000)]
Version = Annotated[int, Meta(ge=-(2**31), le=2**31 - 1)]  # the version column is an integer


class HTTPPreconditionRequired(HTTPError):
    """428: a write that names no version of the note it was based on."""

    status = 428


class NotePatch(Struct, kw_only=True, forbid_unknown_fields=True):
    """The fields a PATCH changes (at least one), and the version it was based on, unless If-Match says.

    ``id``, ``created_at`` and ``updated_at`` are accepted and ignored, so that a
    note read may be sent back.
    """

    title: Title | UnsetType = UNSET
    body: Text | UnsetType = UNSET
    done: bool | UnsetType = UNSET
    version: Version | None = None
    id: Any = None
    created_at: Any = None
    updated_at: Any = None


class NoteReplacement(NotePatch, kw_only=True, forbid_unknown_fields=True):
    """A PUT: the title, the fields to change with it, the version it was based on."""

    title: Title


class NewNote(NotePatch, kw_only=True, forbid_unknown_fields=True):
    """A POST: the title, and the body and done, which default to empty and false."""

    title: Title
    body: Text = ""
    done: bool = False


class Note(Struct):
    """A note; ``version`` is its ETag, one more with each write."""

    id: int
    title: str
    body: str
    done: bool
    version: int
    created_at: datetime.datetime
    updated_at: datetime.datetime


class NotePage(Struct):
    """A page of notes, and the URL of the next one (null on the last)."""

    items: list[Note]
    next: str | None


_encode = msgspec.json.Encoder().encode


def _db(request: Request) -> Database:
    db: Database = request.app.state.db
    return db


async def _owner(request: Request) -> int:
    """The id of the user calling (the routes are under login_required)."""
    user = await identity(request)
    owner: int = user.id
    return owner


def _note_response(row: dict[str, Any], status: int = 200) -> Response:
    return Response(_encode(Note(**row)), status, {"ETag": f'"{row["version"]}"'}, "application/json")


def _expected_versions(if_match: str | None, version: int | None) -> list[int] | Literal["*"] | None:
    """The versions a write may apply to: ``If-Match`` first, else the body's ``version``.

    None: the request names none. ``"*"``: ``If-Match: *``, any version. A list:
    the versions of the ETags listed (a weak ETag, ``W/"3"``, never matches
    If-Match: RFC 9110, 13.1.1); it may be empty, and then nothing matches.
    """
    if if_match is not None:
        try:
            tags = parse_etags(if_match)
        except ValueError:
            raise HTTPBadRequest(queries.IF_MATCH_ERROR) from None
        return queries.expected_versions(tags)
    return None if version is None else [version]


async def _write_if_expected(
    request: Request, note_id: int, expected: list[int] | Literal["*"], write: str, params: tuple[Any, ...]
) -> dict[str, Any]:
    """Run ``write`` (an UPDATE ... FROM or DELETE ... USING ``locked``) if the note has an expected version.

    Returns the written row; 404 if the caller has no such note, 412 with its version
    if that is not one of ``expected``.
    """
    sql, params = queries.write_if_expected(note_id, await _owner(request), expected, write, params)
    row = await _db(request).fetchone(sql, params)
    if row is None:  # no such note, or another user's
        raise HTTPNotFound("no such note")
    found = row.pop("found")
    if row["id"] is None:
        raise HTTPPreconditionFailed("the note changed since you read it", details={"version": found})
    return row


def _bearer_only(request: Request) -> str | None:
    """The request's bearer token when it alone can name the caller: well formed, and no session cookie
    (a session's user comes first: ``AnyIdentity(SessionIdentity, BearerTokenIdentity)``)."""
    if request.app.state.session_cookie in request.cookies:
        return None
    return bearer_token(request)


def _note_id(note_id: int) -> int:
    """The path's note id; one past the column's range names no note."""
    if note_id > MAX_ID:
        raise HTTPNotFound("no such note")
    return note_id


IfMatch = Annotated[str | None, Header("If-Match")]


@router.get("/notes", name="notes")
@checks_login
async def list_notes(
    request: Request,
    limit: Annotated[int, Meta(ge=1, le=MAX_ID)] = 20,
    after: Annotated[int, Meta(ge=0, le=MAX_ID)] = 0,
    done: bool | None = None,
    q: str | None = None,
) -> NotePage:
    """The caller's notes by id, ``limit`` at a time after the ``after`` cursor; filters ``done`` and ``q``.

    ``limit`` above 100 is taken as 100. ``q`` keeps the notes whose title contains it,
    whatever the case. ``next`` keeps the limit and the filters.
    """
    limit = min(limit, MAX_LIMIT)
    token = _bearer_only(request)
    if token is None:  # a session, or no credentials: the identity policy answers (as login_required would)
        caller = await identity(request)
        if caller is None:
            raise unauthorized(request)
        sql, params = queries.notes_page(caller.id, after, limit, done, q)
        notes = await _db(request).fetchall(sql, params, into=Note)  # the rows as Notes, no dict between
    else:  # the token's lookup joined to the page: one round trip, not two
        rows = await _db(request).fetchrows(*queries.notes_page_by_token(token_hash(token), after, limit, done, q))
        if not rows:  # no such token, or expired
            raise unauthorized(request)
        remember_identity(request, User(id=rows[0][0], username=rows[0][1]))
        notes = [Note(*row[2:]) for row in rows if row[2] is not None]
    more = len(notes) > limit
    notes = notes[:limit]
    next_url = None
    if more:
        next_url = f"{request.url_for('notes')}?{queries.next_page(notes[-1].id, limit, done, q)}"
    return NotePage(notes, next_url)


@router.post("/notes", status=201)
@login_required
async def create_note(request: Request, note: NewNote) -> Note | Response:
    """Create a note of the caller's: 201, its URL in ``Location``, its version in ``ETag``."""
    row = await _db(request).fetchone(
        queries.INSERT_NOTE,
        (await _owner(request), note.title.strip(), note.body, note.done),
    )
    assert row is not None
    response = _note_response(row, status=201)
    response.headers["Location"] = request.url_for("note", note_id=row["id"])
    return response


@router.get("/notes/{note_id:int}", name="note")
@raises(HTTPNotModified)
@login_required
async def get_note(request: Request, note_id: int) -> Note | Response:
    """A note of the caller's, its version in ``ETag``; 304 when ``If-None-Match`` names it."""
    row = await _db(request).fetchone(queries.SELECT_NOTE, (_note_id(note_id), await _owner(request)))
    if row is None:
        raise HTTPNotFound("no such note")
    return _note_response(row)


async def _update(request: Request, note_id: int, note: NotePatch, if_match: str | None) -> Response:
    expected = _expected_versions(if_match, note.version)
    if expected is None:
        raise HTTPPreconditionRequired("send If-Match with the note's ETag, or its version in the body")
    fields = {
        name: value.strip() if name == "title" else value
        for name in ("title", "body", "done")
        if (value := getattr(note, name)) is not UNSET
    }
    if not fields:
        raise HTTPUnprocessableEntity(
            VALIDATION_MESSAGE, details=[{"location": "body", "message": "no field to change"}]
        )
    row = await _write_if_expected(
        request,
        _note_id(note_id),
        expected,
        queries.update_note(list(fields)),
        tuple(fields.values()),
    )
    return _note_response(row)


@router.put("/notes/{note_id:int}")
@raises(HTTPBadRequest, HTTPPreconditionFailed, HTTPPreconditionRequired)
@login_required
async def replace_note(
    request: Request, note_id: int, note: NoteReplacement, if_match: IfMatch = None
) -> Note | Response:
    """Replace a note's title, and its body and done when given.

    The version it was based on goes in ``If-Match`` or as ``version``: 412 when
    the note has another since, 428 without either.
    """
    return await _update(request, note_id, note, if_match)


@router.patch("/notes/{note_id:int}")
@raises(HTTPBadRequest, HTTPPreconditionFailed, HTTPPreconditionRequired)
@login_required
async def patch_note(request: Request, note_id: int, note: NotePatch, if_match: IfMatch = None) -> Note | Response:
    """Change the fields given of a note.

    The version it was based on goes in ``If-Match`` or as ``version``: 412 when
    the note has another since, 428 without either.
    """
    return await _update(request, note_id, note, if_match)


@router.delete("/notes/{note_id:int}", status=204)
@raises(HTTPBadRequest, HTTPPreconditionFailed)
@login_required
async def delete_note(request: Request, note_id: int, if_match: IfMatch = None) -> None:
    """Delete a note; with ``If-Match``, only at one of the versions it lists (else 412).

    A delete sent again (nginx passes a DELETE to the next host when one fails) answers
    404: the note is gone, and no record tells a deleted note from one that never was.
    """
    expected = _expected_versions(if_match, None)
    if expected is None:  # DELETE needs no precondition
        expected = "*"
    await _write_if_expected(request, _note_id(note_id), expected, queries.DELETE_NOTE, ())

"""The notes resource: list, create, read, replace, patch, delete, with optimistic concurrency.

A note's ``version`` is its ETag. PUT, PATCH and DELETE take the version they
were based on, in ``If-Match`` or as ``"version"`` in the body; a stale one
gets 412 and the client re-reads. Without either, PUT and PATCH get 428.
``If-Match: *`` writes whatever the version; a weak ETag never matches.
"""

from __future__ import annotations

from typing import Any, Literal
from urllib.parse import quote

from aiorest import (
    HTTPBadRequest,
    HTTPError,
    HTTPNotFound,
    HTTPPreconditionFailed,
    HTTPUnprocessableEntity,
    JSONResponse,
    Request,
    Response,
    Router,
)
from aiorest.db import Database

router = Router()

MAX_LIMIT = 100
_FIELDS: dict[str, type[Any]] = {"title": str, "body": str, "done": bool}
_COLUMNS = "id, title, body, done, version, created_at, updated_at"


def _db(request: Request) -> Database:
    db: Database = request.app.state.db
    return db


def _as_json(row: dict[str, Any]) -> dict[str, Any]:
    return {
        **row,
        "created_at": row["created_at"].isoformat(),
        "updated_at": row["updated_at"].isoformat(),
    }


def _note_response(row: dict[str, Any], status: int = 200) -> JSONResponse:
    return JSONResponse(_as_json(row), status=status, headers={"ETag": f'"{row["version"]}"'})


def _validate(data: Any, *, partial: bool) -> dict[str, Any]:
    """The note fields of a request body, or 422 with an error per field."""
    if not isinstance(data, dict):
        raise HTTPUnprocessableEntity("invalid note", details={"body": "must be a JSON object"})
    errors: dict[str, str] = {}
    fields: dict[str, Any] = {}
    for name, kind in _FIELDS.items():
        if name not in data:
            if name == "title" and not partial:
                errors[name] = "required"
            continue
        value = data[name]
        if not isinstance(value, kind):
            errors[name] = f"must be a {'string' if kind is str else 'boolean'}"
        elif name == "title" and not 1 <= len(value.strip()) <= 200:
            errors[name] = "must be 1 to 200 characters"
        elif name == "body" and len(value) > 10000:
            errors[name] = "must be at most 10000 characters"
        else:
            fields[name] = value.strip() if name == "title" else value
    for name in data:
        if name not in _FIELDS and name not in ("version", "id", "created_at", "updated_at"):
            errors[name] = "unknown field"
    if errors:
        raise HTTPUnprocessableEntity("invalid note", details=errors)
    return fields


def _expected_versions(request: Request, data: Any) -> list[int] | Literal["*"] | None:
    """The versions a write may apply to: ``If-Match`` first, else the body's ``version``.

    None: the request names none. ``"*"``: ``If-Match: *``, any version. A list:
    the versions of the ETags listed (a weak ETag, ``W/"3"``, never matches
    If-Match: RFC 9110, 13.1.1); it may be empty, and then nothing matches.
    """
    if_match = request.headers.get("if-match")
    if if_match is not None:
        if if_match.strip() == "*":
            return "*"
        versions = []
        for tag in if_match.split(","):
            tag = tag.strip()
            if len(tag) < 2 or tag[0] != '"' or tag[-1] != '"':
                if not tag.startswith('W/"'):
                    raise HTTPBadRequest("If-Match must list ETags, e.g. '\"3\"', or be *")
                continue
            digits = tag[1:-1]
            if digits.isascii() and digits.isdigit() and len(digits) < 19:
                versions.append(int(digits))
        return versions
    version = data.get("version") if isinstance(data, dict) else None
    if version is None:
        return None
    if not isinstance(version, int) or isinstance(version, bool):
        raise HTTPUnprocessableEntity("invalid note", details={"version": "must be an integer"})
    return [version]


def _version_condition(expected: list[int] | Literal["*"]) -> tuple[str, tuple[Any, ...]]:
    """The SQL that tells whether ``found``, the note's version, is expected, and its parameters."""
    if expected == "*":
        return "true", ()
    if not expected:  # an empty list matches no version
        return "false", ()
    if len(expected) == 1:
        return "found = %s", (expected[0],)
    return "found = ANY(%s)", (expected,)


async def _write_if_expected(
    request: Request, note_id: int, expected: list[int] | Literal["*"], write: str, params: tuple[Any, ...]
) -> dict[str, Any]:
    """Run ``write`` (an UPDATE ... FROM or DELETE ... USING ``locked``) if the note has an expected version.

    Returns the written row; 404 if there is no such note, 412 with its version
    if that is not one of ``expected``.
    """
    # The write and its answer come from one statement, so both describe one moment.
    # The first CTE locks the note: under READ COMMITTED, FOR UPDATE waits for a
    # concurrent write to commit, then reads the row as that write left it (nothing,
    # if it deleted the row). The second writes the locked row only if the version
    # found is expected; the SELECT returns that version beside the written row
    # (NULLs if nothing was written). A write, then a second query to tell 404 from
    # 412, let another write slip in between: a 412 could report the very version
    # the request named.
    condition, versions = _version_condition(expected)
    row = await _db(request).fetchone(
        "WITH locked AS MATERIALIZED (SELECT id AS locked_id, version AS found FROM notes WHERE id = %s FOR UPDATE), "
        f"written AS ({write} WHERE id = locked_id AND {condition} RETURNING {_COLUMNS}) "
        "SELECT found, written.* FROM locked LEFT JOIN written ON true",
        (note_id, *params, *versions),
    )
    if row is None:
        raise HTTPNotFound("no such note")
    found = row.pop("found")
    if row["id"] is None:
        raise HTTPPreconditionFailed("the note changed since you read it", details={"version": found})
    return row


MAX_ID = 2**63 - 1  # bigserial


def _note_id(request: Request) -> int:
    """The path's note id; one past the column's range names no note."""
    note_id: int = request.path_params["note_id"]
    if note_id > MAX_ID:
        raise HTTPNotFound("no such note")
    return note_id


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _int_param(request: Request, name: str, default: int | None) -> int | None:
    text = request.query.get(name)
    if text is None or text == "":
        return default
    digits = text.removeprefix("-")
    if not (digits.isascii() and digits.isdigit()):  # int() would take "1_0", " 5" and "٥"
        raise HTTPUnprocessableEntity("invalid query", details={name: "must be an integer"})
    try:
        value = int(text)
    except ValueError:  # more digits than int() converts
        raise HTTPUnprocessableEntity("invalid query", details={name: "out of range"}) from None
    if not (1 if name == "limit" else 0) <= value <= MAX_ID:
        raise HTTPUnprocessableEntity("invalid query", details={name: "out of range"})
    return value


@router.get("/notes", name="notes")
async def list_notes(request: Request) -> dict[str, Any]:
    """Notes by id, ``limit`` (≤ 100) at a time after the ``after`` cursor; filters ``done`` and ``q``."""
    limit = min(_int_param(request, "limit", 20) or 20, MAX_LIMIT)
    after = _int_param(request, "after", 0) or 0
    where = ["id > %s"]
    params: list[Any] = [after]
    done = request.query.get("done")
    if done is not None:
        if done not in ("true", "false"):
            raise HTTPUnprocessableEntity("invalid query", details={"done": "must be true or false"})
        where.append("done = %s")
        params.append(done == "true")
    text = request.query.get("q")
    if text:
        where.append("title ILIKE %s")
        params.append("%" + _escape_like(text) + "%")
    rows = await _db(request).fetchall(
        f"SELECT {_COLUMNS} FROM notes WHERE {' AND '.join(where)} ORDER BY id LIMIT %s", (*params, limit + 1)
    )
    more = len(rows) > limit
    rows = rows[:limit]
    next_url = None
    if more:
        query = f"after={rows[-1]['id']}&limit={limit}"
        if done is not None:
            query += f"&done={done}"
        if text:
            query += f"&q={quote(text)}"
        next_url = f"{request.url_for('notes')}?{query}"
    return {"items": [_as_json(row) for row in rows], "next": next_url}


@router.post("/notes")
async def create_note(request: Request) -> JSONResponse:
    fields = _validate(await request.json(), partial=False)
    row = await _db(request).fetchone(
        f"INSERT INTO notes (title, body, done) VALUES (%s, %s, %s) RETURNING {_COLUMNS}",
        (fields["title"], fields.get("body", ""), fields.get("done", False)),
    )
    assert row is not None
    response = _note_response(row, status=201)
    response.headers["Location"] = request.url_for("note", note_id=row["id"])
    return response


@router.get("/notes/{note_id:int}", name="note")
async def get_note(request: Request) -> JSONResponse:
    row = await _db(request).fetchone(f"SELECT {_COLUMNS} FROM notes WHERE id = %s", (_note_id(request),))
    if row is None:
        raise HTTPNotFound("no such note")
    return _note_response(row)


async def _update(request: Request, *, partial: bool) -> JSONResponse:
    data = await request.json()
    fields = _validate(data, partial=partial)
    expected = _expected_versions(request, data)
    if expected is None:
        raise HTTPError("send If-Match with the note's ETag, or its version in the body", status=428)
    if not fields:
        raise HTTPUnprocessableEntity("invalid note", details={"body": "no field to change"})
    assignments = ", ".join(f"{name} = %s" for name in fields)
    row = await _write_if_expected(
        request,
        _note_id(request),
        expected,
        f"UPDATE notes SET {assignments}, version = version + 1, updated_at = now() FROM locked",
        tuple(fields.values()),
    )
    return _note_response(row)


@router.put("/notes/{note_id:int}")
async def replace_note(request: Request) -> JSONResponse:
    return await _update(request, partial=False)


@router.patch("/notes/{note_id:int}")
async def patch_note(request: Request) -> JSONResponse:
    return await _update(request, partial=True)


@router.delete("/notes/{note_id:int}")
async def delete_note(request: Request) -> Response:
    note_id = _note_id(request)
    expected = _expected_versions(request, None)
    if expected is None:  # DELETE needs no precondition
        expected = "*"
    await _write_if_expected(request, note_id, expected, "DELETE FROM notes USING locked", ())
    return Response(status=204)

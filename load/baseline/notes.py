"""The notes of the threaded baselines, as example_app/notes.py has them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from aiorest.http import parse_etags
from example_app import queries
from example_app.queries import MAX_ID, MAX_LIMIT

from .common import NOTES_PATH, ApiError, Cursor, Pool, invalid

_FIELDS: dict[str, type[Any]] = {"title": str, "body": str, "done": bool}
_READ_ONLY = ("version", "id", "created_at", "updated_at")


def note_location(note: Mapping[str, Any]) -> str:
    return f"{NOTES_PATH}/{note['id']}"


def note_etag(note: Mapping[str, Any]) -> str:
    return f'"{note["version"]}"'


def _as_note(cur: Cursor, row: Sequence[Any]) -> dict[str, Any]:
    """A row of the note's columns as JSON wants it; ``row`` may be the last columns of the cursor's."""
    assert cur.description is not None
    names = [column.name for column in cur.description[len(cur.description) - len(row) :]]
    note = dict(zip(names, row, strict=True))
    note["created_at"] = note["created_at"].isoformat()
    note["updated_at"] = note["updated_at"].isoformat()
    return note


def _fetch_note(cur: Cursor) -> dict[str, Any] | None:
    row = cur.fetchone()
    return None if row is None else _as_note(cur, row)


def validate_note(data: Any, *, partial: bool) -> dict[str, Any]:
    """The note fields of a request body, or 422 with an error per field."""
    if not isinstance(data, dict):
        raise invalid("body", {"": "must be a JSON object"})
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
        if name not in _FIELDS and name not in _READ_ONLY:
            errors.setdefault("", f"Object contains unknown field `{name}`")  # located at the body, as msgspec does
    if errors:
        raise invalid("body", errors)
    return fields


def expected_versions(if_match: str | None, data: Any) -> list[int] | Literal["*"] | None:
    """The versions a write may apply to: ``If-Match`` first, else the body's ``version``.

    None: none named. ``"*"``: any version. A list (maybe empty): the listed
    strong ETags' versions; a weak ETag never matches If-Match.
    """
    if if_match is not None:
        try:
            return queries.expected_versions(parse_etags(if_match))
        except ValueError:
            raise ApiError(400, queries.IF_MATCH_ERROR) from None
    version = data.get("version") if isinstance(data, dict) else None
    if version is None:
        return None
    if not isinstance(version, int) or isinstance(version, bool):
        raise invalid("body", {"version": "must be an integer"})
    return [version]


def _int_param(query: Mapping[str, str], name: str, default: int) -> int:
    text = query.get(name)
    if text is None or text == "":
        return default
    if not (text.removeprefix("-").isascii() and text.removeprefix("-").isdigit()):
        raise invalid("query", {name: "must be an integer"})
    try:
        value = int(text)
    except ValueError:  # more digits than int() converts
        raise invalid("query", {name: "out of range"}) from None
    if not (1 if name == "limit" else 0) <= value <= MAX_ID:
        raise invalid("query", {name: "out of range"})
    return value


def list_notes(pool: Pool, owner_id: int, query: Mapping[str, str]) -> dict[str, Any]:
    """The owner's notes by id, ``limit`` (≤ 100) at a time after the ``after`` cursor; filters ``done`` and ``q``."""
    limit = min(_int_param(query, "limit", 20), MAX_LIMIT)
    after = _int_param(query, "after", 0)
    done = query.get("done")
    if done not in (None, "true", "false"):
        raise invalid("query", {"done": "must be true or false"})
    done_filter = None if done is None else done == "true"
    text = query.get("q")
    with pool.cursor() as cur:
        cur.execute(*queries.notes_page(owner_id, after, limit, done_filter, text))
        notes = [_as_note(cur, row) for row in cur.fetchall()]
    more = len(notes) > limit
    notes = notes[:limit]
    next_url = None
    if more:
        next_url = f"{NOTES_PATH}?{queries.next_page(notes[-1]['id'], limit, done_filter, text)}"
    return {"items": notes, "next": next_url}


def create_note(pool: Pool, owner_id: int, data: Any) -> dict[str, Any]:
    fields = validate_note(data, partial=False)
    with pool.cursor() as cur:
        cur.execute(queries.INSERT_NOTE, (owner_id, fields["title"], fields.get("body", ""), fields.get("done", False)))
        note = _fetch_note(cur)
    assert note is not None
    return note


def get_note(pool: Pool, owner_id: int, note_id: int) -> dict[str, Any]:
    """The note, if the owner's: another's is missing, so that ids reveal nothing."""
    with pool.cursor() as cur:
        cur.execute(queries.SELECT_NOTE, (note_id, owner_id))
        note = _fetch_note(cur)
    if note is None:
        raise ApiError(404, "no such note")
    return note


def update_note(
    pool: Pool, owner_id: int, note_id: int, data: Any, if_match: str | None, *, partial: bool
) -> dict[str, Any]:
    """PUT (``partial=False``) or PATCH: 412 on a stale version, 428 without one."""
    fields = validate_note(data, partial=partial)
    expected = expected_versions(if_match, data)
    if expected is None:
        raise ApiError(428, "send If-Match with the note's ETag, or its version in the body")
    if not fields:
        raise invalid("body", {"": "no field to change"})
    with pool.cursor() as cur:
        return _write_if_expected(cur, owner_id, note_id, expected, queries.update_note(list(fields)), fields.values())


def delete_note(pool: Pool, owner_id: int, note_id: int, if_match: str | None) -> None:
    expected = expected_versions(if_match, None)
    with pool.cursor() as cur:
        _write_if_expected(cur, owner_id, note_id, "*" if expected is None else expected, queries.DELETE_NOTE, ())


def _write_if_expected(
    cur: Cursor,
    owner_id: int,
    note_id: int,
    expected: list[int] | Literal["*"],
    write: str,
    params: Iterable[Any],
) -> dict[str, Any]:
    """The note as ``write`` left it, if its version was expected: 404 if the owner has none, else 412."""
    cur.execute(*queries.write_if_expected(note_id, owner_id, expected, write, tuple(params)))
    row = cur.fetchone()
    if row is None:
        raise ApiError(404, "no such note")
    found, *written = row
    if written[0] is None:
        raise ApiError(412, "the note changed since you read it", details={"version": found})
    return _as_note(cur, written)

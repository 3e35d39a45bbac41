"""What the example service asks PostgreSQL: its SQL, one place for the service and the baselines.

example_app's handlers run these statements through ``aiorest.db``; the threaded
baselines of the load suite (load/baseline/) run the very same ones through
psycopg2, so that a comparison measures the servers and not two ways of asking
the database. Placeholders are psycopg2's (``%s``), which both use. Nothing here
touches a connection: a statement is a string, or a function that builds one
with its parameters; beside them, the rules that read a query's parameters from
a request (the TechEmpower ``queries`` count, a note's ``If-Match`` versions,
the notes' next page), which both sides apply alike.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal
from urllib.parse import quote

from aiorest.http import ETag

MAX_LIMIT = 100  # notes per page
MAX_ID = 2**63 - 1  # bigserial

# -- users and tokens --------------------------------------------------------------------

INSERT_USER = (
    "INSERT INTO users (username, password_hash) VALUES (%s, %s) ON CONFLICT (username) DO NOTHING"
    " RETURNING id, username"
)
USER_FOR_LOGIN = "SELECT id, username, password_hash FROM users WHERE username = %s"
USER_BY_TOKEN = (
    "SELECT users.id, users.username FROM api_tokens JOIN users ON users.id = api_tokens.user_id"
    " WHERE token_hash = %s AND expires_at > now()"
)
INSERT_TOKEN = (
    "INSERT INTO api_tokens (token_hash, user_id, expires_at) VALUES (%s, %s, now() + interval '30 days')"
    " RETURNING expires_at"
)
DELETE_TOKEN = "DELETE FROM api_tokens WHERE token_hash = %s AND expires_at > now()"

# -- notes -------------------------------------------------------------------------------

NOTE_COLUMNS = "id, title, body, done, version, created_at, updated_at"
SELECT_NOTE = f"SELECT {NOTE_COLUMNS} FROM notes WHERE id = %s AND owner_id = %s"
INSERT_NOTE = f"INSERT INTO notes (owner_id, title, body, done) VALUES (%s, %s, %s, %s) RETURNING {NOTE_COLUMNS}"
DELETE_NOTE = "DELETE FROM notes USING locked"


def escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def notes_page(owner_id: int, after: int, limit: int, done: bool | None, q: str | None) -> tuple[str, tuple[Any, ...]]:
    """The owner's notes after ``after`` by id, one more than ``limit`` (whether a next page exists)."""
    where = ["owner_id = %s", "id > %s"]
    params: list[Any] = [owner_id, after]
    if done is not None:
        where.append("done = %s")
        params.append(done)
    if q:
        where.append("title ILIKE %s")
        params.append("%" + escape_like(q) + "%")
    return f"SELECT {NOTE_COLUMNS} FROM notes WHERE {' AND '.join(where)} ORDER BY id LIMIT %s", (*params, limit + 1)


def notes_page_by_token(
    token_hash: str, after: int, limit: int, done: bool | None, q: str | None
) -> tuple[str, tuple[Any, ...]]:
    """:func:`notes_page` of the user a bearer token names, and the user, in one statement.

    Each row is the user (id, username), then a note's columns; no row: no such token (or expired); one
    row of NULL note columns: the user has no note on this page. The token's lookup is USER_BY_TOKEN's.
    """
    notes, params = notes_page(0, after, limit, done, q)
    notes = notes.replace("owner_id = %s", "owner_id = me.id", 1)
    sql = f"SELECT me.id, me.username, page.* FROM ({USER_BY_TOKEN}) AS me LEFT JOIN LATERAL ({notes}) AS page ON true"
    sql += " ORDER BY page.id"
    return sql, (token_hash, *params[1:])


def next_page(last_id: int, limit: int, done: bool | None, q: str | None) -> str:
    """The query string of the page after the note ``last_id``: the same limit and filters."""
    query = f"after={last_id}&limit={limit}"
    if done is not None:
        query += f"&done={'true' if done else 'false'}"
    if q:
        query += f"&q={quote(q)}"
    return query


#: The 400's message for an If-Match that is not a list of entity-tags (the baselines answer the same).
IF_MATCH_ERROR = "If-Match must list ETags, e.g. '\"3\"', or be *"


def expected_versions(tags: list[ETag] | Literal["*"]) -> list[int] | Literal["*"]:
    """The versions an ``If-Match`` field's entity-tags (:func:`aiorest.http.parse_etags`) name.

    ``"*"`` (any), or those of its strong tags that are versions: a weak one (``W/"3"``)
    never matches If-Match (RFC 9110, 13.1.1), nor does one that is not a number, so
    the list may be empty, and then nothing matches.
    """
    if tags == "*":
        return "*"
    return [
        int(tag.tag) for tag in tags if not tag.weak and tag.tag.isascii() and tag.tag.isdigit() and len(tag.tag) < 19
    ]


def update_note(fields: list[str]) -> str:
    """The write of :func:`write_if_expected` that sets ``fields`` (in order) and moves the version on."""
    assignments = ", ".join(f"{name} = %s" for name in fields)
    return f"UPDATE notes SET {assignments}, version = version + 1, updated_at = now() FROM locked"


def _version_condition(expected: list[int] | Literal["*"]) -> tuple[str, tuple[Any, ...]]:
    """The SQL that tells whether ``found``, the note's version, is expected, and its parameters."""
    if expected == "*":
        return "true", ()
    if not expected:  # an empty list matches no version
        return "false", ()
    if len(expected) == 1:
        return "found = %s", (expected[0],)
    return "found = ANY(%s)", (expected,)


def write_if_expected(
    note_id: int, owner_id: int, expected: list[int] | Literal["*"], write: str, params: tuple[Any, ...]
) -> tuple[str, tuple[Any, ...]]:
    """``write`` (:func:`update_note` or ``DELETE_NOTE``) of the note, if its version is one ``expected``.

    One row, ``found`` (the version the note had) then the written note's columns
    (NULLs if nothing was written), or no row if the owner has no such note.
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
    sql = (
        "WITH locked AS MATERIALIZED (SELECT id AS locked_id, version AS found FROM notes"
        " WHERE id = %s AND owner_id = %s FOR UPDATE), "
        f"written AS ({write} WHERE id = locked_id AND {condition} RETURNING {NOTE_COLUMNS}) "
        "SELECT found, written.* FROM locked LEFT JOIN written ON true"
    )
    return sql, (note_id, owner_id, *params, *versions)


# -- attachments -------------------------------------------------------------------------

ATTACHMENT_COLUMNS = "id, note_id, filename, content_type, size, sha256, created_at, verified_at"
# The upload's transaction: the note (kept from being deleted meanwhile), then the owner's row,
# locked so that two uploads of one user count their quota one after the other (NO KEY: a note
# inserted meanwhile, whose foreign key takes KEY SHARE on the user, does not wait). The sum is
# a statement of its own, after the lock: one taken with the lock would read a snapshot from
# before the wait, without the attachment the lock's previous holder just committed.
LOCK_NOTE_FOR_ATTACHMENT = "SELECT id FROM notes WHERE id = %s AND owner_id = %s FOR KEY SHARE"
LOCK_USER_QUOTA = "SELECT id FROM users WHERE id = %s FOR NO KEY UPDATE"
QUOTA_USED = "SELECT coalesce(sum(size), 0) FROM attachments WHERE owner_id = %s"
COUNT_NOTE_ATTACHMENTS = "SELECT count(*) FROM attachments WHERE note_id = %s"
INSERT_ATTACHMENT = (
    "INSERT INTO attachments (note_id, owner_id, filename, content_type, size, chunk_size)"
    " VALUES (%s, %s, %s, %s, %s, %s) RETURNING id"
)
INSERT_CHUNK = "INSERT INTO attachment_chunks (attachment_id, seq, data) VALUES (%s, %s, %s)"
SEAL_ATTACHMENT = f"UPDATE attachments SET sha256 = %s WHERE id = %s RETURNING {ATTACHMENT_COLUMNS}"
SELECT_ATTACHMENTS = (
    f"SELECT {ATTACHMENT_COLUMNS} FROM attachments WHERE note_id = %s AND owner_id = %s ORDER BY id LIMIT %s"
)
SELECT_ATTACHMENT = (
    f"SELECT {ATTACHMENT_COLUMNS}, chunk_size FROM attachments WHERE id = %s AND note_id = %s AND owner_id = %s"
)
# substring() of a chunk stored uncompressed reads only the pieces it needs (1-based offset).
SELECT_CHUNK = "SELECT substring(data FROM %s FOR %s) FROM attachment_chunks WHERE attachment_id = %s AND seq = %s"
DELETE_ATTACHMENT = "DELETE FROM attachments WHERE id = %s AND note_id = %s AND owner_id = %s"
VERIFY_ATTACHMENT = "UPDATE attachments SET verified_at = now() WHERE id = %s AND sha256 = %s"
ATTACHMENT_FOR_CHECK = "SELECT size, chunk_size, sha256 FROM attachments WHERE id = %s"


def chunk_reads(first: int, last: int, chunk_size: int) -> Iterator[tuple[int, int, int]]:
    """The chunks holding bytes ``first`` to ``last`` (inclusive), in order: (seq, 1-based offset, length) each."""
    for seq in range(first // chunk_size, last // chunk_size + 1):
        start = max(first, seq * chunk_size)
        end = min(last, (seq + 1) * chunk_size - 1)
        yield seq, start - seq * chunk_size + 1, end - start + 1


# -- TechEmpower ---------------------------------------------------------------------------

SELECT_WORLD = "SELECT id, randomnumber FROM world WHERE id = %s"
SELECT_FORTUNES = "SELECT id, message FROM fortune"


def query_count(text: str | None) -> int:
    """``queries``: missing, empty, 0 or not a number → 1; above 500 → 500."""
    text = "1" if text is None else text
    if not (text.isascii() and text.isdigit()):  # int() would take "1_0", " 5" and "٥"
        return 1
    digits = text.lstrip("0")
    if len(digits) > 3:
        return 500
    return min(max(int(digits or "0"), 1), 500)


def update_worlds(new_numbers: dict[int, int]) -> tuple[str, list[int]]:
    """One bulk UPDATE giving each world id its new number."""
    # Rows in id order, so that concurrent requests lock them in the same order and never deadlock.
    ordered = sorted(new_numbers.items())
    values = ", ".join(["(%s::int, %s::int)"] * len(ordered))
    sql = f"UPDATE world SET randomnumber = v.r FROM (VALUES {values}) AS v(id, r) WHERE world.id = v.id"
    return sql, [value for pair in ordered for value in pair]

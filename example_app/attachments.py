"""Files attached to notes: upload (multipart), list, download (ranges, ETag, 304), delete.

The files live in PostgreSQL (migrations/0004_attachments.sql), cut into chunks
of 256 KiB, so that every host of a cluster serves every attachment and a
backup of the database holds them. Neither way does a file sit whole in memory:

* **Upload.** ``POST /notes/{id}/attachments`` takes a ``multipart/form-data``
  form whose ``file`` part is the file (a typed ``UploadFile`` parameter: the
  OpenAPI document shows the form). The route's own ``max_body_size`` lets
  it past the server's 1 MiB; aiorest spools the part to an anonymous temporary
  file as it arrives (docs/forms.rst); then one transaction locks the owner's
  row, checks the quota, and copies the file into ``attachment_chunks`` a chunk
  at a time, hashing it on the way. 201 with the attachment. An
  ``Idempotency-Key`` (the notes' middleware, example_app/app.py) makes a
  retried upload store nothing twice: its answer is replayed.
* **Download.** ``GET /notes/{id}/attachments/{aid}`` streams the chunks from
  PostgreSQL one query at a time, holding a pool connection only while a chunk
  is read. Its ``ETag`` is the file's SHA-256 (strong, so ``If-Range`` works):
  304 to a matching ``If-None-Match``, one ``Range`` answered 206 reading only
  the chunks it covers (several ranges: the whole file, 200; none satisfiable:
  416). HEAD answers the head alone.
* **Quota.** The sizes of a user's attachments add up to at most their quota
  (``ATTACHMENT_QUOTA`` bytes, default 512 MiB); an upload past it is 413 and
  names it. A file is at most ``ATTACHMENT_MAX_SIZE`` bytes (default 256 MiB).
* **After the response.** A background task reads the stored chunks back,
  hashes them, and sets ``verified_at`` when they are the bytes received.

A note of another user is 404, as the notes answer.
"""

from __future__ import annotations

import datetime
import hashlib
import logging
import os
from collections.abc import AsyncIterator
from typing import Any, NoReturn

from msgspec import Struct

from aiorest import (
    App,
    BackgroundTasksFull,
    Handler,
    HTTPConflict,
    HTTPError,
    HTTPNotFound,
    HTTPNotModified,
    HTTPPayloadTooLarge,
    Request,
    Response,
    Router,
    StreamResponse,
    UploadFile,
)
from aiorest.db import Database
from aiorest.http import check_preconditions
from aiorest.security import identity, login_required
from aiorest.typed import raises

from . import queries
from .headers import byte_range, content_disposition, display_name, media_type
from .queries import MAX_ID

logger = logging.getLogger("example_app.attachments")

_MiB = 1024 * 1024
#: Bytes of one stored chunk: a chunk is the most of a file in memory at once, either way.
CHUNK_SIZE = 256 * 1024
#: Bytes of one file at most (``ATTACHMENT_MAX_SIZE``); past it the upload is 413.
MAX_SIZE = int(os.environ.get("ATTACHMENT_MAX_SIZE", str(256 * _MiB)))
#: What the form may add to the file: its boundaries and part headers (a few hundred bytes), small fields.
FORM_OVERHEAD = _MiB
#: The upload route's own body limit: deploy/nginx/aiorest.conf's client_max_body_size for it (257m) is the same.
MAX_BODY = MAX_SIZE + FORM_OVERHEAD
#: A user's attachments together, in bytes, unless ``ATTACHMENT_QUOTA`` says (see :func:`setup`).
DEFAULT_QUOTA = 512 * _MiB
#: Attachments a note holds at most (past it an upload is 409), so that its listing shows them all.
MAX_PER_NOTE = 1000


router = Router()


class Attachment(Struct):
    """A file attached to a note. ``sha256`` (hex) is its ETag; ``verified_at`` is set once the
    stored chunks were read back and found to be the bytes received."""

    id: int
    note_id: int
    filename: str
    content_type: str
    size: int
    sha256: str
    created_at: datetime.datetime
    verified_at: datetime.datetime | None
    url: str


def setup(app: App) -> None:
    """The app's quota per user: ``ATTACHMENT_QUOTA`` bytes, default 512 MiB (``app.state.attachment_quota``)."""
    quota = int(os.environ.get("ATTACHMENT_QUOTA", str(DEFAULT_QUOTA)))
    if quota < 0:
        raise ValueError(f"ATTACHMENT_QUOTA is a number of bytes, 0 or more, not {quota}")
    app.state.attachment_quota = quota


def _db(request: Request) -> Database:
    db: Database = request.app.state.db
    return db


async def _owner(request: Request) -> int:
    user = await identity(request)
    assert user is not None  # the routes are under login_required
    owner: int = user.id
    return owner


def _ids(*ids: int) -> None:
    """Path ids past the columns' range name nothing."""
    if any(value > MAX_ID for value in ids):
        raise HTTPNotFound("no such attachment")


def _attachment(request: Request, row: dict[str, Any]) -> Attachment:
    url = request.url_for("attachment", note_id=row["note_id"], attachment_id=row["id"])
    return Attachment(
        row["id"],
        row["note_id"],
        row["filename"],
        row["content_type"],
        row["size"],
        bytes(row["sha256"]).hex(),
        row["created_at"],
        row["verified_at"],
        url,
    )


async def refuse_early(request: Request, handler: Handler) -> Response:
    """The upload route's middleware, before the form is read (a client that sent
    ``Expect: 100-continue`` sends none of it): 404 for no such note, 413 for a body
    whose ``Content-Length`` alone is past what is left of the caller's quota."""
    user = await identity(request)
    if user is not None:  # else login_required answers 401
        note_id: int = request.path_params["note_id"]
        _ids(note_id)
        database = _db(request)
        if await database.fetchone(queries.SELECT_NOTE, (note_id, user.id)) is None:
            raise HTTPNotFound("no such note")
        least = _least_file_size(request.headers.get("Content-Length", ""))
        if least > 0:
            quota: int = request.app.state.attachment_quota
            used = await database.fetchval(queries.QUOTA_USED, (user.id,))
            if used + least > quota:
                _refuse(quota, used, least, exact=False)
    response: Response = await handler(request)
    return response


@router.post("/notes/{note_id:int}/attachments", status=201, max_body_size=MAX_BODY, middleware=[refuse_early])
@raises(HTTPConflict, HTTPPayloadTooLarge)
@login_required
async def upload_attachment(request: Request, note_id: int, file: UploadFile) -> Attachment:
    """Attach ``file``, a part of a multipart/form-data form, to a note of the caller's: 201.

    413 past the file size or the caller's quota, each named; 409 when the note has 1000
    attachments already. Send an ``Idempotency-Key``
    to retry safely: a repeat stores nothing and gets the first answer.
    """
    _ids(note_id)
    owner = await _owner(request)
    quota: int = request.app.state.attachment_quota
    database = _db(request)
    if file.size > MAX_SIZE:  # the form is read with the app's FormLimits, 1 GiB a file
        raise HTTPPayloadTooLarge(
            f"a file is at most {MAX_SIZE} bytes (ATTACHMENT_MAX_SIZE)", details={"max_size": MAX_SIZE}
        )
    async with database.transaction() as tx:
        if await tx.fetchone(queries.LOCK_NOTE_FOR_ATTACHMENT, (note_id, owner)) is None:
            raise HTTPNotFound("no such note")
        await tx.execute(queries.LOCK_USER_QUOTA, (owner,))  # one upload of this user at a time: the counts below hold
        if await tx.fetchval(queries.COUNT_NOTE_ATTACHMENTS, (note_id,)) >= MAX_PER_NOTE:
            raise HTTPConflict(
                f"this note has {MAX_PER_NOTE} attachments, as many as a note holds: delete some first",
                details={"max_per_note": MAX_PER_NOTE},
            )
        used = await tx.fetchval(queries.QUOTA_USED, (owner,))
        if used + file.size > quota:
            _refuse(quota, used, file.size)
        attachment_id = await tx.fetchval(
            queries.INSERT_ATTACHMENT,
            (note_id, owner, display_name(file.filename), media_type(file.content_type), file.size, CHUNK_SIZE),
        )
        digest = hashlib.sha256()
        seq = 0
        async for chunk in fixed_chunks(file, CHUNK_SIZE):
            digest.update(chunk)
            await tx.execute(queries.INSERT_CHUNK, (attachment_id, seq, chunk))
            seq += 1
        row = await tx.fetchone(queries.SEAL_ATTACHMENT, (digest.digest(), attachment_id))
    assert row is not None
    try:
        request.background.add(verify_attachment, database, attachment_id)
    except BackgroundTasksFull:  # the check is a bonus: the upload stands without it
        logger.warning("attachment %d stored; its check after the response was skipped (busy)", attachment_id)
    return _attachment(request, row)


def _least_file_size(content_length: str) -> int:
    """The bytes of file a body of ``content_length`` holds at least (its form takes at most FORM_OVERHEAD)."""
    if not (content_length.isascii() and content_length.isdigit()) or len(content_length) > 18:
        return 0  # chunked, or past any route's limit: the server refuses it before the handler runs
    return int(content_length) - FORM_OVERHEAD


def _refuse(quota: int, used: int, size: int, *, exact: bool = True) -> NoReturn:
    """413: a file of ``size`` bytes (``exact``, else at least) would take the caller past their quota."""
    raise HTTPPayloadTooLarge(
        f"this file ({size} bytes{'' if exact else ' or more'}) would take your attachments past your quota"
        f" of {quota} bytes ({used} used; ATTACHMENT_QUOTA): delete some first",
        details={"quota": quota, "used": used, "size": size},
    )


async def fixed_chunks(upload: UploadFile, size: int) -> AsyncIterator[bytes]:
    """The upload from its beginning in chunks of exactly ``size`` bytes (the last one shorter)."""
    pending = bytearray()
    async for piece in upload.chunks(size):
        pending += piece
        while len(pending) >= size:
            yield bytes(pending[:size])
            del pending[:size]
    if pending:
        yield bytes(pending)


@router.get("/notes/{note_id:int}/attachments")
@login_required
async def list_attachments(request: Request, note_id: int) -> list[Attachment]:
    """The attachments of a note of the caller's (a note holds at most 1000), oldest first; 404 for no such note."""
    _ids(note_id)
    owner = await _owner(request)
    database = _db(request)
    rows = await database.fetchall(queries.SELECT_ATTACHMENTS, (note_id, owner, MAX_PER_NOTE))
    if not rows and await database.fetchone(queries.SELECT_NOTE, (note_id, owner)) is None:
        raise HTTPNotFound("no such note")
    return [_attachment(request, row) for row in rows]


class HTTPRangeNotSatisfiable(HTTPError):
    """416: no byte of the ``Range`` asked for is in the file; ``Content-Range`` gives its size."""

    status = 416


@router.get("/notes/{note_id:int}/attachments/{attachment_id:int}", name="attachment")
@raises(HTTPNotModified, HTTPRangeNotSatisfiable)
@login_required
async def download_attachment(request: Request, note_id: int, attachment_id: int) -> StreamResponse:
    """The file, streamed from PostgreSQL; ``ETag`` its SHA-256, 304 when ``If-None-Match`` names it.

    One ``Range`` (``bytes=0-99``, ``bytes=100-``, ``bytes=-100``) is answered 206 with that
    part (``If-Range`` with the ETag honoured), 416 when no byte of it is in the file;
    several ranges get the whole file.
    """
    _ids(note_id, attachment_id)
    database = _db(request)
    row = await database.fetchone(queries.SELECT_ATTACHMENT, (attachment_id, note_id, await _owner(request)))
    if row is None:
        raise HTTPNotFound("no such attachment")
    etag = f'"{bytes(row["sha256"]).hex()}"'
    size = row["size"]
    headers = {
        "ETag": etag,
        "Accept-Ranges": "bytes",
        "Content-Disposition": content_disposition(row["filename"]),
        # Served as a download of the type its uploader claimed: no browser may guess another (HTML, say).
        "X-Content-Type-Options": "nosniff",
        "Cache-Control": "private, no-cache",
    }
    check_preconditions(request, etag=etag, headers=headers)  # 304, or 412 for a failing If-Match
    status, first, last = 200, 0, size - 1
    asked = request.headers.get("Range")
    if_range = request.headers.get("If-Range")
    if asked is not None and (if_range is None or if_range.strip() == etag):
        span = byte_range(asked, size)
        if span == "unsatisfiable":
            raise HTTPRangeNotSatisfiable(
                "no byte of this Range is in the file", headers={"Content-Range": f"bytes */{size}"}
            )
        if span is not None:
            status, (first, last) = 206, span
            headers["Content-Range"] = f"bytes {first}-{last}/{size}"
    content = stream_chunks(database, attachment_id, first, last, row["chunk_size"])
    return StreamResponse(content, status, headers, row["content_type"])


class ChunkMissing(Exception):
    """A chunk of an attachment is not there: deleted with it since it was looked up, or lost."""


async def stream_chunks(
    database: Database, attachment_id: int, first: int, last: int, chunk_size: int
) -> AsyncIterator[bytes]:
    """Bytes ``first`` to ``last`` of an attachment, a chunk (one query) at a time, only the chunks they cover.

    An attachment deleted meanwhile ends the stream with an error: the server cuts the
    response short, and the client sees it incomplete.
    """
    if last < first:  # an empty file
        return
    for seq, offset, length in queries.chunk_reads(first, last, chunk_size):
        data = await database.fetchval(queries.SELECT_CHUNK, (offset, length, attachment_id, seq))
        if data is None or len(data) != length:
            raise ChunkMissing(f"attachment {attachment_id} has no chunk {seq} (deleted meanwhile?)")
        yield bytes(data)


@router.delete("/notes/{note_id:int}/attachments/{attachment_id:int}", status=204)
@login_required
async def delete_attachment(request: Request, note_id: int, attachment_id: int) -> None:
    """Delete an attachment (its chunks with it); its bytes leave the caller's quota. 404 when there is none."""
    _ids(note_id, attachment_id)
    deleted = await _db(request).execute(queries.DELETE_ATTACHMENT, (attachment_id, note_id, await _owner(request)))
    if not deleted:
        raise HTTPNotFound("no such attachment")


async def verify_attachment(database: Database, attachment_id: int) -> None:
    """After the upload's response: read the stored chunks back, and set ``verified_at`` if they hash
    to the SHA-256 of the bytes received. A mismatch is logged as an error and leaves it unset."""
    row = await database.fetchone(queries.ATTACHMENT_FOR_CHECK, (attachment_id,))
    if row is None:  # deleted already
        return
    digest = hashlib.sha256()
    try:
        async for chunk in stream_chunks(database, attachment_id, 0, row["size"] - 1, row["chunk_size"]):
            digest.update(chunk)
    except ChunkMissing:
        if await database.fetchone(queries.ATTACHMENT_FOR_CHECK, (attachment_id,)) is None:
            return  # deleted while it was read: nothing to check
        raise
    if digest.digest() != bytes(row["sha256"]):
        logger.error("attachment %d: the stored chunks do not hash to the SHA-256 of the upload", attachment_id)
        return
    await database.execute(queries.VERIFY_ATTACHMENT, (attachment_id, digest.digest()))

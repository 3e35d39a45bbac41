"""A live feed of the caller's notes: ``GET /notes/events`` (Server-Sent Events) and ``/notes/live`` (WebSocket).

Every write of a note (create, replace, patch, delete) adds a row to ``note_events`` and sends
``NOTIFY notes`` in its own transaction, by a trigger (migrations/0005_note_events.sql): a write
that rolls back sends nothing. The row's id is the event's id. A NOTIFY only wakes the streams
of the note's owner, on every host listening to the database; each reads its user's events after
the last it sent from the table, which is the truth: a stream that missed NOTIFYs (its
connection to PostgreSQL was lost and is back, a ``NotificationGap``) reads what it missed, and
a client that reconnects with the last id it got (``Last-Event-ID``, or ``{"since": id}`` on the
WebSocket) gets what changed since, in order, then the live events.

The events kept are the last 100000 of all users: a client resuming from before them gets a
``resync`` event (reload the notes), then the live events.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta, Struct

from aiorest import EventSourceResponse, Request, Router, ServerSentEvent, WebSocket, WebSocketDisconnect
from aiorest.db import Database, Notification, SubscriberTooSlow
from aiorest.security import identity, login_required

from .queries import MAX_ID

CHANNEL = "notes"
#: Notifications a stream may fall behind before it is dropped (it ends; its client resumes).
QUEUE_SIZE = 256
#: Events read from the table at once; a stream reads pages until it has them all.
PAGE = 100

router = Router()
logger = logging.getLogger("example_app")


class NoteEvent(Struct, kw_only=True):
    """A write of one of the caller's notes: which, what, the version it left (the last for a delete)."""

    type: Literal["created", "updated", "deleted"]
    id: int
    note_id: int
    version: int
    at: datetime.datetime


class Marker(Struct, kw_only=True):
    """``ready``: the feed is live from ``id`` on. ``resync``: events before ``id`` are no longer kept,
    reload the notes; the feed is live from ``id`` on."""

    type: Literal["ready", "resync"]
    id: int


class Resume(Struct, forbid_unknown_fields=True):
    """What a WebSocket client sends to get the events after ``since`` (the last id it received)."""

    since: Annotated[int, Meta(ge=0, le=MAX_ID)]


_EVENTS = (
    "SELECT kind AS type, id, note_id, version, at FROM note_events WHERE user_id = %s AND id > %s ORDER BY id LIMIT %s"
)
# The id to go on from: with "since", the newest event if since is not one of ours (-1) or is before the
# oldest kept (the events between were pruned: resync), else since; without, the newest event. The newest of
# anyone's, not the user's own: the ids are one sequence, and pruning goes by it. From the user's own, a user
# without events resumed from 0, which other users' events, once pruned, made look older than what is kept.
_START = """SELECT coalesce((SELECT max(id) FROM note_events), 0) AS newest,
    coalesce(%(since)s < 0 OR %(since)s < (SELECT min(id) FROM note_events) - 1, false) AS pruned"""


async def feed(db: Database, user_id: int, since: int | None) -> AsyncGenerator[NoteEvent | Marker, None]:
    """The user's events after ``since`` (None: from now), then live ones, each once, in order.

    First a ``ready`` marker (or ``resync``, when the events after ``since`` are no longer all
    kept). Ends with :exc:`SubscriberTooSlow` when the consumer falls ``QUEUE_SIZE`` notifications
    behind: its client resumes from the last id it got.
    """
    async with db.listen(CHANNEL, queue_size=QUEUE_SIZE) as subscription:
        # Subscribed first, then read where to start: an event committed in between is in the table.
        start = await db.fetchone(_START, {"user": user_id, "since": since})
        assert start is not None
        if since is None or start["pruned"]:
            cursor = start["newest"]
            yield Marker(type="resync" if since is not None else "ready", id=cursor)
        else:
            cursor = since
            yield Marker(type="ready", id=cursor)
        mine = True  # catch up first
        while True:
            if mine:
                while True:
                    rows = await db.fetchall(_EVENTS, (user_id, cursor, PAGE))
                    for row in rows:
                        yield NoteEvent(**row)
                        cursor = row["id"]
                    if len(rows) < PAGE:
                        break
            item = await anext(subscription)
            # A gap (NOTIFYs were missed): read the table. Another user's note: nothing to read.
            mine = not isinstance(item, Notification) or _user_of(item) == user_id


def _user_of(notification: Notification) -> int | None:
    try:
        user_id = json.loads(notification.payload)["user_id"]
    except (ValueError, KeyError, TypeError):
        logger.warning("a notification on %r that is not a note event: %.100r", CHANNEL, notification.payload)
        return None
    return user_id if isinstance(user_id, int) else None


def _since(last_event_id: str | None) -> int | None:
    """The id a client resumes after; a Last-Event-ID that is not one of ours resumes from before any (resync)."""
    if last_event_id is None:
        return None
    if last_event_id.isascii() and last_event_id.isdigit() and int(last_event_id) <= MAX_ID:
        return int(last_event_id)
    return -1


@router.get("/notes/events")
@login_required
async def note_events(request: Request) -> EventSourceResponse:
    """The caller's note writes as Server-Sent Events, live, from every host.

    Each event is named by its ``type`` (``created``, ``updated``, ``deleted``), its data a JSON
    note event, its ``id`` what ``Last-Event-ID`` resumes after: a reconnecting client gets what it
    missed, in order. First comes ``ready`` (or ``resync``: reload the notes, the events missed are
    no longer kept); a comment every 15 s keeps a quiet stream open.
    """
    user = await identity(request)
    assert user is not None  # login_required
    db: Database = request.app.state.db

    async def events() -> AsyncIterator[ServerSentEvent]:
        try:
            async for event in feed(db, user.id, _since(request.last_event_id)):
                yield ServerSentEvent(event=event.type, data=msgspec.to_builtins(event), id=str(event.id))
        except SubscriberTooSlow:
            return  # the stream ends; the client reconnects with Last-Event-ID and loses nothing

    return EventSourceResponse(events(), retry=1000)


@router.websocket("/notes/live")
@login_required
async def note_live(ws: WebSocket) -> None:
    """The caller's note writes as JSON messages (:class:`NoteEvent`, and a ``ready``/``resync`` :class:`Marker`).

    The client may send ``{"since": id}`` at any time: the feed starts again after that id.
    """
    user = await identity(ws.request)
    assert user is not None  # login_required
    db: Database = ws.request.app.state.db
    await ws.accept()
    since: int | None = None
    receiving = asyncio.create_task(ws.receive_json(Resume))
    try:
        while True:
            sending = asyncio.create_task(_send(ws, feed(db, user.id, since)))
            # No deadline: the WebSocket's keepalive pings find a client that is gone (docs/websockets.rst).
            done, _ = await asyncio.wait((receiving, sending), return_when=asyncio.FIRST_COMPLETED)
            if receiving in done:  # a resume: the feed starts again
                await _cancel(sending)
                since = receiving.result().since  # WebSocketDisconnect when the client left
                receiving = asyncio.create_task(ws.receive_json(Resume))
                continue
            await _cancel(sending)
            if isinstance(sending.exception(), SubscriberTooSlow):
                await ws.close(1013, "fell behind: reconnect and send since")
            else:
                sending.result()  # raises what the feed raised (a feed does not end by itself)
            return
    except WebSocketDisconnect:
        pass
    finally:
        await _cancel(receiving)


async def _send(ws: WebSocket, events: AsyncGenerator[NoteEvent | Marker, None]) -> None:
    async with contextlib.aclosing(events):  # cancelled: leaves its subscription at once
        async for event in events:
            await ws.send_json(event)


async def _cancel(task: asyncio.Future[Any]) -> None:
    if not task.done():
        task.cancel()
    await asyncio.gather(task, return_exceptions=True)

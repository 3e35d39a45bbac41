"""Bookmarks: a typed JSON API on PostgreSQL."""

import datetime
from typing import Annotated

from msgspec import Meta, Struct

from aiorest import App, HTTPNotFound
from aiorest.db import Database

Url = Annotated[str, Meta(pattern=r"^https?://\S+$", max_length=2000)]
Title = Annotated[str, Meta(min_length=1, max_length=200)]
BookmarkId = Annotated[int, Meta(ge=1, le=2**63 - 1)]  # the range of the bigserial column


class NewBookmark(Struct, forbid_unknown_fields=True):
    """What a client sends to create a bookmark."""

    url: Url
    title: Title


class Bookmark(Struct):
    """A stored bookmark."""

    id: int
    url: str
    title: str
    created_at: datetime.datetime


COLUMNS = "id, url, title, created_at"

app = App(title="Bookmarks", version="1.0")
db = Database(min_size=1, max_size=8)  # the DSN comes from $DATABASE_URL
db.setup(app)  # opened at startup, closed at shutdown


@app.get("/bookmarks")
async def list_bookmarks(limit: Annotated[int, Meta(ge=1, le=100)] = 20) -> list[Bookmark]:
    """The newest bookmarks first."""
    rows = await db.fetchall(f"SELECT {COLUMNS} FROM bookmarks ORDER BY id DESC LIMIT %s", (limit,))
    return [Bookmark(**row) for row in rows]


@app.post("/bookmarks", status=201)
async def create_bookmark(new: NewBookmark) -> Bookmark:
    """Store a bookmark; a URL already stored is a 409."""
    row = await db.fetchone(
        f"INSERT INTO bookmarks (url, title) VALUES (%s, %s) RETURNING {COLUMNS}", (new.url, new.title)
    )
    return Bookmark(**row)


@app.get("/bookmarks/{bookmark_id:int}")
async def get_bookmark(bookmark_id: BookmarkId) -> Bookmark:
    """One bookmark, or a 404."""
    row = await db.fetchone(f"SELECT {COLUMNS} FROM bookmarks WHERE id = %s", (bookmark_id,))
    if row is None:
        raise HTTPNotFound(f"no bookmark {bookmark_id}")
    return Bookmark(**row)


app.add_openapi_routes()  # /openapi.json, /docs, /redoc

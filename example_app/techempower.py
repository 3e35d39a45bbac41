"""The six TechEmpower Framework Benchmarks endpoints (see shared/TFB.md)."""

from __future__ import annotations

import random
from html import escape
from operator import itemgetter

from aiorest import Request, Response, Router
from aiorest.db import Database

from .queries import SELECT_FORTUNES, SELECT_WORLD, query_count, update_worlds

router = Router()

_FORTUNES_HEAD = (
    "<!DOCTYPE html><html><head><title>Fortunes</title></head><body><table><tr><th>id</th><th>message</th></tr>"
)
_FORTUNES_TAIL = "</table></body></html>"
_HTML = "text/html; charset=utf-8"
_by_message = itemgetter(1)


def _db(request: Request) -> Database:
    db: Database = request.app.state.db
    return db


def _count(request: Request) -> int:
    return query_count(request.query.get("queries"))


def _random_id() -> int:
    return random.randint(1, 10000)


@router.get("/json")
async def json_test(request: Request) -> dict[str, str]:
    return {"message": "Hello, World!"}


@router.get("/plaintext")
async def plaintext(request: Request) -> Response:
    return Response(b"Hello, World!", media_type="text/plain")


@router.get("/db")
async def single_query(request: Request) -> dict[str, int]:
    row = await _db(request).fetchone(SELECT_WORLD, (_random_id(),))
    assert row is not None
    return {"id": row["id"], "randomNumber": row["randomnumber"]}


@router.get("/queries")
async def multiple_queries(request: Request) -> list[dict[str, int]]:
    db = _db(request)
    worlds = []
    async with db.connection() as conn:
        for _ in range(_count(request)):
            row = await conn.fetchone(SELECT_WORLD, (_random_id(),))
            assert row is not None
            worlds.append({"id": row["id"], "randomNumber": row["randomnumber"]})
    return worlds


@router.get("/fortunes")
async def fortunes(request: Request) -> Response:
    rows = await _db(request).fetchrows(SELECT_FORTUNES)
    rows.append((0, "Additional fortune added at request time."))
    rows.sort(key=_by_message)
    cells = "".join([f"<tr><td>{id_}</td><td>{escape(message)}</td></tr>" for id_, message in rows])
    return Response(_FORTUNES_HEAD + cells + _FORTUNES_TAIL, media_type=_HTML)


@router.get("/updates")
async def updates(request: Request) -> list[dict[str, int]]:
    db = _db(request)
    count = _count(request)
    async with db.connection() as conn:
        worlds = []
        new_numbers: dict[int, int] = {}  # a repeated id gets one new number
        for _ in range(count):
            row = await conn.fetchone(SELECT_WORLD, (_random_id(),))
            assert row is not None
            number = new_numbers.setdefault(row["id"], _random_id())
            worlds.append({"id": row["id"], "randomNumber": number})
        await conn.execute(*update_worlds(new_numbers))  # one bulk UPDATE per request
    return worlds

"""The TechEmpower endpoints of the threaded baselines (example_app/techempower.py, shared/TFB.md)."""

from __future__ import annotations

import random
from html import escape

from example_app import queries

from .common import Cursor, Pool

FORTUNES_HEAD = (
    "<!DOCTYPE html><html><head><title>Fortunes</title></head><body><table><tr><th>id</th><th>message</th></tr>"
)
FORTUNES_TAIL = "</table></body></html>"
HELLO = "Hello, World!"


def _random_id() -> int:
    return random.randint(1, 10000)


def _select_world(cur: Cursor) -> dict[str, int]:
    cur.execute(queries.SELECT_WORLD, (_random_id(),))
    row = cur.fetchone()
    assert row is not None
    return {"id": row[0], "randomNumber": row[1]}


def single_world(pool: Pool) -> dict[str, int]:
    with pool.cursor() as cur:
        return _select_world(cur)


def worlds(pool: Pool, count: int) -> list[dict[str, int]]:
    """``count`` random rows, a SELECT each (TFB forbids ``WHERE id IN``)."""
    with pool.cursor() as cur:
        return [_select_world(cur) for _ in range(count)]


def update_worlds(pool: Pool, count: int) -> list[dict[str, int]]:
    """``count`` random rows with new numbers, persisted by one bulk UPDATE."""
    with pool.cursor() as cur:
        result = []
        new_numbers: dict[int, int] = {}  # a repeated id gets one new number
        for _ in range(count):
            world = _select_world(cur)
            number = new_numbers.setdefault(world["id"], _random_id())
            result.append({"id": world["id"], "randomNumber": number})
        cur.execute(*queries.update_worlds(new_numbers))
    return result


def fortunes_page(pool: Pool) -> str:
    """Every fortune plus one added now, sorted by message here (TFB forbids ORDER BY), escaped."""
    with pool.cursor() as cur:
        cur.execute(queries.SELECT_FORTUNES)
        rows: list[tuple[int, str]] = cur.fetchall()
    rows.append((0, "Additional fortune added at request time."))
    rows.sort(key=lambda row: row[1])
    cells = "".join(f"<tr><td>{id_}</td><td>{escape(message)}</td></tr>" for id_, message in rows)
    return FORTUNES_HEAD + cells + FORTUNES_TAIL

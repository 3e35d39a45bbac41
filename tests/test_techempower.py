"""The example app's TechEmpower endpoints follow the TFB rules (shared/TFB.md)."""

from __future__ import annotations

import asyncio
from collections import Counter
from html import unescape

import pytest

import aiorest.db
from aiorest.db import Database
from example_app import create_app

FORTUNE_HEAD = (
    "<!DOCTYPE html><html><head><title>Fortunes</title></head><body><table><tr><th>id</th><th>message</th></tr>"
)


@pytest.fixture
async def client(aiorest_client, shared_database_url):
    app = create_app(Database(shared_database_url, min_size=2, max_size=8))
    return await aiorest_client(app)


@pytest.fixture
def statements(monkeypatch) -> Counter[str]:
    """Every statement the app sends to PostgreSQL, counted by its first word and table."""
    seen: Counter[str] = Counter()
    original = aiorest.db._Connection.execute

    async def counting(self, sql, params=None, *, prepare=True):
        words = sql.split()
        seen[f"{words[0].upper()} {'world' if 'world' in sql else 'fortune' if 'fortune' in sql else '?'}"] += 1
        return await original(self, sql, params, prepare=prepare)

    monkeypatch.setattr(aiorest.db._Connection, "execute", counting)
    return seen


async def test_every_response_has_server_date_type_and_length(client):
    for path, content_type in [
        ("/json", "application/json"),
        ("/plaintext", "text/plain; charset=utf-8"),
        ("/db", "application/json"),
        ("/queries?queries=2", "application/json"),
        ("/fortunes", "text/html; charset=utf-8"),
        ("/updates?queries=2", "application/json"),
    ]:
        async with client.get(path) as response:
            assert response.status == 200, path
            assert response.headers["Server"] == "aiorest"
            assert response.headers["Date"].endswith(" GMT")
            assert response.headers["Content-Type"] == content_type
            assert int(response.headers["Content-Length"]) == len(await response.read())
            assert "Content-Encoding" not in response.headers


async def test_json_and_plaintext(client):
    async with client.get("/json") as response:
        assert await response.read() == b'{"message":"Hello, World!"}'
    async with client.get("/plaintext") as response:
        assert await response.read() == b"Hello, World!"


async def test_db_returns_one_world_row_with_one_select(client, statements):
    async with client.get("/db") as response:
        row = await response.json()
    assert set(row) == {"id", "randomNumber"}
    assert 1 <= row["id"] <= 10000 and 1 <= row["randomNumber"] <= 10000
    assert statements["SELECT world"] == 1


@pytest.mark.parametrize(
    ("query", "count"),
    [
        ("", 1),
        ("?queries=", 1),
        ("?queries=0", 1),
        ("?queries=foo", 1),
        ("?queries=-3", 1),
        ("?queries=7", 7),
        ("?queries=007", 7),
        ("?queries=1_0", 1),  # Python's int() reads 10
        ("?queries=%205", 1),  # and 5
        ("?queries=501", 500),
        ("?queries=" + "9" * 5000, 500),  # more digits than int() converts
    ],
)
async def test_queries_clamps_and_runs_one_select_per_row(client, statements, query, count):
    async with client.get(f"/queries{query}") as response:
        rows = await response.json()
    assert len(rows) == count
    assert all(set(row) == {"id", "randomNumber"} for row in rows)
    assert statements["SELECT world"] == count


async def test_fortunes_are_escaped_sorted_and_include_the_added_one(client, statements):
    async with client.get("/fortunes") as response:
        html = await response.text()
    assert html.startswith(FORTUNE_HEAD) and html.endswith("</table></body></html>")
    assert (
        "<tr><td>11</td><td>&lt;script&gt;alert(&quot;This should not be displayed in a browser alert box."
        "&quot;);&lt;/script&gt;</td></tr>" in html
    )
    assert "<tr><td>12</td><td>フレームワークのベンチマーク</td></tr>" in html
    rows = html[len(FORTUNE_HEAD) : -len("</table></body></html>")].split("</tr>")[:-1]
    messages = [unescape(row.split("<td>")[2].removesuffix("</td>")) for row in rows]
    assert len(messages) == 13 and messages == sorted(messages)
    assert "Additional fortune added at request time." in messages
    assert statements["SELECT fortune"] == 1


async def test_updates_persist_every_row_with_one_bulk_update(client, statements):
    async with client.get("/updates?queries=20") as response:
        rows = await response.json()
    assert len(rows) == 20
    assert statements["SELECT world"] == 20 and statements["UPDATE world"] == 1
    db = Database(client.app.state.db.dsn, min_size=1, max_size=1)
    await db.open()
    try:
        for row in rows:
            stored = await db.fetchval("SELECT randomnumber FROM world WHERE id = %s", (row["id"],))
            assert stored == row["randomNumber"]
    finally:
        await db.close()


async def test_concurrent_updates_neither_deadlock_nor_fail(client):
    async def update() -> int:
        async with client.get("/updates?queries=20") as response:
            return response.status

    assert await asyncio.gather(*(update() for _ in range(30))) == [200] * 30


async def test_the_seed_data_is_tfb_s(client):
    db = Database(client.app.state.db.dsn, min_size=1, max_size=1)
    await db.open()
    try:
        assert await db.fetchval("SELECT count(*) FROM world") == 10000
        assert await db.fetchval("SELECT count(*) FROM world WHERE randomnumber NOT BETWEEN 1 AND 10000") == 0
        assert await db.fetchval("SELECT count(*) FROM fortune") == 12
        assert await db.fetchval("SELECT message FROM fortune WHERE id = 12") == "フレームワークのベンチマーク"
    finally:
        await db.close()

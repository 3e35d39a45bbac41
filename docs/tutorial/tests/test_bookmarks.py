"""The bookmarks API, served for real, on the database $DATABASE_URL names."""

import pytest

from bookmarks.app import app, db


@pytest.fixture
async def client(aiorest_client):
    client = await aiorest_client(app)  # the app started: its pool is open
    await db.execute("TRUNCATE bookmarks RESTART IDENTITY")
    return client


async def test_create_then_get(client):
    new = {"url": "https://example.org/", "title": "Example"}
    async with client.post("/bookmarks", json=new) as response:
        assert response.status == 201
        created = await response.json()
    assert created["id"] == 1 and created["url"] == new["url"] and created["title"] == "Example"
    async with client.get(f"/bookmarks/{created['id']}") as response:
        assert response.status == 200
        assert await response.json() == created


async def test_list_is_newest_first_and_limited(client):
    for n in range(3):
        async with client.post("/bookmarks", json={"url": f"https://example.org/{n}", "title": f"#{n}"}) as response:
            assert response.status == 201
    async with client.get("/bookmarks", params={"limit": 2}) as response:
        assert response.status == 200
        assert [bookmark["title"] for bookmark in await response.json()] == ["#2", "#1"]


async def test_unknown_bookmark_is_404(client):
    async with client.get("/bookmarks/42") as response:
        assert response.status == 404
        assert await response.json() == {"error": {"status": 404, "message": "no bookmark 42", "details": None}}


async def test_invalid_input_is_422(client):
    async with client.post("/bookmarks", json={"url": "ftp://example.org/", "title": "x"}) as response:
        assert response.status == 422
        [problem] = (await response.json())["error"]["details"]
    assert problem["location"] == "body.url"
    async with client.get("/bookmarks", params={"limit": 0}) as response:
        assert response.status == 422
        [problem] = (await response.json())["error"]["details"]
    assert problem == {"location": "query.limit", "message": "Expected `int` >= 1"}


async def test_same_url_twice_is_409(client):
    new = {"url": "https://example.org/", "title": "Example"}
    async with client.post("/bookmarks", json=new) as response:
        assert response.status == 201
    async with client.post("/bookmarks", json=new) as response:
        assert response.status == 409

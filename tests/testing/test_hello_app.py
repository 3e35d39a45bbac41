"""The hello app (tests/apps/hello_app.py) tested as an aiohttp.web user would (pytest-aiohttp)."""

from tests.apps.hello_app import app


async def test_hello_example(aiohttp_client):
    client = await aiohttp_client(app)
    async with client.get("/") as response:
        assert response.status == 200
        assert await response.json() == {"message": "Hello, World!"}
    async with client.post("/notes", json={"text": "second"}) as response:
        assert response.status == 201
        location = response.headers["Location"]
    assert location == "/notes/2"
    async with client.get(location) as response:
        assert await response.json() == {"id": 2, "text": "second"}
    async with client.get("/notes/99") as response:
        assert response.status == 404
        assert (await response.json())["error"]["message"] == "no such note"

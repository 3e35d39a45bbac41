"""Idempotency stacked with Compression, CORS and Sessions in every order a user may list them:
the first answer and its replay are each right for their own request (coding, origin, session)."""

from __future__ import annotations

import gzip
import itertools
import json
import uuid
from typing import Any

import pytest

from aiorest import (
    CORS,
    App,
    Compression,
    CookieSessionStore,
    Idempotency,
    MemoryIdempotencyStore,
    Request,
    SessionMiddleware,
)

SECRET = "s" * 40
ORIGINS = ("https://a.example", "https://b.example")
NAMES = ("idempotency", "compression", "cors", "sessions")


def make(name: str) -> Any:
    if name == "idempotency":
        return Idempotency(MemoryIdempotencyStore())
    if name == "compression":
        return Compression(brotli=False)
    if name == "cors":
        return CORS(list(ORIGINS))
    return SessionMiddleware(CookieSessionStore([SECRET]))


def notes_app(order: tuple[str, ...]) -> tuple[App, list[int]]:
    runs: list[int] = []
    app = App(middleware=[make(name) for name in order])

    @app.post("/login")
    async def login(request: Request) -> dict[str, str]:
        request.session["user"] = "alice"
        return {}

    @app.post("/notes", status=201)
    async def create(request: Request) -> dict[str, Any]:
        runs.append(1)
        body = await request.json()
        return {"n": len(runs), "user": request.session.get("user"), "text": body["text"]}

    return app, runs


async def post(client: Any, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, str], bytes]:
    async with client.post("/notes", data=body, headers={"Content-Type": "application/json", **headers}) as response:
        return response.status, dict(response.headers), await response.read()


def decoded(headers: dict[str, str], body: bytes, accept: str) -> dict[str, Any]:
    assert headers.get("Content-Length", str(len(body))) == str(len(body)), headers
    if accept == "gzip":
        assert headers.get("Content-Encoding") == "gzip", headers
        body = gzip.decompress(body)
    else:
        assert "Content-Encoding" not in headers, headers
    return json.loads(body)  # type: ignore[no-any-return]


@pytest.mark.parametrize("order", list(itertools.permutations(NAMES)), ids="-".join)
async def test_each_order_answers_and_replays_for_the_request_at_hand(
    aiorest_client: Any, order: tuple[str, ...]
) -> None:
    app, runs = notes_app(order)
    client = await aiorest_client(app, auto_decompress=False)
    async with client.post("/login", json={}) as response:  # the session cookie goes to the jar
        assert response.status == 200
    body = json.dumps({"text": "x" * 2048}).encode()
    key = {"Idempotency-Key": str(uuid.uuid4())}
    answers = []
    # the first, then replays: another coding, another origin, both as the first
    for accept, origin in (("gzip", ORIGINS[0]), ("identity", ORIGINS[1]), ("gzip", ORIGINS[1])):
        status, headers, raw = await post(client, {**key, "Accept-Encoding": accept, "Origin": origin}, body)
        assert status == 201, (raw, order)
        assert headers.get("Access-Control-Allow-Origin") == origin, (headers, order)
        assert "Set-Cookie" not in headers, (headers, order)  # the session did not change
        answers.append(decoded(headers, raw, accept))
        assert headers.get("Idempotent-Replayed") == (None if len(answers) == 1 else "true"), (headers, order)
    assert answers == [{"n": 1, "user": "alice", "text": "x" * 2048}] * 3, order
    assert runs == [1], order

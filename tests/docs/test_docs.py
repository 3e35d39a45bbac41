"""The documentation: every example under docs/examples/ works as the docs say, and the docs build.

Each example is imported from its file and served for real (``aiorest_client``);
the assertions repeat what the pages claim about it.
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import hashlib
import importlib.util
import io
import json
import logging
import os
import re
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import aiohttp
import pytest

import aiorest
from aiorest.testing import TestClient
from harness.fixtures import RedisServer, redis_answers

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
EXAMPLES = DOCS / "examples"


@functools.cache
def load_example(name: str) -> ModuleType:
    """Import ``docs/examples/<name>.py`` under a name of its own."""
    spec = importlib.util.spec_from_file_location(f"_docs_example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def raw_exchange(port: int, data: bytes) -> bytes:
    """Send ``data`` on a new connection; everything the server sends until it closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        return await asyncio.wait_for(reader.read(), timeout=5)
    finally:
        writer.close()


@pytest.fixture(scope="module")
def redis_url() -> Any:
    """The Redis on 127.0.0.1:6379, or a throwaway redis-server on a free port."""
    if redis_answers(6379):
        yield "redis://127.0.0.1:6379/0"
        return
    with RedisServer() as server:
        yield server.url


# -- one exercise per example ---------------------------------------------------------


async def exercise_hello(module: ModuleType, client: Any) -> None:
    async with client.get("/") as response:
        assert response.status == 200
        assert response.headers["Content-Type"] == "application/json"
        assert await response.json() == {"message": "Hello, World!"}
    async with client.get("/hello/ada") as response:
        assert await response.json() == {"message": "Hello, ada!"}


async def exercise_notes(module: ModuleType, client: Any) -> None:
    async with client.get("/api/notes") as response:
        assert response.status == 200
        assert await response.json() == []
    async with client.post("/api/notes", json={"text": "buy milk"}) as response:
        assert response.status == 201
        assert response.headers["Location"] == "/api/notes/1"
        assert await response.json() == {"id": 1, "text": "buy milk"}
    async with client.get("/api/notes/1") as response:
        assert await response.json() == {"id": 1, "text": "buy milk"}
    async with client.post("/api/notes", json={"text": 3}) as response:
        assert response.status == 422
        assert await response.json() == {
            "error": {
                "status": 422,
                "message": "invalid note",
                "details": [{"field": "text", "error": "a string is required"}],
            }
        }
    async with client.post("/api/notes", data="text", headers={"Content-Type": "text/plain"}) as response:
        assert response.status == 415
    async with client.post("/api/notes", data="{oops", headers={"Content-Type": "application/json"}) as response:
        assert response.status == 400
    async with client.get("/api/notes/9") as response:
        assert response.status == 404
        assert await response.json() == {"error": {"status": 404, "message": "no note 9", "details": None}}
    async with client.get("/api/notes/abc") as response:
        assert response.status == 404
        assert (await response.json())["error"]["message"] == "no route for /api/notes/abc"
    async with client.head("/api/notes") as response:
        assert response.status == 200
        assert response.headers["Content-Length"] == str(len(b'[{"id":1,"text":"buy milk"}]'))
        assert await response.read() == b""
    async with client.options("/api/notes/1") as response:
        assert response.status == 204
        assert response.headers["Allow"] == "DELETE, GET, HEAD, OPTIONS"
    async with client.put("/api/notes") as response:
        assert response.status == 405
        assert response.headers["Allow"] == "GET, HEAD, OPTIONS, POST"
    async with client.delete("/api/notes/1") as response:
        assert response.status == 204
        assert await response.read() == b""
    async with client.delete("/api/notes/1") as response:
        assert response.status == 404
    app = module.app
    assert app.url_for("api.list") == "/api/notes"
    assert app.url_for("api.note", note_id=5) == "/api/notes/5"
    assert app.url_for("api.delete_note", note_id=5) == "/api/notes/5"  # unnamed: the handler's name, prefixed
    with pytest.raises(aiorest.NoMatchFound):
        app.url_for("api.note")
    with pytest.raises(aiorest.NoMatchFound):
        app.url_for("note", note_id=5)


async def exercise_route_table(module: ModuleType, client: Any) -> None:
    async with client.get("/users") as response:
        assert await response.json() == ["ada", "grace"]
    async with client.get("/users/ada") as response:
        assert await response.json() == {"name": "ada"}
    async with client.put("/users/ada") as response:
        assert await response.json() == {"name": "ada", "replaced": "yes"}
    async with client.delete("/users/ada") as response:
        assert response.status == 405
        assert response.headers["Allow"] == "GET, HEAD, OPTIONS, PUT"
    assert module.app.url_for("user", name="grace hopper") == "/users/grace%20hopper"
    assert module.app.url_for("list_users") == "/users"


async def exercise_dates(module: ModuleType, client: Any) -> None:
    async with client.get("/days/2024-02-28") as response:
        assert await response.json() == {"weekday": "Wednesday", "next": "/days/2024-02-29"}
    async with client.get("/days/2024-02-30") as response:  # the converter refuses it
        assert response.status == 404
    async with client.get("/days/today") as response:  # the regex refuses it
        assert response.status == 404
    async with client.get("/files/reports/2024/q1.pdf") as response:
        assert await response.json() == {"path": "reports/2024/q1.pdf"}
    assert module.app.url_for("day", day=datetime.date(2030, 1, 1)) == "/days/2030-01-01"


async def exercise_echo(module: ModuleType, client: Any) -> None:
    headers = {"User-Agent": "docs-test", "Cookie": "session=abc; theme=dark"}
    async with client.get("/inspect/a%20b?tag=x&tag=y&page=2", headers=headers) as response:
        body = await response.json()
    assert body == {
        "method": "GET",
        "path": "/inspect/a b",
        "query_string": "tag=x&tag=y&page=2",
        "tags": ["x", "y"],
        "page": 2,
        "user_agent": "docs-test",
        "session": "abc",
        "item": "a b",
        "http_version": "1.1",
        "client_host": "127.0.0.1",
    }
    async with client.post("/echo", json={"a": [1, 2]}) as response:
        assert await response.json() == {"received": {"a": [1, 2]}}
    no_content_type = b'POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 8\r\nConnection: close\r\n\r\n{"a": 1}'
    assert (await raw_exchange(client.port, no_content_type)).endswith(b'\r\n\r\n{"received":{"a":1}}')
    async with client.post("/echo", data="a=1", headers={"Content-Type": "text/plain"}) as response:
        assert response.status == 415
    async with client.post("/echo", data=b"", headers={"Content-Type": "application/json"}) as response:
        assert response.status == 400
        assert (await response.json())["error"]["message"] == "request body is empty; expected JSON"

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(10):
            yield b"x" * 1000

    async with client.post("/upload", data=chunks()) as response:  # sent chunked
        assert await response.json() == {"bytes": 10_000}
    async with client.post("/shout", data="héllo".encode()) as response:
        assert await response.json() == {"text": "HÉLLO"}
    async with client.post("/shout", data=b"\xff") as response:
        assert response.status == 400


async def exercise_replies(module: ModuleType, client: Any) -> None:
    async with client.get("/dict") as response:
        assert (response.status, response.headers["Content-Type"]) == (200, "application/json")
        assert await response.json() == {"answer": 42}
    async with client.get("/list") as response:
        assert await response.json() == [1, 2, 3]
    async with client.put("/nothing") as response:
        assert response.status == 204
        assert "Content-Type" not in response.headers
        assert "Content-Length" not in response.headers
    async with client.post("/created") as response:
        assert response.status == 201
        assert response.headers["Location"] == "/things/7"
        assert await response.json() == {"id": 7}
    async with client.get("/text") as response:
        assert response.headers["Content-Type"] == "text/plain; charset=utf-8"
        assert response.headers["Content-Length"] == "10"
        assert await response.text() == "plain text"
    async with client.get("/csv") as response:
        assert response.headers["Content-Type"] == "text/csv; charset=utf-8"
        assert response.headers["Cache-Control"] == "no-store"
    async with client.get("/numbers") as response:
        assert response.headers["Transfer-Encoding"] == "chunked"
        assert "Content-Length" not in response.headers
        assert await response.text() == "0\n1\n2\n"
    async with client.post("/login") as response:
        assert response.status == 204
        assert response.headers["Set-Cookie"] == "session=abc123; Max-Age=3600; Path=/; Secure; HttpOnly; SameSite=Lax"
    async with client.post("/logout") as response:
        assert response.headers["Set-Cookie"] == (
            "session=; Max-Age=0; Expires=Thu, 01 Jan 1970 00:00:00 GMT; Path=/; SameSite=Lax"
        )


async def exercise_codec(module: ModuleType, client: Any) -> None:
    async with client.get("/invoice") as response:
        assert await response.read() == (
            b'{"id":"12345678-1234-5678-1234-567812345678","due":"2030-01-31","total":"19.90"}'
        )
    assert module.app.json.name == "json+dates"
    assert module.loads(b'{"n": 1}') == {"n": 1}
    with pytest.raises(ValueError):
        module.loads(b'{"n": 1e999}')  # strict: it could not be sent back


async def exercise_errors(module: ModuleType, client: Any, caplog: pytest.LogCaptureFixture) -> None:
    async with client.get("/admin") as response:
        assert response.status == 403
        assert response.headers["WWW-Authenticate"] == 'Bearer realm="admin"'
        assert await response.json() == {"error": {"status": 403, "message": "admins only", "details": None}}
    async with client.post("/orders/sku-1") as response:
        assert response.status == 409
        assert await response.json() == {
            "error": {"status": 409, "message": "out of stock", "details": {"sku": "sku-1"}}
        }
    async with client.get("/maintenance") as response:
        assert response.status == 503
        assert response.headers["Retry-After"] == "120"
    async with client.get("/teapot") as response:
        assert response.status == 418
        assert await response.json() == {
            "error": {"status": 418, "message": "short and stout", "details": {"capacity_ml": 500}}
        }
    with caplog.at_level(logging.ERROR, logger="aiorest.error"):
        async with client.get("/bug") as response:
            assert response.status == 500
            assert await response.json() == {
                "error": {"status": 500, "message": "Internal Server Error", "details": None}
            }
    assert any(
        record.getMessage() == "unhandled exception in GET /bug" and record.exc_info is not None
        for record in caplog.records
    )
    async with client.get("/admin") as response:  # the connection survived the errors
        assert response.status == 403


async def exercise_lifecycle(module: ModuleType, client: Any) -> None:
    # ``client`` is not used: this example is about startup and shutdown, so it
    # starts and stops its own TestClient to see the whole sequence.
    module.events.clear()
    async with TestClient(module.app) as own:
        assert module.events == ["lifespan enter", "open pool", "startup: warm up"]
        async with own.get("/public/hello") as response:
            assert await response.json() == {"pool_size": 1}
            assert "X-Elapsed-Ms" in response.headers
        async with own.get("/private/report") as response:
            assert response.status == 401
            assert response.headers["WWW-Authenticate"] == "Bearer"
            assert "X-Elapsed-Ms" in response.headers
        async with own.get("/private/report", headers={"Authorization": "Bearer s3cret"}) as response:
            assert await response.json() == {"user": "admin"}
        async with own.get("/nowhere") as response:  # middleware sees routing errors too
            assert response.status == 404
            assert "X-Elapsed-Ms" in response.headers
    assert module.events == [
        "lifespan enter",
        "open pool",
        "startup: warm up",
        "shutdown: log stats",
        "close pool",
        "lifespan exit",
    ]
    # The page's claims about a startup that fails: the pool is closed, the lifespan
    # left, and no shutdown hook runs.
    module.events.clear()

    async def broken(app: aiorest.App) -> None:
        raise RuntimeError("cannot warm up")

    failing = aiorest.App(
        lifespan=module.lifespan, contexts=[module.pool], on_startup=[broken], on_shutdown=[module.log_stats]
    )
    with pytest.raises(RuntimeError, match="cannot warm up") as failure:
        await failing.startup()
    assert module.events == ["lifespan enter", "open pool", "close pool", "lifespan exit"]
    assert failure.value.__notes__ == [f"raised in the startup hook {__name__}.exercise_lifecycle.<locals>.broken"]


async def exercise_limits(module: ModuleType, client: Any) -> None:
    async with client.post("/upload", data=b"x" * 1000) as response:
        assert await response.json() == {"bytes": 1000}
    head = b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 70000\r\n\r\n"
    answer = await raw_exchange(client.port, head)  # the server does not wait for the body
    assert answer.startswith(b"HTTP/1.1 413 Request Entity Too Large\r\n")
    assert b"\r\nConnection: close\r\n" in answer
    assert module.app.limits.max_body_size == 65536


async def exercise_test_ping(module: ModuleType, aiorest_client: Any) -> None:
    # The example's own tests, run as pytest would run them; each starts the app.
    await module.test_ping_without_fixture()
    await module.test_ping(aiorest_client)


async def exercise_test_ping_aiohttp(module: ModuleType, aiohttp_client: Any) -> None:
    # The same, with pytest-aiohttp's aiohttp_client (as aiorest's plugin teaches it aiorest Apps).
    tests = (module.test_ping, module.test_server_and_client_options, module.test_ping_with_an_explicit_server)
    await _run_tests([(test, aiohttp_client) for test in tests])


async def _run_tests(tests: list[tuple[Callable[[Any], Awaitable[None]], Any]]) -> None:
    """Run an example's tests, each with its client fixture, closing the clients a test made after it,
    as pytest would: the example's tests share one App, which runs once at a time."""
    for test, fixture in tests:
        clients: list[Any] = []

        async def client_for_this_test(*args: Any, _fixture: Any = fixture, _made: Any = clients, **kwargs: Any) -> Any:
            _made.append(await _fixture(*args, **kwargs))
            return _made[-1]

        await test(client_for_this_test)
        for client in clients:
            await client.close()


async def exercise_test_uploads(module: ModuleType, aiorest_client: Any, aiohttp_client: Any) -> None:
    # The example's tests, one with aiorest's fixture, one with pytest-aiohttp's.
    await _run_tests([(module.test_upload, aiorest_client), (module.test_upload_with_pytest_aiohttp, aiohttp_client)])


async def exercise_inventory(module: ModuleType, client: Any) -> None:
    async with client.post("/stock/apple") as response:
        assert response.status == 200 and await response.json() == {"sku": "apple", "qty": 0}
    async with client.post("/stock/apple") as response:
        assert response.status == 409
        assert (await response.json())["error"]["details"] is None  # the schema's names stay on the server
    await client.post("/stock/pear")
    async with client.post("/stock/apple/move/pear") as response:
        assert response.status == 422  # qty would go below zero: the CHECK refuses it
    await module.db.execute("UPDATE stock SET qty = 1 WHERE sku = 'apple'")
    async with client.post("/stock/apple/move/plum") as response:
        assert response.status == 404  # and the first update was rolled back
    async with client.get("/stock/apple") as response:
        assert await response.json() == {"sku": "apple", "qty": 1}
    async with client.post("/stock/apple/move/pear") as response:
        assert response.status == 200
    async with client.get("/stock/pear") as response:
        assert await response.json() == {"sku": "pear", "qty": 1}


async def exercise_events(module: ModuleType, client: Any) -> None:
    async with client.sse("/ticks?every=0.01") as events:
        assert events.response.headers["Content-Type"] == "text/event-stream; charset=utf-8"
        first, second = await anext(events), await anext(events)
        assert (first.event, first.id, json.loads(first.data)) == ("tick", "1", {"n": 1})
        assert second.id == "2" and events.retry == 2000
    for _ in range(1000):  # the client went away: the generator's finally runs
        if module.app.state.closed:
            break
        await asyncio.sleep(0.01)
    assert module.app.state.closed and module.app.state.closed[0] >= 2
    async with client.sse("/ticks?every=0.01", last_event_id="41") as events:
        assert (await anext(events)).id == "42"  # resumed after the last event the client had


async def exercise_live_notes(module: ModuleType, client: Any) -> None:
    async with client.sse("/notes/live") as events, client.sse("/notes/live") as other:
        assert (await anext(events)).event == "ready" and (await anext(other)).event == "ready"
        async with client.post("/notes", json={"text": "hello"}) as response:
            note = await response.json()
        for stream in (events, other):  # both subscribers, one LISTEN connection
            event = await anext(stream)
            assert (event.event, event.id, json.loads(event.data)) == ("note", str(note["id"]), note)


async def exercise_aiopg_pool(module: ModuleType, client: Any) -> None:
    async with client.post("/pages/home") as response:
        assert response.status == 200 and await response.json() == {"name": "home", "visits": 0}
    async with client.post("/pages/home") as response:
        assert response.status == 409  # the unique violation, as on the default driver
    async with client.post("/pages/home/visit") as response:
        assert await response.json() == {"name": "home", "visits": 1}
    async with client.get("/pages") as response:  # the service's own aiopg code
        assert await response.json() == [{"name": "home", "visits": 1}]
    pool = module.app.state.pool
    assert pool.freesize == pool.size  # every borrowed connection given back


async def exercise_behind_proxy(module: ModuleType, client: Any, caplog: pytest.LogCaptureFixture) -> None:
    server = aiorest.Server(module.app, port=0, forwarded_allow_ips="127.0.0.1", health=True, max_concurrency=64)
    await server.start()
    try:
        async with aiohttp.ClientSession(server.url) as session:
            proxy_headers = {
                "X-Forwarded-For": "203.0.113.9, 127.0.0.1",
                "X-Forwarded-Proto": "https",
                "X-Forwarded-Host": "shop.example",
                "X-Request-ID": "edge-42",
            }
            with caplog.at_level(logging.INFO, logger="behind_proxy"):
                async with session.get("/orders/7", headers=proxy_headers) as response:
                    assert response.headers["X-Request-ID"] == "edge-42"
                    assert await response.json() == {
                        "client": "203.0.113.9",
                        "scheme": "https",
                        "id": "edge-42",
                        "same_id_everywhere": True,
                        "self": "https://shop.example/orders/7",
                    }
            assert [record.request_id for record in caplog.records if record.name == "behind_proxy"] == ["edge-42"]
            async with session.get("/readyz") as response:
                assert response.status == 200
    finally:
        await server.stop(timeout=2)


async def exercise_blocking(module: ModuleType, client: Any, caplog: pytest.LogCaptureFixture) -> None:
    # Served as its __main__ says; a server for each handler, so that each logs its stack (docs/server.rst).
    requests = [
        ("GET", "/report", None, "in report\n", "time.sleep(0.3)"),
        ("POST", "/signup", {"password": "s3cret"}, "in password_hash\n", "return hashlib.scrypt("),
        ("POST", "/signup-in-thread", {"password": "s3cret"}, None, None),
    ]
    for method, path, body, function, line in requests:
        caplog.clear()
        server = aiorest.Server(module.app, port=0, blocked_loop_threshold=0.1)
        await server.start()
        try:
            async with aiohttp.ClientSession(server.url) as session:
                async with session.request(method, path, json=body) as response:
                    assert response.status == 200
                    request_id = response.headers["X-Request-ID"]
        finally:
            await server.stop(timeout=2)
        warnings = [r for r in caplog.records if r.name == "aiorest.blocked" and r.levelno == logging.WARNING]
        if function is None:  # the hash in a thread: the loop was free
            assert not [r for r in warnings if path in r.getMessage()]
            continue
        (warning,) = warnings
        message = warning.getMessage()
        assert f"{method} {path} (request {request_id})" in message
        assert function in message and line in message


async def exercise_typed_orders(module: ModuleType, client: Any) -> None:
    order = {"customer": "Ada", "lines": [{"sku": "TEA-1", "quantity": 2}, {"sku": "CUP-7"}]}
    async with client.post("/orders", json=order) as response:
        assert response.status == 201
        assert response.headers["Cache-Control"] == "no-store"
        assert await response.json() == {
            "id": 1,
            "customer": "Ada",
            "lines": [{"sku": "TEA-1", "quantity": 2}, {"sku": "CUP-7", "quantity": 1}],
            "status": "open",
        }
    bad = {"customer": "", "lines": [{"sku": "TEA-1", "quantity": 100}]}
    async with client.post("/orders", json=bad) as response:
        assert response.status == 422
        assert await response.json() == {
            "error": {
                "status": 422,
                "message": "the request is not valid",
                "details": [{"location": "body.customer", "message": "Expected `str` of length >= 1"}],
            }
        }
    async with client.get("/orders/1") as response:
        assert (await response.json())["customer"] == "Ada"
    async with client.get("/orders/2") as response:
        assert response.status == 404
    async with client.get("/orders/0") as response:
        assert (await response.json())["error"]["details"] == [
            {"location": "path.order_id", "message": "Expected `int` >= 1"}
        ]
    async with client.get("/orders?ids=1&ids=5&status=open") as response:
        assert [found["id"] for found in await response.json()] == [1]
    async with client.get("/orders?status=lost&limit=0") as response:
        assert response.status == 422
        assert [problem["location"] for problem in (await response.json())["error"]["details"]] == [
            "query.status",
            "query.limit",
        ]
    async with client.get("/customers?limit=1", headers={"Cookie": "session=s"}) as response:
        assert await response.json() == {"customers": ["Ada"], "signed_in": True, "self": "/customers"}


async def exercise_typed_forms(module: ModuleType, client: Any) -> None:
    sent = [("name", "Ada"), ("age", ""), ("languages", "en"), ("languages", "fr"), ("newsletter", "true")]
    async with client.post("/profiles", data=sent) as response:
        assert response.status == 201
        assert await response.json() == {
            "name": "Ada",
            "age": None,
            "newsletter": True,
            "languages": ["en", "fr"],
            "plan": "free",
            "avatar": None,
            "photos": [],
        }
    form = aiohttp.FormData()
    form.add_field("name", "Ada")
    form.add_field("avatar", b"face", filename="me.png")
    form.add_field("photos", b"12", filename="1.jpg")
    form.add_field("photos", b"345", filename="2.jpg")
    async with client.post("/profiles", data=form) as response:
        body = await response.json()
    assert (body["avatar"], body["photos"]) == ("me.png", [2, 3])
    async with client.post("/profiles", data={"name": "Ada", "age": "-1", "plan": "gold"}) as response:
        assert response.status == 422
        assert [problem["location"] for problem in (await response.json())["error"]["details"]] == [
            "form.age",
            "form.plan",
        ]
    document = os.urandom(2 * 1024 * 1024)  # past the server's 1 MiB: the route's own limit
    form = aiohttp.FormData()
    form.add_field("document", io.BytesIO(document), filename="report.pdf")
    async with client.post("/documents", data=form) as response:
        assert await response.json() == {
            "title": "report.pdf",
            "sha256": hashlib.sha256(document).hexdigest(),
            "size": len(document),
        }
    async with client.post("/documents", json={"title": "x"}) as response:
        assert response.status == 415
    async with client.get("/openapi.json") as response:
        spec = await response.json()
    content = spec["paths"]["/documents"]["post"]["requestBody"]["content"]
    assert content["multipart/form-data"]["schema"]["properties"]["document"] == {"type": "string", "format": "binary"}


async def exercise_openapi_docs(module: ModuleType, client: Any) -> None:
    from openapi_spec_validator import validate

    async with client.get("/openapi.json") as response:
        document = await response.json()
    validate(document)
    assert document["info"] == {"title": "Shelf", "version": "1.0"}
    add = document["paths"]["/v1/books"]["post"]
    assert (add["summary"], add["tags"], add["operationId"]) == (
        "Add a book to the shelf.",
        ["books"],
        "books.add_book",
    )
    assert set(add["responses"]) == {"201", "400", "415", "422"}
    assert document["components"]["schemas"]["NewBook"]["properties"]["year"] == {"type": "integer", "minimum": 1450}
    assert set(document["paths"]["/v1/books/{book_id}"]["get"]["responses"]) == {"200", "404", "422"}
    for page in ("/docs", "/redoc"):
        async with client.get(page) as response:
            assert response.status == 200
            assert "https://" not in await response.text()


async def exercise_route_middleware(module: ModuleType, client: Any) -> None:
    async with client.get("/admin/stats") as response:
        assert response.status == 403
        assert (await response.json())["error"]["message"] == "admins only"
    async with client.get("/admin/stats", headers={"X-Role": "admin"}) as response:
        assert response.status == 200 and await response.json() == {"users": 3}
        assert "Cache-Control" not in response.headers
    async with client.get("/me") as response:
        assert response.status == 200 and response.headers["Cache-Control"] == "no-store"
    async with client.get("/public") as response:
        assert response.status == 200 and "Cache-Control" not in response.headers


async def exercise_cors(module: ModuleType, client: Any) -> None:
    site, account = "https://app.example.com", "https://account.example.com"
    async with client.get("/catalog", headers={"Origin": site}) as response:
        assert response.status == 200 and response.headers["Access-Control-Allow-Origin"] == site
    async with client.get("/catalog", headers={"Origin": "https://evil.example"}) as response:
        assert response.status == 200 and "Access-Control-Allow-Origin" not in response.headers
    preflight = {
        "Origin": account,
        "Access-Control-Request-Method": "PUT",
        "Access-Control-Request-Headers": "x-csrf-token",
    }
    async with client.options("/account/me", headers=preflight) as response:
        assert response.status == 204 and response.headers["Access-Control-Allow-Origin"] == account
        assert response.headers["Access-Control-Allow-Credentials"] == "true"
        assert response.headers["Access-Control-Max-Age"] == "3600"
    async with client.options("/account/me", headers={**preflight, "Origin": site}) as response:
        assert response.status == 403
    async with client.put("/account/me", headers={"Origin": account}) as response:
        assert response.status == 200 and response.headers["Access-Control-Expose-Headers"] == "X-Request-Id"


async def exercise_idempotency(module: ModuleType, client: Any) -> None:
    headers = {"X-Customer": "ada", "Idempotency-Key": "3c1f8e5a-order-1"}
    async with client.post("/orders", json={"tea": 2}, headers=headers) as first:
        assert first.status == 201 and await first.json() == {"number": 1, "tea": 2}
    async with client.post("/orders", json={"tea": 2}, headers=headers) as again:  # the answer got lost: again
        assert again.status == 201 and await again.json() == {"number": 1, "tea": 2}
        assert again.headers["Idempotent-Replayed"] == "true"
    async with client.post("/orders", json={"tea": 3}, headers=headers) as changed:
        assert changed.status == 422
    async with client.post("/orders", json={"tea": 2}, headers={**headers, "X-Customer": "bob"}) as other:
        assert (await other.json())["number"] == 2  # another customer's key
    async with client.post("/orders", json={"tea": 2}, headers={"Idempotency-Key": "k"}) as anonymous:
        assert (await anonymous.json())["number"] == 3  # scope None: not deduplicated
    assert len(module.orders) == 3


async def exercise_tracing(module: ModuleType, client: Any, caplog: pytest.LogCaptureFixture) -> None:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import StatusCode

    exporter = InMemorySpanExporter()
    tracing = module.tracing(exporter)
    server = aiorest.Server(module.app, port=0, tracing=tracing)
    await server.start()
    trace_id = "0af7651916cd43dd8448eb211c80319c"
    try:
        async with aiohttp.ClientSession(server.url) as session:
            with caplog.at_level(logging.INFO, logger="notes"):
                headers = {"traceparent": f"00-{trace_id}-b7ad6b7169203331-01"}
                async with session.get("/notes/1", headers=headers) as response:
                    assert await response.json() == {"id": 1, "text": "buy tea", "trace": trace_id}
            async with session.get("/notes/2") as response:
                assert response.status == 404
    finally:
        await server.stop(timeout=2)
    tracing.tracer_provider.force_flush()
    found, missing = sorted(exporter.get_finished_spans(), key=lambda span: span.attributes["url.path"])
    assert found.name == missing.name == "GET /notes/{note_id:int}"
    assert format(found.context.trace_id, "032x") == trace_id
    assert missing.attributes["http.response.status_code"] == 404 and missing.status.status_code is StatusCode.UNSET
    assert [record.trace_id for record in caplog.records if record.name == "notes"] == [trace_id]


async def exercise_compression(module: ModuleType, client: Any) -> None:
    import gzip
    import json

    gzip_only = {"Accept-Encoding": "gzip"}
    async with client.get("/api/notes", headers=gzip_only, auto_decompress=False) as response:
        assert response.headers["Content-Encoding"] == "gzip"
        assert response.headers["Vary"] == "Accept-Encoding"
        body = await response.read()
        assert len(json.loads(gzip.decompress(body))["notes"]) == 150
        assert len(body) * 3 < len(gzip.decompress(body))
    async with client.get("/api/notes/export", headers=gzip_only, auto_decompress=False) as response:
        assert response.headers["Content-Encoding"] == "gzip" and "Content-Length" not in response.headers
        assert len(gzip.decompress(await response.read()).splitlines()) == 150
    async with client.get("/ping", headers=gzip_only, auto_decompress=False) as response:
        assert "Content-Encoding" not in response.headers and await response.json() == {"pong": True}
    upload = gzip.compress(json.dumps([{"title": "x"}] * 10).encode())
    headers = {"Content-Encoding": "gzip", "Content-Type": "application/json"}
    async with client.post("/api/notes/import", data=upload, headers=headers) as response:
        assert await response.json() == {"imported": 10}
    bomb = gzip.compress(b" " * 1_000_000)
    async with client.post("/api/notes/import", data=bomb, headers=headers) as response:
        assert response.status == 413


async def exercise_files(module: ModuleType, client: Any) -> None:
    async with client.get("/assets/hello.txt") as response:
        assert response.status == 200 and await response.read() == b"hello from a file\n"
        assert response.headers["Content-Type"] == "text/plain; charset=utf-8"
        assert response.headers["Cache-Control"] == "public, max-age=3600"
        etag = response.headers["ETag"]
    async with client.get("/assets/hello.txt", headers={"If-None-Match": etag}) as response:
        assert response.status == 304
    async with client.get("/assets/hello.txt", headers={"Range": "bytes=0-4"}) as response:
        assert response.status == 206 and await response.read() == b"hello"
    async with client.get("/reports/latest") as response:
        assert response.headers["Cache-Control"] == "no-cache" and await response.read() == b"hello from a file\n"


async def exercise_uploads(module: ModuleType, client: Any) -> None:
    async with client.post("/signup", data=[("name", "Ada"), ("language", "en"), ("language", "fr")]) as response:
        assert await response.json() == {"name": "Ada", "languages": ["en", "fr"]}
    picture = os.urandom(3 * 1024 * 1024)  # past the server's 1 MiB: the route's own limit lets it in
    form = aiohttp.FormData()
    form.add_field("avatar", io.BytesIO(picture), filename="../me.png", content_type="image/png")
    async with client.post("/avatars", data=form) as response:
        body = await response.json()
    digest = hashlib.sha256(picture).hexdigest()
    # aiohttp percent-encodes the name it sends; a browser would escape only '"' and line breaks
    assert body == {"saved": digest, "size": len(picture), "type": "image/png", "sent_as": "..%2Fme.png"}
    saved = module.AVATARS / f"{digest}.img"
    assert saved.read_bytes() == picture
    saved.unlink()
    async with client.post("/avatars", data={"avatar": "not a file"}) as response:
        assert response.status == 400
    form = aiohttp.FormData()
    form.add_field("name", io.BytesIO(picture), filename="big")
    async with client.post("/signup", data=form) as response:
        assert response.status == 413  # the server's max_body_size


async def exercise_auth(module: ModuleType, client: Any) -> None:
    async with client.get("/me") as response:
        assert response.status == 401
        assert response.headers["WWW-Authenticate"] == 'Bearer realm="example"'
    async with client.post("/login", json={"name": "ada", "password": "wrong"}) as response:
        assert response.status == 401
    async with client.post("/login", json={"name": "ada", "password": "analytical engine"}) as response:
        assert response.status == 200
        ada = {"Authorization": f"Bearer {(await response.json())['token']}"}
    async with client.get("/me", headers=ada) as response:
        assert await response.json() == {"name": "ada"}
    async with client.get("/reports", headers=ada) as response:
        assert response.status == 200
    async with client.post("/login", json={"name": "bob", "password": "difference engine"}) as response:
        bob = {"Authorization": f"Bearer {(await response.json())['token']}"}
    async with client.get("/reports", headers=bob) as response:
        assert response.status == 403
    async with client.get("/me", headers={"Authorization": "Bearer forged"}) as response:
        assert response.status == 401
        assert response.headers["WWW-Authenticate"] == 'Bearer realm="example", error="invalid_token"'
    for _ in range(5):  # the sixth attempt on an account within a minute is refused, before any hash
        async with client.post("/login", json={"name": "eve", "password": "guess"}) as response:
            assert response.status == 401
    async with client.post("/login", json={"name": "eve", "password": "guess"}) as response:
        assert response.status == 429 and int(response.headers["Retry-After"]) > 0


async def exercise_sessions(module: ModuleType, client: Any) -> None:
    async with client.get("/me") as response:
        assert response.status == 401 and "Set-Cookie" not in response.headers
    async with client.post("/login", json={"user": "ada", "password": "nope"}) as response:
        assert response.status == 401 and "Set-Cookie" not in response.headers
    async with client.post("/login", json={"user": "ada", "password": "open sesame"}) as response:
        cookie = response.cookies["session"]
        assert cookie["httponly"] and cookie["samesite"] == "Lax" and cookie["max-age"] == "3600"
    async with client.get("/me", cookies={"session": cookie.value}) as response:
        assert await response.json() == {"user": "ada"}
    async with client.post("/logout", cookies={"session": cookie.value}) as response:
        assert response.cookies["session"]["max-age"] == "0"


async def exercise_auth_sessions(module: ModuleType, client: Any) -> None:
    async with client.get("/me") as response:
        assert response.status == 401
        assert response.headers["WWW-Authenticate"] == 'Session realm="app", Bearer realm="api"'
    async with client.get("/me", headers={"Authorization": "Bearer ada-api-token"}) as response:
        assert response.status == 200 and (await response.json())["name"] == "ada"
    async with client.get("/me", headers={"Authorization": "Bearer wrong"}) as response:
        assert response.status == 401
        assert response.headers["WWW-Authenticate"] == 'Session realm="app", Bearer realm="api", error="invalid_token"'
    async with client.post("/login", json={"password": "nope"}) as response:
        assert response.status == 401
        assert response.headers["WWW-Authenticate"] == 'Session realm="app", Bearer realm="api"'
    async with client.post("/login", json={"password": "open sesame"}) as response:
        assert response.status == 200
        cookie = response.headers["Set-Cookie"].split(";", 1)[0]
    async with client.get("/me", headers={"Cookie": cookie}) as response:
        assert response.status == 200 and (await response.json())["name"] == "ada"
    async with client.post("/logout", headers={"Cookie": cookie}) as response:
        assert response.status == 204
        assert "Max-Age=0" in response.headers["Set-Cookie"] or "expires" in response.headers["Set-Cookie"].lower()
    module.USERS.pop(1)  # a user deleted while a token still names it: not authenticated
    try:
        async with client.get("/me", headers={"Authorization": "Bearer ada-api-token"}) as response:
            assert response.status == 401
    finally:
        module.USERS[1] = {"id": 1, "name": "ada"}


async def exercise_background(module: ModuleType, client: Any) -> None:
    async with client.post("/signups", json={"email": "ada@example.com", "name": "Ada"}) as response:
        assert response.status == 201 and await response.json() == {"email": "ada@example.com"}
    await until_true(lambda: module.app.background.pending == 0)
    assert module.MAILBOX == ["Welcome, Ada <ada@example.com>"]
    assert module.AUDIT == ["signup ada@example.com"]
    async with client.post("/newsletter", json={"email": "bob@example.com"}) as response:
        assert response.status == 202 and await response.json() == {"welcome_mail": True}
    await until_true(lambda: module.app.background.pending == 0)
    assert module.MAILBOX[-1] == "Welcome, subscriber <bob@example.com>"
    assert module.app.background.limit == 500


async def exercise_background_arq(module: ModuleType, client: Any) -> None:
    from arq.jobs import Job
    from arq.worker import Worker

    address = f"ada-{uuid.uuid4().hex}@example.com"
    async with client.post(f"/signups/{address}") as response:
        assert response.status == 202
        assert await response.json() == {"job": f"welcome:{address}", "queued": True}
    async with client.post(f"/signups/{address}") as response:  # a retry: the job is queued once
        assert await response.json() == {"job": f"welcome:{address}", "queued": False}
    # The worker: another process, on any host, in production (`arq background_arq.WorkerSettings`).
    settings = module.WorkerSettings
    worker = Worker(
        functions=settings.functions,
        redis_settings=settings.redis_settings,
        queue_name=settings.queue_name,
        burst=True,
        poll_delay=0.01,
        handle_signals=False,
        keep_result=60,
    )
    try:
        await worker.main()
        job = Job(f"welcome:{address}", module.app.state.jobs, _queue_name=settings.queue_name)
        assert await job.result(timeout=5) == f"welcome mail sent to {address}"
        assert worker.jobs_complete == 1 and worker.jobs_failed == 0
    finally:
        await worker.pool.aclose()  # not worker.close(): arq 0.28 calls redis' deprecated close()


async def until_true(condition: Callable[[], bool]) -> None:
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("timed out waiting")


async def exercise_websockets(module: ModuleType, client: Any) -> None:
    async with client.ws_connect("/echo") as ws:
        await ws.send_str("hello")
        assert (await ws.receive(timeout=5)).data == "hello"
        await ws.send_bytes(b"\x00")
        assert (await ws.receive(timeout=5)).data == b"\x00"
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await client.ws_connect("/rooms/lobby")
    assert refused.value.status == 401
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await client.ws_connect("/rooms/lobby", headers={"Authorization": "Bearer ada"}, origin="https://evil.example")
    assert refused.value.status == 403
    ada = await client.ws_connect(
        "/rooms/lobby", headers={"Authorization": "Bearer ada"}, protocols=["chat.v1"], origin="https://chat.example"
    )
    bob = await client.ws_connect("/rooms/lobby", headers={"Authorization": "Bearer bob"})
    assert ada.protocol == "chat.v1" and bob.protocol is None
    await bob.send_json({"text": "hi"})
    assert await ada.receive_json(timeout=5) == {"user": "bob", "text": "hi"}
    assert await bob.receive_json(timeout=5) == {"user": "bob", "text": "hi"}
    await ada.send_json({"txt": "typo"})
    message = await ada.receive(timeout=5)
    assert message.type is aiohttp.WSMsgType.CLOSE and message.data == 1007
    await ada.close()
    await bob.close()


async def exercise_live_broadcast(module: ModuleType, client: Any) -> None:
    first, second = await client.ws_connect("/live/ws"), await client.ws_connect("/live/ws")
    async with client.sse("/live/events") as events:
        for _ in range(500):  # the three handlers subscribe once their connections are up
            if len(module.subscribers) == 3:
                break
            await asyncio.sleep(0.01)
        async with client.post("/announce", json={"text": "deploy at 5"}) as response:
            assert await response.json() == {"sent_to": 3}
        assert await first.receive_str(timeout=5) == "deploy at 5"
        assert await second.receive_str(timeout=5) == "deploy at 5"
        event = await anext(events)
        assert (event.event, event.data) == ("announcement", "deploy at 5")
    await second.close()
    for _ in range(500):  # the stream that left and the WebSocket that closed unsubscribe
        if len(module.subscribers) == 1:
            break
        await asyncio.sleep(0.01)
    assert len(module.subscribers) == 1  # a WebSocket that only sends still sees its client leave
    # A subscriber whose queue is full is dropped at the next message, and told so: a WebSocket is closed 1008.
    slow = next(iter(module.subscribers))
    for number in range(slow.queue.maxsize):
        slow.queue.put_nowait(f"backlog {number}")
    module.broadcast("one too many")
    assert slow not in module.subscribers
    for _ in range(500):
        if not module.subscribers:
            break
        await asyncio.sleep(0.01)
    assert not module.subscribers
    messages = []
    while (message := await first.receive(timeout=5)).type is aiohttp.WSMsgType.TEXT:
        messages.append(message.data)
    assert message.type is aiohttp.WSMsgType.CLOSE and message.data == 1008
    assert messages[0] == "backlog 1" and len(messages) == slow.queue.maxsize - 1
    await first.close()


async def exercise_live_rooms(module: ModuleType, client: Any) -> None:
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:  # no credentials: refused before the upgrade
        await client.ws_connect("/rooms/lobby")
    assert refused.value.status == 401
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:  # a page of another site, with the cookie
        await client.ws_connect("/rooms/lobby", headers={"Cookie": "session=t-ada"}, origin="https://evil.example")
    assert refused.value.status == 403
    ada = await client.ws_connect("/rooms/lobby", headers={"Cookie": "session=t-ada"}, origin="https://chat.example")
    bob = await client.ws_connect("/rooms/lobby", headers={"Authorization": "Bearer t-bob"})
    eve = await client.ws_connect("/rooms/kitchen", headers={"Authorization": "Bearer t-bob"})
    for _ in range(500):
        if len(module.rooms.get("lobby", ())) == 2:
            break
        await asyncio.sleep(0.01)
    await bob.send_str("hi")
    assert await ada.receive_json(timeout=5) == {"user": "bob", "text": "hi"}
    assert await bob.receive_json(timeout=5) == {"user": "bob", "text": "hi"}
    await eve.send_str("elsewhere")
    assert await eve.receive_json(timeout=5) == {"user": "bob", "text": "elsewhere"}
    await ada.send_str("hello")
    assert await bob.receive_json(timeout=5) == {"user": "ada", "text": "hello"}  # not eve's room's
    for ws in (ada, bob, eve):
        await ws.close()
    for _ in range(500):
        if not module.rooms:
            break
        await asyncio.sleep(0.01)
    assert module.rooms == {}


async def exercise_live_reconnect(module: ModuleType, client: Any) -> None:
    async with client.sse("/scores/live") as events:
        for score in ("1-0", "2-0"):
            async with client.post("/scores", json={"score": score}) as response:
                assert response.status == 200
        first, second = await anext(events), await anext(events)
        assert [(first.id, first.data), (second.id, second.data)] == [("1", "1-0"), ("2", "2-0")]
        assert events.retry == 1000
    async with client.post("/scores", json={"score": "2-1"}) as response:  # while the client was away
        assert response.status == 200
    async with client.sse("/scores/live", last_event_id="2") as events:
        event = await anext(events)
        assert (event.id, event.data) == ("3", "2-1")  # missed nothing
    for number in range(120):  # more than the log holds
        module.recent.append((4 + number, "x"))
    async with client.sse("/scores/live", last_event_id="3") as events:
        assert (await anext(events)).event == "resync"  # too old: reload, then from now on
        async with client.post("/scores", json={"score": "3-1"}) as response:
            new = await response.json()
        event = await anext(events)
        assert (event.id, event.data) == (str(new["id"]), "3-1")


EXERCISES: dict[str, Callable[..., Awaitable[None]]] = {
    "background": exercise_background,
    "background_arq": exercise_background_arq,
    "behind_proxy": exercise_behind_proxy,
    "blocking": exercise_blocking,
    "inventory": exercise_inventory,
    "aiopg_pool": exercise_aiopg_pool,
    "events": exercise_events,
    "live_notes": exercise_live_notes,
    "hello": exercise_hello,
    "notes": exercise_notes,
    "route_table": exercise_route_table,
    "route_middleware": exercise_route_middleware,
    "dates": exercise_dates,
    "echo": exercise_echo,
    "replies": exercise_replies,
    "codec": exercise_codec,
    "errors": exercise_errors,
    "lifecycle": exercise_lifecycle,
    "limits": exercise_limits,
    "test_ping": exercise_test_ping,
    "test_ping_aiohttp": exercise_test_ping_aiohttp,
    "test_uploads": exercise_test_uploads,
    "typed_orders": exercise_typed_orders,
    "typed_forms": exercise_typed_forms,
    "openapi_docs": exercise_openapi_docs,
    "cors": exercise_cors,
    "compression": exercise_compression,
    "files": exercise_files,
    "uploads": exercise_uploads,
    "idempotency": exercise_idempotency,
    "tracing": exercise_tracing,
    "auth": exercise_auth,
    "auth_sessions": exercise_auth_sessions,
    "sessions": exercise_sessions,
    "websockets": exercise_websockets,
    "live_broadcast": exercise_live_broadcast,
    "live_rooms": exercise_live_rooms,
    "live_reconnect": exercise_live_reconnect,
}


def test_every_example_is_exercised() -> None:
    assert {path.stem for path in EXAMPLES.glob("*.py")} == set(EXERCISES)


@pytest.mark.parametrize("name", sorted(EXERCISES))
async def test_example(
    name: str,
    aiorest_client: Any,
    aiohttp_client: Any,
    caplog: pytest.LogCaptureFixture,
    request: pytest.FixtureRequest,
) -> None:
    if name in ("inventory", "aiopg_pool", "live_notes"):  # needs PostgreSQL: a fresh database, through $DATABASE_URL
        monkeypatch = request.getfixturevalue("monkeypatch")
        monkeypatch.setenv("DATABASE_URL", request.getfixturevalue("database_url"))
    if name == "background_arq":  # needs Redis, through $REDIS_URL
        request.getfixturevalue("monkeypatch").setenv("REDIS_URL", request.getfixturevalue("redis_url"))
    module = load_example(name)
    assert isinstance(module.app, aiorest.App), f"docs/examples/{name}.py must define an App named app"
    exercise = EXERCISES[name]
    if name == "lifecycle":  # starts its own client, see exercise_lifecycle
        await exercise(module, None)
    elif name == "test_ping":
        await exercise(module, aiorest_client)
    elif name == "test_ping_aiohttp":
        await exercise(module, aiohttp_client)
    elif name == "test_uploads":
        await exercise(module, aiorest_client, aiohttp_client)
    elif name == "errors":
        await exercise(module, await aiorest_client(module.app), caplog)
    elif name in ("behind_proxy", "tracing", "blocking"):  # serve themselves: the setting shown is the server's
        await exercise(module, None, caplog)
    else:
        await exercise(module, await aiorest_client(module.app))


# -- the pages ------------------------------------------------------------------------------


def test_api_page_covers_the_public_api() -> None:
    text = (DOCS / "api.rst").read_text()
    documented = set(re.findall(r"^\.\. auto(?:class|function|exception|data):: (\w+)", text, re.MULTILINE))
    assert set(aiorest.__all__) - documented == set()


def test_literalincludes_point_at_examples() -> None:
    for page in DOCS.glob("*.rst"):
        for target in re.findall(r"^\.\. literalinclude:: (\S+)", page.read_text(), re.MULTILINE):
            assert (DOCS / target).is_file(), f"{page.name} includes a missing file {target}"


def test_docs_build_without_warnings(tmp_path: Path) -> None:
    if importlib.util.find_spec("sphinx") is None:
        pytest.skip("sphinx is not installed (pip install 'sphinx>=8,<10' 'furo>=2024.1')")
    command = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-n", "-b", "html", str(DOCS), str(tmp_path)]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"{' '.join(command)} failed:\n{result.stdout}\n{result.stderr}"
    assert (tmp_path / "index.html").is_file()


# -- the README's examples ------------------------------------------------------------------


def _readme_example(index: int) -> aiorest.App:
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.DOTALL)
    namespace: dict[str, Any] = {"__name__": "readme"}
    exec(compile(blocks[index], f"README.md, python block {index + 1}", "exec"), namespace)
    app = namespace["app"]
    assert isinstance(app, aiorest.App)
    return app


async def test_readme_first_example_answers_and_404s(aiorest_client: Any) -> None:
    client = await aiorest_client(_readme_example(0))
    async with client.get("/notes/1") as response:
        assert await response.json() == {"id": 1, "text": "hello"}
    async with client.get("/notes/2") as response:
        assert response.status == 404 and (await response.json())["error"]["message"] == "no such note"


async def test_readme_typed_example_validates_and_serves_its_document(aiorest_client: Any) -> None:
    client = await aiorest_client(_readme_example(1))
    async with client.post("/notes?tag=work", json={"text": "hi"}) as response:
        assert response.status == 201 and await response.json() == {"text": "hi", "id": 1}
    async with client.post("/notes", json={"text": 5}) as response:
        assert response.status == 422
        [problem] = (await response.json())["error"]["details"]
        assert problem["location"] == "body.text"
    async with client.get("/openapi.json") as response:
        document = await response.json()
        assert document["info"] == {"title": "Notes", "version": "1.0"}
        parameters = document["paths"]["/notes"]["post"]["parameters"]
        assert [(p["name"], p["in"]) for p in parameters] == [("tag", "query")]
    async with client.get("/docs") as response:
        assert response.status == 200 and "swagger-ui" in await response.text()


# -- install commands -------------------------------------------------------------------------

#: Where install commands are written: the pages, the scripts, and aiorest's own error messages.
INSTALL_SOURCES = ("README.md", "docs", "deploy", "load", "bench", "aiorest", "example_app", ".ci")
TEXT_SUFFIXES = {".md", ".rst", ".inc", ".py", ".txt", ".toml", ".sh", ".conf", ".service", ".socket", ""}
#: The index project named bare: ``aiorest``, ``aiorest[typed]``, ``aiorest==0.4``; a path ending so is ours.
INDEX_PROJECT = re.compile(r"aiorest(\[[^\]]*\])?([<>=!~]=?\S*)?")


def install_commands() -> list[tuple[str, str]]:
    """(file, the words after ``pip install``) for every install command in INSTALL_SOURCES."""
    found = []
    for source in INSTALL_SOURCES:
        top = ROOT / source
        for path in [top] if top.is_file() else sorted(top.rglob("*")):
            if not path.is_file() or path.suffix not in TEXT_SUFFIXES or "results" in path.parts:
                continue
            text = re.sub(r"pip install\s*\n\s*", "pip install ", path.read_text(errors="replace"))
            for words in re.findall(r"pip install ([^\n]*)", text):
                found.append((str(path.relative_to(ROOT)), words))
    return found


def test_no_install_command_installs_the_unrelated_aiorest_of_the_index() -> None:
    # PyPI's aiorest is a 2014 project (0.4.0, on a long-gone aiohttp API): ours installs from its source.
    commands = install_commands()
    assert len(commands) > 20, commands  # the scan finds the commands there are
    bare = [
        (where, words)
        for where, words in commands
        if any(INDEX_PROJECT.fullmatch(word.strip("`'\"(),;:.") or "-") for word in words.split())
    ]
    assert bare == []


def test_readme_says_how_to_build_the_docs() -> None:
    # the command test_docs_build_without_warnings runs, written where a contributor looks first
    assert "sphinx-build -W --keep-going -n -b html docs docs/_build/html" in (ROOT / "README.md").read_text()

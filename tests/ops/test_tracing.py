"""OpenTelemetry tracing: spans of a real server on real sockets, with the SDK's in-memory exporter."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, TraceIdRatioBased
from opentelemetry.trace import SpanKind, StatusCode
from psycopg2.extensions import parse_dsn

import aiorest
from aiorest import App, EventSourceResponse, Idempotency, MemoryIdempotencyStore, Request, Response, Server
from aiorest.db import Database
from aiorest.ops import JSONLogFormatter
from aiorest.ops.tracing import Tracing
from aiorest.security import RateLimit
from aiorest.security.limits.stores import Hit, LimitStore

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"
handler_log = logging.getLogger("tests.tracing.handler")


class CountingLimitStore(LimitStore):
    """An application's own store (any subclass is traced)."""

    def __init__(self) -> None:
        self.hits = 0

    async def hit(self, name: str, key: str, limit: int, window: float, max_entries: int) -> Hit:
        self.hits += 1
        return Hit(self.hits <= limit, receipt=self.hits)


def make_app() -> App:
    app = App()
    limit = RateLimit(5, 60, store=CountingLimitStore(), name="tests")

    @app.get("/notes/{note_id:int}")
    async def note(request: Request) -> dict[str, int]:
        handler_log.warning("reading note")
        await limit.ahit("client")
        return {"id": request.path_params["note_id"]}

    @app.get("/boom")
    async def boom(request: Request) -> None:
        raise RuntimeError("boom")

    @app.get("/unavailable")
    async def unavailable(request: Request) -> Response:
        return Response(b"later", status=503)

    @app.post("/orders", middleware=[Idempotency(MemoryIdempotencyStore())])
    async def order(request: Request) -> dict[str, bool]:
        return {"ordered": True}

    @app.get("/events")
    async def events(request: Request) -> EventSourceResponse:
        async def items() -> AsyncIterator[str]:
            yield "one"
            yield "two"

        return EventSourceResponse(items(), heartbeat=None)

    @app.websocket("/ws")
    async def ws(socket: aiorest.WebSocket) -> None:
        await socket.accept()
        await socket.send_text(await socket.receive_text())

    return app


def memory_provider(sampler: Any = ALWAYS_ON) -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=sampler)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


@asynccontextmanager
async def serving(app: App, provider: TracerProvider, **options: Any) -> AsyncIterator[Server]:
    server = Server(app, port=0, tracing=Tracing(tracer_provider=provider), **options)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def named(spans: tuple[ReadableSpan, ...], name: str) -> ReadableSpan:
    [span] = [span for span in spans if span.name == name]
    return span


@pytest.fixture
def json_log() -> Iterator[list[str]]:
    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(self.format(record))

    collect = Collect()
    collect.setFormatter(JSONLogFormatter())
    handler_log.addHandler(collect)
    try:
        yield lines
    finally:
        handler_log.removeHandler(collect)


async def test_a_request_continues_its_traceparent_in_a_server_span(tmp_path, json_log):
    provider, exporter = memory_provider()
    access = tmp_path / "access.log"
    async with serving(make_app(), provider, access_log=str(access), access_log_format="json") as server:
        async with aiohttp.ClientSession() as client:
            headers = {"traceparent": TRACEPARENT, "tracestate": "vendor=1", "User-Agent": "probe/1.0"}
            async with client.get(f"http://127.0.0.1:{server.port}/notes/7?x=1", headers=headers) as response:
                assert response.status == 200
    span = named(exporter.get_finished_spans(), "GET /notes/{note_id:int}")
    assert span.kind is SpanKind.SERVER and span.status.status_code is StatusCode.UNSET
    assert format(span.context.trace_id, "032x") == TRACE_ID
    assert span.parent is not None and format(span.parent.span_id, "016x") == PARENT_ID and span.parent.is_remote
    assert span.context.trace_state.get("vendor") == "1"
    assert dict(span.attributes) == {
        "http.request.method": "GET",
        "http.route": "/notes/{note_id:int}",
        "url.path": "/notes/7",
        "url.query": "x=1",
        "url.scheme": "http",
        "server.address": "127.0.0.1",
        "server.port": server.port,
        "client.address": "127.0.0.1",
        "network.protocol.version": "1.1",
        "user_agent.original": "probe/1.0",
        "http.response.status_code": 200,
    }
    # the store the handler's rate limit counts in: a child of the request's span
    store = named(exporter.get_finished_spans(), "ratelimit.hit")
    assert store.parent.span_id == span.context.span_id and store.attributes["aiorest.store"] == "CountingLimitStore"
    # the access log's line and the handler's JSON log line carry the trace
    [line] = [json.loads(text) for text in access.read_text().splitlines()]
    assert line["trace_id"] == TRACE_ID
    [record] = [json.loads(text) for text in json_log]
    assert record["trace_id"] == TRACE_ID and record["span_id"] == format(span.context.span_id, "016x")


async def test_routing_errors_are_named_by_method_alone_and_a_4xx_is_no_error():
    provider, exporter = memory_provider()
    async with serving(make_app(), provider) as server:
        async with aiohttp.ClientSession() as client:
            async with client.get(f"http://127.0.0.1:{server.port}/nowhere") as response:
                assert response.status == 404
    [span] = exporter.get_finished_spans()
    assert span.name == "GET" and "http.route" not in span.attributes
    assert span.attributes["http.response.status_code"] == 404 and "error.type" not in span.attributes
    assert span.status.status_code is StatusCode.UNSET and span.parent is None


async def test_a_handler_exception_and_a_5xx_are_errors():
    provider, exporter = memory_provider()
    async with serving(make_app(), provider) as server:
        async with aiohttp.ClientSession() as client:
            for path, status in (("/boom", 500), ("/unavailable", 503)):
                async with client.get(f"http://127.0.0.1:{server.port}{path}") as response:
                    assert response.status == status
    spans = exporter.get_finished_spans()
    boom = named(spans, "GET /boom")
    assert boom.status.status_code is StatusCode.ERROR and boom.attributes["error.type"] == "RuntimeError"
    assert boom.attributes["http.response.status_code"] == 500
    assert [event.name for event in boom.events] == ["exception"]
    unavailable = named(spans, "GET /unavailable")
    assert unavailable.status.status_code is StatusCode.ERROR and unavailable.attributes["error.type"] == "503"


async def test_stores_websockets_and_event_streams_have_their_spans():
    provider, exporter = memory_provider()
    async with serving(make_app(), provider) as server:
        base = f"http://127.0.0.1:{server.port}"
        async with aiohttp.ClientSession() as client:
            async with client.post(f"{base}/orders", headers={"Idempotency-Key": "k1"}, json={}) as response:
                assert response.status == 200
            async with client.get(f"{base}/events") as response:
                assert (await response.text()).count("data: ") == 2
            async with client.ws_connect(f"{base}/ws") as socket:
                await socket.send_str("hi")
                assert await socket.receive_str() == "hi"
    spans = exporter.get_finished_spans()
    order = named(spans, "POST /orders")
    for name in ("idempotency.begin", "idempotency.finish"):
        assert named(spans, name).parent.span_id == order.context.span_id
    stream = named(spans, "SSE /events")
    assert stream.parent.span_id == named(spans, "GET /events").context.span_id
    assert stream.attributes["aiorest.sse.events"] == 2 and stream.attributes["http.route"] == "/events"
    socket_span = named(spans, "GET /ws")
    assert socket_span.kind is SpanKind.SERVER and socket_span.attributes["http.response.status_code"] == 101
    assert socket_span.attributes["http.route"] == "/ws"


async def test_sampled_out_requests_make_no_span_and_are_answered():
    provider, exporter = memory_provider(TraceIdRatioBased(0.0))
    async with serving(make_app(), provider) as server:
        async with aiohttp.ClientSession() as client:
            for path in ("/notes/1", "/boom", "/events"):
                async with client.get(f"http://127.0.0.1:{server.port}{path}") as response:
                    await response.read()
                    assert response.status in (200, 500)
    assert exporter.get_finished_spans() == ()


async def test_off_by_default_and_the_methods_are_given_back_when_tracing_stops():
    from aiorest.middleware.idempotency.stores import MemoryIdempotencyStore as Store

    begin = Store.__dict__["begin"]
    provider, exporter = memory_provider()
    async with serving(make_app(), provider):
        assert Store.__dict__["begin"] is not begin
    assert Store.__dict__["begin"] is begin
    server = Server(make_app(), port=0)
    assert server.tracing is None


@pytest.mark.parametrize("driver", ["psycopg2", "aiopg"])
async def test_statements_and_the_pools_wait_are_client_spans_without_their_parameters(database_url, driver):
    app = App()
    db = Database(database_url, driver=driver, min_size=0, max_size=1)
    db.setup(app)

    @app.post("/notes")
    async def add(request: Request) -> dict[str, Any]:
        await db.execute("CREATE TABLE IF NOT EXISTS notes (id serial PRIMARY KEY, secret text)")
        async with db.transaction() as tx:
            await tx.execute("INSERT INTO notes (secret) VALUES (%s)", ("s3cret-value",))
        return {"count": await db.fetchval("SELECT count(*) FROM notes WHERE secret = %s", ("s3cret-value",))}

    provider, exporter = memory_provider()
    async with serving(app, provider) as server:
        async with aiohttp.ClientSession() as client:
            async with client.post(f"http://127.0.0.1:{server.port}/notes") as response:
                assert await response.json() == {"count": 1}
    spans = exporter.get_finished_spans()
    request = named(spans, "POST /notes")
    statements = [span for span in spans if span.kind is SpanKind.CLIENT]
    dbname = parse_dsn(database_url)["dbname"]
    by_text = {span.attributes["db.query.text"]: span for span in statements}
    insert = by_text["BEGIN; INSERT INTO notes (secret) VALUES (%s)"]
    select = by_text["SELECT count(*) FROM notes WHERE secret = %s"]
    assert "COMMIT" in by_text and insert.attributes["db.operation.name"] == "BEGIN"
    assert select.name == f"SELECT {dbname}" and dict(select.attributes) == {
        "db.system.name": "postgresql",
        "db.operation.name": "SELECT",
        "db.query.text": "SELECT count(*) FROM notes WHERE secret = %s",
        "db.namespace": dbname,
        "server.address": select.attributes["server.address"],
        "server.port": select.attributes["server.port"],
    }
    assert select.attributes["server.address"] and select.attributes["server.port"] > 0
    assert all(
        span.parent.span_id == request.context.span_id
        for span in statements
        if span is not by_text.get("SET statement_timeout = 30000")
    )
    for span in spans:  # the parameters are in no span
        assert not any("s3cret-value" in str(value) for value in span.attributes.values())
    # the pool had no idle connection (min_size=0): the request's first statement waited for one
    acquire = [span for span in spans if span.name == "db.pool.acquire"]
    assert acquire and acquire[0].parent.span_id == request.context.span_id


async def test_a_failed_statement_is_an_error_span(database_url):
    app = App()
    db = Database(database_url, min_size=1)
    db.setup(app)

    @app.get("/bad")
    async def bad(request: Request) -> Any:
        return await db.fetchval("SELECT no_such_column FROM pg_class")

    provider, exporter = memory_provider()
    async with serving(app, provider) as server:
        async with aiohttp.ClientSession() as client:
            async with client.get(f"http://127.0.0.1:{server.port}/bad") as response:
                assert response.status >= 400
    statements = [span for span in exporter.get_finished_spans() if span.kind is SpanKind.CLIENT]
    assert statements and statements[-1].attributes["db.query.text"] == "SELECT no_such_column FROM pg_class"
    assert statements[-1].status.status_code is StatusCode.ERROR
    assert statements[-1].attributes["error.type"] == "UndefinedColumn"

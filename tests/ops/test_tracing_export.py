"""``aiorest run --tracing`` exports its spans over OTLP/HTTP, set up by the OTEL_* variables alone:
a receiver run here takes them and decodes OTLP's protobuf."""

from __future__ import annotations

import asyncio
import os
import signal

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from harness.ports import free_port
from tests.cli.test_cli import python, running, stop, wait_until_accepting
from tests.rawclient import fetch, get

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"


async def test_spans_reach_an_otlp_http_receiver_configured_by_the_environment():
    received: list[ExportTraceServiceRequest] = []
    arrived = asyncio.Event()

    async def traces(request: web.Request) -> web.Response:
        assert request.content_type == "application/x-protobuf"
        message = ExportTraceServiceRequest()
        message.ParseFromString(await request.read())
        received.append(message)
        arrived.set()
        return web.Response(body=b"", content_type="application/x-protobuf")

    receiver = web.Application()
    receiver.router.add_post("/v1/traces", traces)
    runner = web.AppRunner(receiver)
    await runner.setup()
    receiver_port = free_port()
    await web.TCPSite(runner, "127.0.0.1", receiver_port).start()
    port = free_port()
    env = dict(
        os.environ,
        OTEL_SERVICE_NAME="notes-service",
        OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{receiver_port}",
        OTEL_BSP_SCHEDULE_DELAY="50",
        AIOREST_TRACING="1",
    )
    try:
        process = await python(
            "-m", "aiorest", "run", "tests.apps.hello_app:app", "--port", str(port), "--log-level", "warning", env=env
        )
        async with running(process):
            await wait_until_accepting(process, port)
            traceparent = f"traceparent: 00-{TRACE_ID}-00f067aa0ba902b7-01"
            (response,) = await fetch(port, get("/notes/1", traceparent, "User-Agent: probe/2"))
            assert response.status == 200
            async with asyncio.timeout(10):
                await arrived.wait()  # sent by the batch processor's thread while the server serves
            output = await stop(process, signal.SIGTERM, timeout=10)
            assert process.returncode == 0, output.decode()
    finally:
        await runner.cleanup()
    spans = [
        (resource_spans.resource, span)
        for message in received
        for resource_spans in message.resource_spans
        for scope_spans in resource_spans.scope_spans
        for span in scope_spans.spans
    ]
    [(resource, span)] = [(resource, span) for resource, span in spans if span.name == "GET /notes/{note_id:int}"]
    assert {a.key: a.value.string_value for a in resource.attributes}["service.name"] == "notes-service"
    assert span.trace_id.hex() == TRACE_ID and span.parent_span_id.hex() == "00f067aa0ba902b7"
    assert span.kind == span.SPAN_KIND_SERVER
    attributes = {a.key: a.value for a in span.attributes}
    assert attributes["http.route"].string_value == "/notes/{note_id:int}"
    assert attributes["http.response.status_code"].int_value == 200
    assert attributes["user_agent.original"].string_value == "probe/2"
    assert attributes["url.path"].string_value == "/notes/1"

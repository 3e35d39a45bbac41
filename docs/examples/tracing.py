"""Traced with OpenTelemetry: a span per request, and one per statement, in the trace the caller began.

Configured by the OTEL_* variables alone (exported over OTLP/HTTP)::

    OTEL_SERVICE_NAME=notes OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 \\
        aiorest run tracing:app --tracing --log-format json

or with a provider of your own, as an OpenTelemetry instrumentor takes one: ``python tracing.py``.
"""

import logging

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

from aiorest import App, HTTPNotFound, Request
from aiorest.ops.tracing import Tracing

app = App()
log = logging.getLogger("notes")
NOTES = {1: "buy tea"}


@app.get("/notes/{note_id:int}")
async def note(request: Request) -> dict[str, object]:
    note_id = request.path_params["note_id"]
    log.info("note %d asked for", note_id)  # its record carries trace_id and span_id
    if note_id not in NOTES:
        raise HTTPNotFound("no such note")  # a 4xx: the span is not an error
    return {"id": note_id, "text": NOTES[note_id], "trace": request.trace_id}


def tracing(exporter: SpanExporter | None = None) -> Tracing:
    """Spans to ``exporter`` (default: OTLP/HTTP, where OTEL_EXPORTER_OTLP_ENDPOINT says), in batches."""
    provider = TracerProvider(resource=Resource.create({"service.name": "notes"}))
    provider.add_span_processor(BatchSpanProcessor(exporter or OTLPSpanExporter()))
    return Tracing(tracer_provider=provider)


if __name__ == "__main__":
    app.run(port=8080, tracing=tracing())

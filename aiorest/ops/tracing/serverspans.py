"""The SERVER span of each request: an endpoint layer, put around every endpoint once, at startup.

After OpenTelemetry's stable HTTP semantic conventions: the span is named
``{method} {route}`` (``{method}`` alone when no route matched: a 404, a 405,
an automatic OPTIONS), and has ``http.request.method``, ``http.route``,
``url.path``, ``url.scheme``, ``http.response.status_code``, ``server.address``,
``server.port``, ``client.address``, ``network.protocol.version`` and
``user_agent.original``; a 5xx sets its status to ERROR and ``error.type`` (the
exception's class name when the handler raised, else the status code); the
exception is recorded as an event.

The request's ``traceparent`` and ``tracestate`` are continued, through the
propagator OpenTelemetry is configured with (``opentelemetry.propagate``: W3C
trace context and baggage by default, ``OTEL_PROPAGATORS``). The span is current
while the handler runs: the spans of its queries are its children, and so are the
application's own.

A WebSocket's span covers its session: ``GET {route}``, status 101 once the
handler accepted and returned. An event stream's SERVER span ends when its
handler returns the stream; a span of its own (``SSE {route}``, its child) covers
the stream until it ends, and is current while its iterator makes each event.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.propagate import extract
from opentelemetry.propagators.textmap import Getter
from opentelemetry.trace import SpanKind, Status, StatusCode

from ...http.datastructures import raw_header, raw_header_values
from ...http.response import response_status
from ...http.sse import EventSourceResponse

if TYPE_CHECKING:
    from ...http.request import Request
    from ...http.response import Response
    from ...routing.route import Handler

__all__ = ["ServerSpans", "HEADERS"]

_attach = otel_context.attach
_detach = otel_context.detach
_set_span_in_context = trace.set_span_in_context
_SERVER = SpanKind.SERVER


class _RawHeaders(Getter[list[tuple[bytes, bytes]]]):
    """How the propagator reads aiorest's request headers: the lines as the parser gave them."""

    def get(self, carrier: list[tuple[bytes, bytes]], key: str) -> list[str] | None:
        values = raw_header_values(carrier, key.lower().encode("latin-1"))
        return [value.decode("latin-1") for value in values] if values else None

    def keys(self, carrier: list[tuple[bytes, bytes]]) -> list[str]:
        return [name.decode("latin-1").lower() for name, _ in carrier]


HEADERS = _RawHeaders()


class ServerSpans:
    """The layer: ``layer(endpoint, template)`` is ``endpoint`` inside a SERVER span (see the module).

    ``websocket``: the same for a WebSocket route's endpoint (chaining.py puts
    no other layer around those).
    """

    def __init__(self, tracer: trace.Tracer, handle_exception: Callable[[Request, BaseException], Awaitable[Response]]):
        self.tracer = tracer
        self.handle_exception = handle_exception

    def __call__(self, endpoint: Handler, template: str | None) -> Handler:
        return _Traced(self, endpoint, template, websocket=False)

    def websocket(self, endpoint: Handler, template: str | None) -> Handler:
        return _Traced(self, endpoint, template, websocket=True)


class _Traced:
    """One route's endpoint in a span (an object per route, made at startup)."""

    __slots__ = ("tracer", "endpoint", "handle_exception", "template", "websocket")

    def __init__(self, spans: ServerSpans, endpoint: Handler, template: str | None, *, websocket: bool) -> None:
        self.tracer = spans.tracer
        self.handle_exception = spans.handle_exception
        self.endpoint = endpoint
        self.template = template
        self.websocket = websocket

    async def __call__(self, request: Request) -> Any:
        template = self.template
        parent = extract(request.raw_headers, getter=HEADERS)
        span = self.tracer.start_span(
            request.method if template is None else f"{request.method} {template}", parent, _SERVER
        )
        span_context = span.get_span_context()
        if span_context.is_valid:
            request.trace_id = format(span_context.trace_id, "032x")
        recording = span.is_recording()
        if recording:
            span.set_attributes(_request_attributes(request, template))
        token = _attach(_set_span_in_context(span, parent))
        error_type: str | None = None
        status: int | None = None
        try:
            try:
                result = await self.endpoint(request)
            except Exception as exc:
                if recording:
                    span.record_exception(exc)
                error_type = type(exc).__qualname__
                result = await self.handle_exception(request, exc)  # answered here, to know its status
            status = 101 if self.websocket and error_type is None else response_status(result)
            if isinstance(result, EventSourceResponse) and recording:
                result.content = _traced_events(self.tracer, result.content, template, span)
            return result
        except asyncio.CancelledError:
            error_type = "cancelled"  # the client went away (cancel_on_disconnect), or the server stops
            raise
        finally:
            _detach(token)
            if recording:
                if status is not None:
                    span.set_attribute("http.response.status_code", status)
                if status is not None and status >= 500:
                    span.set_attribute("error.type", error_type or str(status))
                    span.set_status(Status(StatusCode.ERROR))
                elif status is None:
                    span.set_attribute("error.type", error_type or "unanswered")
            span.end()


def _request_attributes(request: Request, template: str | None) -> dict[str, Any]:
    """What the conventions ask of an HTTP server span, from the request (only when the span records)."""
    attributes: dict[str, Any] = {
        "http.request.method": request.method,
        "url.path": request.path,
        "url.scheme": request.scheme,
        "network.protocol.version": request.http_version,
    }
    if template is not None:
        attributes["http.route"] = template
    if request.query_string:
        attributes["url.query"] = request.query_string
    attributes["server.address"], attributes["server.port"] = _server(request.host, request.scheme)
    client = request.client
    if client is not None:
        attributes["client.address"] = client[0]
    agent = raw_header(request.raw_headers, b"user-agent")
    if agent is not None:
        attributes["user_agent.original"] = agent.decode("latin-1")
    return attributes


def _server(host: str, scheme: str) -> tuple[str, int]:
    """The name and port of ``host`` (``name[:port]``, ``[v6]:port``); the scheme's port when it has none."""
    if host.startswith("["):
        end = host.find("]")
        name, port = host[1:end], host[end + 2 :]
    else:
        name, _, port = host.partition(":")
    return name, int(port) if port.isdigit() else (443 if scheme == "https" else 80)


async def _traced_events(
    tracer: trace.Tracer, content: AsyncIterable[Any], template: str | None, server_span: trace.Span
) -> AsyncIterator[Any]:
    """``content``'s events inside a span covering the stream, current while each event is made."""
    span = tracer.start_span(
        f"SSE {template}" if template else "SSE", _set_span_in_context(server_span), SpanKind.INTERNAL
    )
    if template is not None:
        span.set_attribute("http.route", template)
    context = _set_span_in_context(span)
    iterator = aiter(content)
    events = 0
    try:
        while True:
            token = _attach(context)
            try:
                event = await anext(iterator)
            except StopAsyncIteration:
                break
            finally:
                _detach(token)
            events += 1
            yield event
    except Exception as exc:
        span.record_exception(exc)
        span.set_attribute("error.type", type(exc).__qualname__)
        span.set_status(Status(StatusCode.ERROR))
        raise
    finally:
        closing = getattr(iterator, "aclose", None)
        if closing is not None:
            await closing()
        span.set_attribute("aiorest.sse.events", events)
        span.end()

"""Where the spans go when the application gives no provider: OpenTelemetry's SDK, set up from ``OTEL_*``.

A provider the application set globally (``opentelemetry.trace.set_tracer_provider``)
is used as it is. Else one is made here, as the SDK's auto-configuration would:

- its resource from ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES``;
- its sampler from ``OTEL_TRACES_SAMPLER`` and ``OTEL_TRACES_SAMPLER_ARG``
  (the SDK's default: ``parentbased_always_on``);
- a BatchSpanProcessor to an OTLP/HTTP exporter (``OTEL_EXPORTER_OTLP_ENDPOINT``,
  ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, ``OTEL_EXPORTER_OTLP_HEADERS``...). The
  processor's queue holds at most ``OTEL_BSP_MAX_QUEUE_SIZE`` spans (default 2048):
  a span ended while it is full is dropped (the SDK logs it), so a collector that
  is down or slow costs memory up to that bound, never more, and never blocks the loop:
  the spans are sent by the processor's thread, in batches of
  ``OTEL_BSP_MAX_EXPORT_BATCH_SIZE`` (default 512) every ``OTEL_BSP_SCHEDULE_DELAY``
  ms (default 5000), each export given ``OTEL_EXPORTER_OTLP_TIMEOUT`` (default 10 s).

It is then set globally (the app's own spans join the same traces), once per process:
each worker makes its own, after the fork.
"""

from __future__ import annotations

import os
from typing import Any

from opentelemetry import trace

__all__ = ["export_provider", "sdk_disabled"]


def sdk_disabled() -> bool:
    """``OTEL_SDK_DISABLED`` is true: OpenTelemetry is switched off."""
    return os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"


def export_provider() -> tuple[trace.TracerProvider, Any]:
    """The provider to use, and the one made here (None when the application had set one)."""
    current = trace.get_tracer_provider()
    if not isinstance(current, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
        return current, None
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise RuntimeError(
            "tracing needs OpenTelemetry's SDK and OTLP exporter: pip install '.[otel]' in aiorest's checkout,"
            f" or give Tracing(tracer_provider=...) ({exc})"
        ) from exc
    provider = TracerProvider(resource=Resource.create(), shutdown_on_exit=False)  # the server shuts it down
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    return provider, provider

"""OpenTelemetry tracing, opt-in: a SERVER span per request, and spans for what a request waits on.

Off (the default), nothing of this package is imported and nothing is wrapped:
the server's endpoints are the app's as they are. On (``Server(app, tracing=True)``,
``aiorest run --tracing``, ``AIOREST_TRACING=1``), the server makes a :class:`Tracing`
at its start, which

- puts a layer around every endpoint (serverspans.py), outermost: one SERVER span per
  request, continuing the W3C ``traceparent`` the request carried, named and
  attributed after OpenTelemetry's stable HTTP semantic conventions, current while
  the handler runs; a WebSocket's covers its session, an event stream gets a span of
  its own covering the stream;
- instruments what a request waits on (instruments.py): each statement of either
  database driver, the pool's wait for a connection, the session, idempotency and
  rate-limit stores;
- gives the trace id to the access log (``request.trace_id``) and the trace and span
  ids to every log record written while a span is current (``record.trace_id``,
  ``record.span_id``: JSON log lines carry them).

The spans go to the ``tracer_provider`` given, else to the one the application set
(``opentelemetry.trace.set_tracer_provider``), else to one made here from the standard
``OTEL_*`` variables, exported over OTLP/HTTP by a BatchSpanProcessor (provider.py).
Needs aiorest's ``otel`` extra.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from opentelemetry import trace

from . import instruments
from .logrecords import install_log_records
from .provider import export_provider, sdk_disabled
from .serverspans import ServerSpans

if TYPE_CHECKING:
    from ...app.application import App, EndpointLayer

__all__ = ["Tracing"]

logger = logging.getLogger("aiorest.server")

_FLUSH_MILLIS = 5_000  # how long a stopping server waits for the spans in the batch to be sent


class Tracing:
    """What the server traces, and where the spans go (see :doc:`tracing`).

    ``tracer_provider``: the provider of the spans; None (default): the one the
    application set globally, else one made from the ``OTEL_*`` environment
    variables (then set globally, so that the app's own spans join the same
    traces, and shut down, its last spans sent, when the server stops).
    ``instrument``: also trace the database statements, the pool's waits and the
    stores (default True); False traces the requests only.
    """

    def __init__(self, tracer_provider: trace.TracerProvider | None = None, *, instrument: bool = True) -> None:
        self.tracer_provider = tracer_provider
        self.instrument = instrument
        self._own_provider: Any = None  # the provider made here: shut down at stop
        self._started = False
        self.layer: ServerSpans | None = None

    @property
    def enabled(self) -> bool:
        """False when ``OTEL_SDK_DISABLED`` is true: then nothing is traced, nor wrapped."""
        return not sdk_disabled()

    def start(self, app: App) -> list[EndpointLayer]:
        """Choose the provider and instrument (before the app's startup: its pool's first connections are
        traced); the layers to put around the app's endpoints, outermost: none when ``OTEL_SDK_DISABLED``."""
        if self._started or not self.enabled:
            return [] if self.layer is None else [self.layer]
        provider = self.tracer_provider
        if provider is None:
            provider, self._own_provider = export_provider()
        tracer = provider.get_tracer("aiorest", _version())
        self.layer = ServerSpans(tracer, app.handle_exception)
        if self.instrument:
            instruments.install(tracer)
        install_log_records()
        self._started = True
        return [self.layer]

    def stop(self) -> None:
        """Undo the instrumentation; a provider made here sends its last spans (up to 5 s) and shuts down."""
        if not self._started:
            return
        self._started = False
        if self.instrument:
            instruments.uninstall()
        self.layer = None
        own, self._own_provider = self._own_provider, None
        if own is not None:
            if not own.force_flush(_FLUSH_MILLIS):
                logger.warning("tracing: the last spans were not all sent within %d ms", _FLUSH_MILLIS)
            own.shutdown()


def _version() -> str | None:
    """aiorest's version, as installed (the tracer's scope names it)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("aiorest")
    except PackageNotFoundError:
        return None

"""The trace and span ids on the log records written while a span is current.

Installed once a process, when a server with tracing starts: a log record
factory, beside requestid.py's, that copies the current span's ids onto the
record as ``trace_id`` and ``span_id`` (32 and 16 hex digits), read when the
record is made, in the request's context (a handler that formats later, in
another thread, still has them). ``JSONLogFormatter`` writes a record's
attributes as fields: its lines carry them. Records made outside a span get
neither.
"""

from __future__ import annotations

import logging
from typing import Any

from opentelemetry import trace

__all__ = ["install_log_records"]

_get_current_span = trace.get_current_span


def install_log_records() -> None:
    previous = logging.getLogRecordFactory()
    if getattr(previous, "aiorest_trace_ids", False):
        return  # installed already

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        context = _get_current_span().get_span_context()
        if context.is_valid:
            record.trace_id = format(context.trace_id, "032x")
            record.span_id = format(context.span_id, "016x")
        return record

    factory.aiorest_trace_ids = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(factory)

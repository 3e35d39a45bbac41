"""The application's own log records as JSON lines, beside the access log's.

``JSONLogFormatter`` is a :class:`logging.Formatter`: each record becomes one line of JSON
with its time (UTC, milliseconds), level, logger, message, process, the id of the request
that wrote it (``request_id``, what the access log names it; null outside a request) and,
when the record has one, its ``trace_id``; an exception's traceback and a stack go in as
text, and what the call passed as ``extra=`` as fields of their own. ``aiorest run
--log-format json`` (``AIOREST_LOG_FORMAT``, ``log_format="json"``) configures the root
logger with it; an app that sets up logging itself uses the class.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

__all__ = ["JSONLogFormatter", "LOG_FORMATS"]

LOG_FORMATS = ("text", "json")

# What every LogRecord has: the rest of its __dict__ came from ``extra=``.
_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime", "request_id"}


class JSONLogFormatter(logging.Formatter):
    """One JSON object a line for each record (see the module)."""

    def format(self, record: logging.LogRecord) -> str:
        request_id = getattr(record, "request_id", "-")
        line: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "process": record.process,
            "request_id": None if request_id == "-" else request_id,
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and key not in line:
                line[key] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, ensure_ascii=False, default=repr)


# What run() logs with: the request id is "-" outside a request (see requestid.py).
LOG_FORMAT = "%(asctime)s [%(request_id)s] %(levelname)s %(name)s: %(message)s"


def configure_logging(level: str, log_format: str, text_format: str) -> None:
    """The root logger at ``level``, its lines ``text_format`` or JSON (``log_format="json"``), unless the
    app configured logging itself (``logging.basicConfig`` does nothing then)."""
    if log_format == "json":
        handler = logging.StreamHandler()
        handler.setFormatter(JSONLogFormatter())
        logging.basicConfig(level=level.upper(), handlers=[handler])
    else:
        logging.basicConfig(level=level.upper(), format=text_format)


# With --workers, the pid tells whose line it is (the workers inherit the parent's configuration).
WORKERS_LOG_FORMAT = "%(asctime)s [%(request_id)s] %(levelname)s %(name)s[%(process)d]: %(message)s"

"""``aiorest routes MODULE:APP`` and ``aiorest openapi MODULE:APP``: an app looked at, not served.

``routes`` prints one line per route: method, path, name, handler, whether it needs a login
(``auth``) and whether its handler is typed. ``openapi`` writes the app's OpenAPI document
(``App.openapi()``) to stdout or a file, for a CI diff or a client generator. Neither starts
the app (no startup hooks, no database): they read what its decorators registered.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..app.application import App
from ..routing.metadata import is_secured
from ..routing.websocket import WebSocketEndpoint

__all__ = ["openapi_text", "route_lines", "write_openapi"]


def route_lines(app: App) -> list[str]:
    """The app's routes, one aligned line each, in path order then method; a header line first."""
    rows = [("METHOD", "PATH", "NAME", "HANDLER", "AUTH", "TYPED")]
    for route in sorted(app.router.routes(), key=lambda route: (route.path, route.method)):
        endpoint: Any = route.handler
        websocket = isinstance(endpoint, WebSocketEndpoint)
        handler = endpoint.handler if websocket else endpoint
        rows.append(
            (
                "WS" if websocket else route.method,
                route.path,
                route.name or "-",
                _qualified(handler),
                "login" if is_secured(handler) or is_secured(endpoint) else "-",
                "typed" if route.signature is not None else "-",
            )
        )
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]) - 1)]
    lines = []
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=True)]
        lines.append("  ".join([*cells, row[-1]]).rstrip())
    return lines


def openapi_text(app: App, *, indent: int | None = 2, title: str | None = None, version: str | None = None) -> str:
    """The app's OpenAPI document as JSON text, keys in a stable order (a diff shows what changed)."""
    document: dict[str, Any] = app.openapi(title=title, version=version)
    return json.dumps(document, indent=indent, sort_keys=indent is not None, ensure_ascii=False) + "\n"


def write_openapi(app: App, output: str | None, indent: int | None) -> None:
    text = openapi_text(app, indent=indent)
    if output is None or output == "-":
        print(text, end="")
    else:
        Path(output).write_text(text, encoding="utf-8")


def _qualified(handler: object) -> str:
    module = getattr(handler, "__module__", None) or "?"
    name = getattr(handler, "__qualname__", None) or type(handler).__name__
    return f"{module}.{name}"

"""``aiorest run module:app``: the command line."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from .app import App

__all__ = ["main", "load_app"]


def load_app(spec: str) -> App:
    """Import ``"package.module:attribute"`` and check that it is an App."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise SystemExit(f"aiorest: expected MODULE:APP (for example myapp:app), got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SystemExit(f"aiorest: cannot import {module_name!r}: {exc}") from exc
    try:
        app = getattr(module, attribute)
    except AttributeError:
        raise SystemExit(f"aiorest: module {module_name!r} has no attribute {attribute!r}") from None
    if not isinstance(app, App):
        raise SystemExit(f"aiorest: {spec} is a {type(app).__name__}, not an aiorest.App")
    return app


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="aiorest", description="Serve an aiorest App.")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="serve an app: aiorest run myapp:app --port 8080")
    run.add_argument("app", help="MODULE:APP, e.g. myapp:app")
    run.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    run.add_argument("--port", type=int, default=8080, help="port to bind (default 8080)")
    run.add_argument("--unix", help="serve on this unix socket path instead of TCP")
    run.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    if args.command == "run":
        app = load_app(args.app)
        app.run(host=args.host, port=args.port, unix=args.unix, log_level=args.log_level)

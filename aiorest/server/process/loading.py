"""Importing the app a command names (``module:attribute``): the command line does, and each worker after its fork."""

from __future__ import annotations

import importlib
import os
import sys

from ..._support.errors import one_line
from ...app.application import App

__all__ = ["load_app", "split_spec"]


def load_app(spec: str) -> App:
    """Import ``"package.module:attribute"`` and check that it is an App."""
    module_name, attribute = split_spec(spec)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # ImportError, or whatever the module's code raised (SyntaxError, ...)
        raise SystemExit(f"aiorest: cannot import {module_name!r}: {one_line(exc)}") from exc
    try:
        app = getattr(module, attribute)
    except AttributeError:
        raise SystemExit(f"aiorest: module {module_name!r} has no attribute {attribute!r}") from None
    if not isinstance(app, App):
        raise SystemExit(f"aiorest: {spec} is a {type(app).__name__}, not an aiorest.App")
    return app


def split_spec(spec: str) -> tuple[str, str]:
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise SystemExit(f"aiorest: expected MODULE:APP (for example myapp:app), got {spec!r}")
    return module_name, attribute

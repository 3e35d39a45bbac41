"""Sphinx configuration for the aiorest documentation.

Build: ``sphinx-build -W --keep-going -n -b html docs docs/_build/html``.
There is no intersphinx (the build runs offline), so references to the
standard library and to aiohttp are not links; see ``_resolve_reexports``
and ``nitpick_ignore_regex`` below.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import aiorest  # noqa: E402

project = "aiorest"
author = "the aiorest authors"
copyright = "aiorest authors"
release = aiorest.__version__
version = ".".join(release.split(".")[:2])

extensions = ["sphinx.ext.autodoc"]

exclude_patterns = ["_build"]
nitpicky = True

html_theme = "furo" if importlib.util.find_spec("furo") is not None else "alabaster"
html_title = f"aiorest {release}"

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_preserve_defaults = True
# Keep the public aliases as names in signatures instead of expanding them.
autodoc_type_aliases = {
    "Middleware": "aiorest.Middleware",
    "Hook": "aiorest.Hook",
    "ExceptionHandler": "aiorest.ExceptionHandler",
    "Handler": "aiorest.Handler",
    "Lifespan": "aiorest.Lifespan",
    "WebSocketHandler": "aiorest.routing.WebSocketHandler",
    "OriginPolicy": "aiorest.routing.OriginPolicy",
    # The decorators return the function they were given.
    "_H": "aiorest.Handler",
    "_F": "aiorest.ExceptionHandler",
}

# Offline, names from the standard library, aiohttp and opentelemetry cannot be linked (no
# intersphinx): leave them as plain text. Builtins and ``typing`` names are
# resolved by Sphinx itself; every other reference must resolve.
_UNLINKABLE = sorted(sys.stdlib_module_names | {"aiohttp", "opentelemetry"})
nitpick_ignore_regex = [(r"py:.*", rf"(?:{'|'.join(_UNLINKABLE)})(?:\..+)?")]
# MultiDict's value type, and what the server gives a request (``Request.protocol``): not public API.
nitpick_ignore = [
    ("py:class", "aiorest.http.datastructures._V"),
    ("py:class", "aiorest.http.interfaces.BodySource"),
    ("py:class", "aiorest.http.websocket._T"),  # receive_json's message type
    ("py:class", "aiorest.http.websocket._M"),  # WebSocket[Model]: the type its handler declares
]


def _resolve_reexports(app: Any, env: Any, node: Any, contnode: Any) -> Any:
    """Link an annotation's real path (``aiorest.http.request.Request``) to where the name is documented.

    The public API is documented where users import it from (``aiorest.Request``,
    ``aiorest.typed.HandlerSignature``, ``aiorest.db.Database``); annotations name
    the defining module, however deep. Try the package itself, then each package
    on the way down, and link the first that is documented.
    """
    if node.get("refdomain") != "py":
        return None
    target = node.get("reftarget", "")
    module = node.get("py:module") or ""
    if not target.startswith("aiorest.") and module.startswith("aiorest."):
        target = f"{module}.{target}"  # ``:class:`Header``` in a docstring of aiorest.typed.declare
    parts = target.split(".")
    if len(parts) < 3 or parts[0] != "aiorest":
        return None
    domain = env.get_domain("py")
    name = parts[-1]
    for depth in range(1, len(parts) - 1):
        candidate = ".".join([*parts[:depth], name])
        if domain.objects.get(candidate) is None:
            continue
        node["reftarget"] = candidate
        return domain.resolve_xref(env, node["refdoc"], app.builder, node["reftype"], candidate, node, contnode)
    return None


_ALIAS_REPR = re.compile(r"TypeAliasForwardRef\('([^']+)'\)")


def _unwrap_aliases(
    app: Any, what: str, name: str, obj: Any, options: Any, signature: str | None, return_annotation: str | None
) -> tuple[str | None, str | None]:
    """Sphinx 9 prints an alias nested in ``Callable[[...], ...]`` as its repr; print its name."""
    if signature:
        signature = _ALIAS_REPR.sub(r"\1", signature)
    if return_annotation:
        return_annotation = _ALIAS_REPR.sub(r"\1", return_annotation)
    return signature, return_annotation


def setup(app: Any) -> None:
    app.connect("missing-reference", _resolve_reexports)
    app.connect("autodoc-process-signature", _unwrap_aliases)

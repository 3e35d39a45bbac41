"""The routes that serve the OpenAPI document and its interactive docs (Swagger UI, ReDoc).

What :meth:`aiorest.App.add_openapi_routes` adds: the document, made on its
first request, and the docs pages with the files of openapi-ui-bundles.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..http.response import Response
from .annotations import require_msgspec

if TYPE_CHECKING:
    from ..http.request import Request

__all__ = ["DocsEndpoint", "openapi_routes"]

_JSON = "application/json"
_ASSETS = {"Cache-Control": "public, max-age=86400"}
_PAGES = {"Cache-Control": "no-cache"}
# ReDoc shows a logo from its CDN: the page tells the browser not to fetch images from elsewhere.
_REDOC_PAGE = {**_PAGES, "Content-Security-Policy": "img-src 'self' data:"}
_HTML = "text/html; charset=utf-8"
_MEDIA_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8", ".png": "image/png"}
_SWAGGER_FILES = ("swagger-ui-bundle.js", "swagger-ui.css", "favicon-32x32.png")
_REDOC_FILES = ("redoc.standalone.js",)


class DocsEndpoint:
    """A route of the docs' own: answers one fixed body, made on the first request (the document leaves it out)."""

    __slots__ = ("_make", "_media_type", "_headers", "_body")

    def __init__(self, make: Callable[[], bytes], media_type: str, headers: Mapping[str, str]) -> None:
        self._make = make
        self._media_type = media_type
        self._headers = headers
        self._body: bytes | None = None

    async def __call__(self, request: Request) -> Response:
        if self._body is None:
            self._body = self._make()
        return Response(self._body, 200, self._headers, self._media_type)


def openapi_routes(
    document: Callable[[], dict[str, Any]],
    title: str,
    openapi_url: str,
    docs_url: str | None,
    redoc_url: str | None,
) -> list[tuple[str, DocsEndpoint]]:
    """The (path, endpoint) pairs of :meth:`aiorest.App.add_openapi_routes`.

    ``document`` makes the OpenAPI document, on the first request for it;
    ``title`` is the docs pages' title.
    """
    require_msgspec(
        "the OpenAPI document needs msgspec for its JSON Schemas", "openapi"
    )  # now, not on the first request
    import msgspec

    routes: list[tuple[str, DocsEndpoint]] = [
        (openapi_url, DocsEndpoint(lambda: msgspec.json.encode(document()), _JSON, _PAGES))
    ]
    if docs_url is None and redoc_url is None:
        return routes
    bundles = _bundles()
    page_title = html.escape(title)
    spec = html.escape(openapi_url)
    if docs_url is not None:
        init = (
            f"window.ui = SwaggerUIBundle({{url: {json.dumps(openapi_url)}, dom_id: '#swagger-ui', "
            "deepLinking: true, validatorUrl: null, presets: [SwaggerUIBundle.presets.apis]});\n"
        )
        page = (
            f'<!doctype html>\n<html><head><meta charset="utf-8"><title>{page_title}</title>\n'
            f'<link rel="icon" type="image/png" href="{docs_url}/favicon-32x32.png">\n'
            f'<link rel="stylesheet" href="{docs_url}/swagger-ui.css"></head>\n'
            f'<body><div id="swagger-ui"></div>\n<script src="{docs_url}/swagger-ui-bundle.js"></script>\n'
            f'<script src="{docs_url}/swagger-ui-init.js"></script></body></html>\n'
        )
        routes.append((docs_url, DocsEndpoint(page.encode, _HTML, _PAGES)))
        routes.append((f"{docs_url}/swagger-ui-init.js", DocsEndpoint(init.encode, _MEDIA_TYPES[".js"], _PAGES)))
        routes += _files(bundles.swagger_ui.static_path, _SWAGGER_FILES, docs_url)
    if redoc_url is not None:
        page = (
            f'<!doctype html>\n<html><head><meta charset="utf-8"><title>{page_title}</title></head>\n'
            f'<body><redoc spec-url="{spec}"></redoc>\n'
            f'<script src="{redoc_url}/redoc.standalone.js"></script></body></html>\n'
        )
        routes.append((redoc_url, DocsEndpoint(page.encode, _HTML, _REDOC_PAGE)))
        routes += _files(bundles.redoc.static_path, _REDOC_FILES, redoc_url)
    return routes


def _files(folder: Path, names: Iterable[str], prefix: str) -> list[tuple[str, DocsEndpoint]]:
    routes = []
    for name in names:
        path = Path(folder) / name
        if not path.is_file():
            raise RuntimeError(f"the interactive docs' file {path} is missing: reinstall openapi-ui-bundles")
        routes.append((f"{prefix}/{name}", DocsEndpoint(path.read_bytes, _MEDIA_TYPES[path.suffix], _ASSETS)))
    return routes


def _bundles() -> Any:
    try:
        import openapi_ui_bundles
    except ImportError:
        raise RuntimeError(
            "the interactive docs (Swagger UI, ReDoc) are served from the files of openapi-ui-bundles: "
            "pip install '.[openapi]' in aiorest's checkout, or pass docs_url=None and redoc_url=None"
        ) from None
    return openapi_ui_bundles

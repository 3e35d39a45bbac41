"""app.openapi(): the OpenAPI 3.1 document of the routes; the routes serving it and the docs."""

from __future__ import annotations

import re
import uuid
from typing import Annotated, Any, Literal

import msgspec
import pytest
from msgspec import Meta
from openapi_spec_validator import validate

from aiorest import App, Cookie, EventSourceResponse, Header, Query, Request, Response, Router


class Line(msgspec.Struct):
    sku: Annotated[str, Meta(pattern="^[A-Z]{3}-[0-9]+$")]
    quantity: Annotated[int, Meta(ge=1, le=99)] = 1


class NewOrder(msgspec.Struct):
    customer: Annotated[str, Meta(min_length=1, max_length=80)]
    lines: list[Line]


class Order(msgspec.Struct):
    id: int
    customer: str
    lines: list[Line]


class Page(msgspec.Struct):
    limit: Annotated[int, Meta(ge=1, le=100)] = 20
    offset: int = 0


def shop() -> App:
    app = App(title="Shop", version="2.1")
    orders = Router()

    @orders.post("/orders", status=201, headers={"Cache-Control": "no-store"})
    async def place_order(
        order: NewOrder,
        x_client: Annotated[str | None, Header()] = None,
        session: Annotated[str, Cookie("sid")] = "",
    ) -> Order:
        """Place an order.

        The lines are kept in the order given.
        """
        return Order(1, order.customer, order.lines)

    @orders.get("/orders/{order_id:int}", name="get")
    async def get_order(order_id: Annotated[int, Meta(ge=1)]) -> Order:
        return Order(order_id, "Ada", [])

    @orders.get("/orders")
    async def list_orders(
        status: Literal["open", "shipped"] | None = None,
        ids: list[int] | None = None,
        limit: Annotated[int, Meta(ge=1, le=100)] = 20,
    ) -> list[Order]:
        return []

    app.include(orders, "/shop", name="orders")

    @app.get("/customers")
    async def list_customers(page: Annotated[Page, Query()]) -> dict[str, object]:
        return {}

    @app.route("/files/{key:uuid}/{rest:path}", ["GET", "DELETE"])
    async def file(request: Request) -> dict[str, str]:
        """Untyped: the path parameters only."""
        return {}

    @app.delete("/sessions", status=204)
    async def sign_out(request: Request) -> None:
        return None

    return app


def test_document_validates_and_names_the_api() -> None:
    document = shop().openapi()
    validate(document)
    assert document["openapi"] == "3.1.0"
    assert document["info"] == {"title": "Shop", "version": "2.1"}
    assert shop().openapi(title="Other", version="3")["info"] == {"title": "Other", "version": "3"}


def test_every_parameter_kind_with_its_schema_and_constraints() -> None:
    paths = shop().openapi()["paths"]
    assert set(paths) == {"/shop/orders", "/shop/orders/{order_id}", "/customers", "/files/{key}/{rest}", "/sessions"}
    place = paths["/shop/orders"]["post"]
    assert place["parameters"] == [
        {
            "name": "x-client",
            "in": "header",
            "required": False,
            "schema": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        },
        {"name": "sid", "in": "cookie", "required": False, "schema": {"type": "string", "default": ""}},
    ]
    assert paths["/shop/orders/{order_id}"]["get"]["parameters"] == [
        {"name": "order_id", "in": "path", "required": True, "schema": {"type": "integer", "minimum": 1}}
    ]
    listed = {p["name"]: p for p in paths["/shop/orders"]["get"]["parameters"]}
    assert listed["limit"] == {
        "name": "limit",
        "in": "query",
        "required": False,
        "schema": {"type": "integer", "minimum": 1, "maximum": 100, "default": 20},
    }
    assert listed["status"]["schema"] == {"anyOf": [{"enum": ["open", "shipped"]}, {"type": "null"}]}
    assert listed["ids"]["schema"]["anyOf"][0] == {"type": "array", "items": {"type": "integer"}}
    gathered = paths["/customers"]["get"]["parameters"]
    assert [(p["name"], p["in"], p["schema"].get("maximum")) for p in gathered] == [
        ("limit", "query", 100),
        ("offset", "query", None),
    ]
    # An untyped route: its path parameters, typed by their converters, and nothing else.
    untyped = paths["/files/{key}/{rest}"]
    assert set(untyped) == {"get", "delete"}
    assert untyped["get"]["parameters"] == [
        {"name": "key", "in": "path", "required": True, "schema": {"type": "string", "format": "uuid"}},
        {"name": "rest", "in": "path", "required": True, "schema": {"type": "string"}},
    ]
    # Its return annotation still says what it answers.
    assert untyped["get"]["responses"]["200"]["content"] == {
        "application/json": {"schema": {"type": "object", "additionalProperties": {"type": "string"}}}
    }


def test_an_untyped_handlers_return_annotation_says_what_the_document_promises() -> None:
    app = App()

    @app.get("/unannotated")
    async def unannotated(request):  # type: ignore[no-untyped-def]
        return {}

    @app.get("/text")
    async def text(request: Request) -> Response:
        return Response("hi")

    @app.get("/maybe")
    async def maybe(request: Request) -> dict[str, int] | Response:
        return {}

    @app.get("/opaque")
    async def opaque(request: Request) -> object:  # msgspec makes no schema of it: JSON, nothing known
        return {}

    @app.get("/events")
    async def events(request: Request) -> EventSourceResponse:
        raise NotImplementedError

    paths = app.openapi()["paths"]
    ok = {path: paths[path]["get"]["responses"]["200"] for path in paths}
    assert ok["/unannotated"]["content"] == {"application/json": {"schema": {}}}
    assert "content" not in ok["/text"]  # a Response: its media type is the handler's, not promised
    assert "content" not in ok["/maybe"]
    assert ok["/opaque"]["content"] == {"application/json": {"schema": {}}}
    # Before OpenAPI 3.2's itemSchema, an event stream's schema describes each event (schemathesis reads it
    # so): the event's fields, as EventSource parses them. {"type": "string"} failed every event.
    [event] = ok["/events"]["content"]["text/event-stream"].values()
    assert event["type"] == "object"
    assert {name: field["type"] for name, field in event["properties"].items()} == {
        "data": "string",
        "event": "string",
        "id": "string",
        "retry": "integer",
    }


def test_bodies_responses_and_errors_as_components() -> None:
    document = shop().openapi()
    schemas = document["components"]["schemas"]
    place = document["paths"]["/shop/orders"]["post"]
    assert place["requestBody"] == {
        "required": True,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/NewOrder"}}},
    }
    assert schemas["NewOrder"]["properties"]["customer"] == {"type": "string", "minLength": 1, "maxLength": 80}
    assert schemas["Line"]["properties"]["sku"]["pattern"] == "^[A-Z]{3}-[0-9]+$"
    created = place["responses"]["201"]
    assert created["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Order"}
    assert created["headers"] == {"Cache-Control": {"schema": {"type": "string", "const": "no-store"}}}
    assert {code: answer.get("$ref") for code, answer in place["responses"].items() if code != "201"} == {
        "400": "#/components/responses/BadRequest",
        "415": "#/components/responses/UnsupportedMediaType",
        "422": "#/components/responses/ValidationFailed",
    }
    listed = document["paths"]["/shop/orders"]["get"]["responses"]
    assert set(listed) == {"200", "422"}  # no body: neither 400 nor 415
    assert listed["200"]["content"]["application/json"]["schema"] == {
        "type": "array",
        "items": {"$ref": "#/components/schemas/Order"},
    }
    assert set(document["paths"]["/shop/orders/{order_id}"]["get"]["responses"]) == {"200", "404", "422"}
    assert document["paths"]["/sessions"]["delete"]["responses"] == {"204": {"description": "No Content"}}
    responses = document["components"]["responses"]
    assert set(responses) == {"BadRequest", "NotFound", "MethodNotAllowed", "UnsupportedMediaType", "ValidationFailed"}
    assert responses["NotFound"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ErrorResponse"
    }
    validation = schemas["ValidationErrorBody"]["properties"]
    assert validation["details"] == {"type": "array", "items": {"$ref": "#/components/schemas/ValidationProblem"}}
    assert schemas["ValidationProblem"]["required"] == ["location", "message"]
    assert responses["ValidationFailed"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ValidationErrorResponse"
    }


def test_summaries_tags_and_unique_operation_ids() -> None:
    document = shop().openapi()
    paths = document["paths"]
    place = paths["/shop/orders"]["post"]
    assert place["summary"] == "Place an order."
    assert place["description"] == "Place an order.\n\nThe lines are kept in the order given."
    assert "summary" not in paths["/customers"]["get"]
    assert document["tags"] == [{"name": "orders"}]
    assert place["tags"] == ["orders"]
    assert paths["/shop/orders/{order_id}"]["get"]["tags"] == ["orders"]
    assert "tags" not in paths["/customers"]["get"]  # not from a router
    ids = [op["operationId"] for methods in paths.values() for op in methods.values()]
    assert len(ids) == len(set(ids))
    assert "orders.get" in ids and "orders.place_order" in ids
    assert {paths["/files/{key}/{rest}"][m]["operationId"] for m in ("get", "delete")} == {"file", "file_delete"}


async def test_document_and_docs_are_served_from_local_assets(aiorest_client: Any) -> None:
    app = shop()
    app.add_openapi_routes()
    client = await aiorest_client(app)
    async with client.get("/openapi.json") as response:
        assert response.status == 200
        assert response.headers["Content-Type"] == "application/json"
        served = await response.json()
    assert served == app.openapi()
    assert "/openapi.json" not in served["paths"] and "/docs" not in served["paths"]
    for page, marker in (("/docs", "swagger-ui"), ("/redoc", "redoc")):
        async with client.get(page) as response:
            assert response.status == 200
            assert response.headers["Content-Type"] == "text/html; charset=utf-8"
            text = await response.text()
        assert marker in text
        assert "http://" not in text and "https://" not in text
        assets = re.findall(r'(?:src|href|spec-url)="([^"]+)"', text)
        assert assets and all(asset.startswith("/") for asset in assets)
        for asset in assets:
            async with client.get(asset) as response:
                assert response.status == 200, asset
                body = await response.read()
                expected = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}.get(
                    asset[asset.rfind(".") :], "application/json" if asset == "/openapi.json" else "image/png"
                )
                assert response.headers["Content-Type"] == expected, asset
                assert len(body) > 50
                if asset.startswith(("/docs/swagger-ui-bundle", "/docs/swagger-ui.css", "/redoc/redoc")):
                    assert response.headers["Cache-Control"] == "public, max-age=86400"
    async with client.get("/redoc") as response:
        # ReDoc's "powered by" logo comes from its CDN: the browser is told not to fetch it.
        assert response.headers["Content-Security-Policy"] == "img-src 'self' data:"
    async with client.get("/docs/swagger-ui-init.js") as response:
        init = await response.text()
    assert '"/openapi.json"' in init and "validatorUrl: null" in init  # never sent to swagger.io's validator


def test_docs_routes_are_opt_in_and_may_be_left_out() -> None:
    app = App()

    @app.get("/ping/{n:int}")
    async def ping(request: Request) -> dict[str, str]:
        return {}

    assert [route.path for route in app.router.routes()] == ["/ping/{n:int}"]
    app.add_openapi_routes("/api/openapi.json", docs_url=None, redoc_url=None)
    assert {route.path for route in app.router.routes()} == {"/ping/{n:int}", "/api/openapi.json"}
    document = app.openapi()
    validate(document)
    assert list(document["paths"]) == ["/ping/{n}"]
    assert document["paths"]["/ping/{n}"]["get"]["parameters"][0]["schema"] == {"type": "integer"}


def test_custom_converter_typed_by_its_convert() -> None:
    class Hex:
        regex = "[0-9a-f]+"

        def convert(self, value: str) -> int:
            return int(value, 16)

        def to_string(self, value: int) -> str:
            return format(value, "x")

    app = App(convertors={"hex": Hex()})  # type: ignore[dict-item]

    @app.get("/blocks/{n:hex}/{id:uuid}")
    async def block(n: int, id: uuid.UUID) -> dict[str, int]:
        return {}

    parameters = app.openapi()["paths"]["/blocks/{n}/{id}"]["get"]["parameters"]
    assert [p["schema"] for p in parameters] == [{"type": "integer"}, {"type": "string", "format": "uuid"}]


def test_missing_bundle_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "openapi_ui_bundles", None)
    with pytest.raises(RuntimeError, match=r"pip install '\.\[openapi\]' in aiorest's checkout"):
        App().add_openapi_routes()


def test_raises_adds_each_declared_error_status_in_the_error_shape():
    from aiorest import HTTPConflict, HTTPError, HTTPNotFound
    from aiorest.typed import raises

    class Gone(HTTPError):
        status = 410

    app = App()

    @app.delete("/items/{item_id:int}", status=204)
    @raises(HTTPConflict, Gone, HTTPNotFound)
    async def remove(item_id: int) -> None:
        """Remove an item."""

    document = app.openapi()
    validate(document)
    responses = document["paths"]["/items/{item_id}"]["delete"]["responses"]
    assert set(responses) == {"204", "404", "409", "410", "422"}
    assert responses["404"] == {"$ref": "#/components/responses/NotFound"}  # the shared component, once
    error = {"$ref": "#/components/schemas/ErrorResponse"}
    assert responses["409"] == {"description": "Conflict", "content": {"application/json": {"schema": error}}}
    assert (
        responses["410"]["description"] == "Gone" and responses["410"]["content"]["application/json"]["schema"] == error
    )
    with pytest.raises(TypeError, match="HTTPError subclasses"):
        raises(ValueError)  # type: ignore[arg-type]


class _Jotting(msgspec.Struct):
    text: str


def test_build_openapi_takes_the_app_as_before_or_its_router_and_middleware() -> None:
    from aiorest.typed import build_openapi

    app = App(title="Notes", version="2")

    @app.post("/notes", status=201)
    async def create(note: _Jotting) -> _Jotting:
        return note

    document = app.openapi()
    assert build_openapi(app, title="Notes", version="2") == document  # the signature of the release before
    assert build_openapi(app.router, app.middleware, title="Notes", version="2") == document


def test_a_websocket_route_is_described_by_its_handler_with_101():
    """A WebSocket route: its handler's docstring and declared errors, 101 (the upgrade), secured under a
    login. Before, the document described the WebSocket endpoint object ("Call self as a function.", 200 JSON)."""
    from aiorest import WebSocket
    from aiorest.security import Auth, BearerTokenIdentity, login_required

    async def lookup(token: str) -> str | None:
        return None

    app = App(middleware=[Auth(BearerTokenIdentity(lookup))])

    @app.websocket("/chat")
    @login_required
    async def chat(ws: WebSocket) -> None:
        """Chat in the room.

        Text messages both ways."""

    document = app.openapi()
    validate(document)
    operation = document["paths"]["/chat"]["get"]
    assert (operation["summary"], operation["operationId"]) == ("Chat in the room.", "chat")
    assert sorted(operation["responses"]) == ["101", "401", "403", "426"]
    assert operation["security"] == [{"bearerAuth": []}]

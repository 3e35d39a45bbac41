"""The compiled route table, unit-tested without a server."""

from __future__ import annotations

import pytest

from aiorest import App, HTTPMethodNotAllowed, HTTPNotFound, Router
from aiorest.routing import Route, RouteTable


async def handler_a(request):
    return {"handler": "a"}


async def handler_b(request):
    return {"handler": "b"}


class EvenConvertor:
    regex = "[0-9]+"

    def convert(self, value: str) -> int:
        number = int(value)
        if number % 2:
            raise ValueError("odd")
        return number

    def to_string(self, value: int) -> str:
        return str(value)


def test_templates_with_the_same_regex_keep_their_own_parameter_names():
    table = RouteTable()
    table.add(Route("GET", "/a/{x}", handler_a))
    table.add(Route("POST", "/a/{y}", handler_b))
    route, params, allow = table.resolve("POST", "/a/1")
    assert route.handler is handler_b and params == {"y": "1"}
    route, params, _ = table.resolve("GET", "/a/1")
    assert route.handler is handler_a and params == {"x": "1"}
    assert {"GET", "POST"} <= allow


def test_a_converter_refusing_falls_through_to_a_later_template():
    table = RouteTable({"even": EvenConvertor()})
    table.add(Route("GET", "/n/{n:even}", handler_a))
    table.add(Route("GET", "/n/{n:int}", handler_b))
    assert table.resolve("GET", "/n/4")[0].handler is handler_a
    route, params, _ = table.resolve("GET", "/n/5")
    assert route.handler is handler_b and params == {"n": 5}
    with pytest.raises(HTTPNotFound):
        table.resolve("GET", "/n/x")


def test_405_lists_the_methods_of_every_template_matching_the_path():
    table = RouteTable()
    table.add(Route("GET", "/items/{id:int}", handler_a))
    table.add(Route("POST", "/items/{name}", handler_b))
    with pytest.raises(HTTPMethodNotAllowed) as exc:
        table.resolve("DELETE", "/items/3")
    assert exc.value.headers["Allow"] == "GET, HEAD, OPTIONS, POST"


def test_a_router_included_twice_names_every_route_per_inclusion():
    router = Router()
    router.add_route("GET", "/x/{id:int}", handler_a)
    app = App()
    app.include(router, "/v1", name="v1")
    app.include(router, "/v2", name="v2")
    assert app.url_for("v1.handler_a", id=1) == "/v1/x/1"
    assert app.url_for("v2.handler_a", id=1) == "/v2/x/1"


def test_three_hundred_dynamic_routes_resolve_through_one_pattern():
    table = RouteTable()
    for i in range(300):
        table.add(Route("GET", f"/r{i}/{{id:int}}/tail", handler_a, name=f"r{i}"))
    for i in (0, 150, 299):
        assert table.resolve("GET", f"/r{i}/7/tail")[1] == {"id": 7}
        assert table.url_for(f"r{i}", id=7) == f"/r{i}/7/tail"


def test_the_table_exposes_each_compiled_template_and_its_converters_types():
    """OpenAPI reads the router's compiled templates, and one function gives a converter's type."""
    import uuid

    from aiorest.http.response import JSONResponse, Response, response_status, to_response
    from aiorest.routing.convertors import python_type

    table = RouteTable({"even": EvenConvertor()})
    table.add(Route("GET", "/notes/{note_id:int}/{tag}", handler_a))
    table.add(Route("GET", "/plain", handler_b))
    template = table.template("/notes/{note_id:int}/{tag}")
    assert template.openapi_path == "/notes/{note_id}/{tag}"
    assert [(name, python_type(conv)) for name, conv in template.params] == [("note_id", int), ("tag", str)]
    assert table.template("/plain").params == []
    with pytest.raises(KeyError, match="/missing"):
        table.template("/missing")
    assert python_type(table.convertors["uuid"]) is uuid.UUID
    # metrics counts the status to_response gives
    for result in ({}, [], None, Response(status=201), JSONResponse([], status=202)):
        assert response_status(result) == to_response(result).status
    assert response_status(object()) == 500

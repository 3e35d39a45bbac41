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

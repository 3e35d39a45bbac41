"""Typed handlers: parameters bound and validated from type hints, response models encoded."""

from __future__ import annotations

import dataclasses
import enum
import uuid
from typing import Annotated, Any, Literal, TypedDict

import msgspec
import pytest
from msgspec import Meta

from aiorest import (
    App,
    Body,
    Cookie,
    Header,
    HTTPError,
    HTTPUnprocessableEntity,
    Query,
    Request,
    Response,
    Router,
)
from aiorest.typed import HandlerSignature
from aiorest.typed.binding import TypedEndpoint


class Item(msgspec.Struct):
    name: Annotated[str, Meta(min_length=1)]
    quantity: Annotated[int, Meta(ge=1)] = 1


class Order(msgspec.Struct):
    title: Annotated[str, Meta(min_length=1, max_length=20)]
    items: list[Item] = []
    code: Annotated[str, Meta(pattern="^[A-Z]{3}$")] = "ABC"


class Placed(msgspec.Struct):
    id: int
    title: str
    items: int


@dataclasses.dataclass
class Point:
    x: int
    y: int = 0


class Tag(TypedDict):
    label: str


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Page(msgspec.Struct):
    limit: Annotated[int, Meta(ge=1, le=100)] = 10
    offset: int = 0
    tags: list[str] = []


class Filter(msgspec.Struct):
    q: str
    limit: int = 10


@dataclasses.dataclass
class Span:
    start: int = 0
    end: int = 10

    def __post_init__(self) -> None:
        if self.end < self.start:
            raise ValueError("end must not come before start")


def typed_app() -> App:
    app = App()

    @app.post("/orders", status=201, headers={"Cache-Control": "no-store"})
    async def place(order: Order, notify: bool = False) -> Placed:
        return Placed(id=7, title=order.title if not notify else order.title.upper(), items=len(order.items))

    @app.get("/search")
    async def search(
        q: str,
        limit: Annotated[int, Meta(ge=1, le=100)] = 10,
        ids: list[int] | None = None,
        color: Color = Color.RED,
        mode: Literal["all", "any"] = "all",
        since: float | None = None,
    ) -> dict[str, Any]:
        return {"q": q, "limit": limit, "ids": ids, "color": color.value, "mode": mode, "since": since}

    @app.get("/page")
    async def page(request: Request, page: Annotated[Page, Query()]) -> dict[str, Any]:
        return {"page": msgspec.to_builtins(page), "path": request.path}

    @app.get("/filter")
    async def filter_(found: Annotated[Filter, Query()], span: Annotated[Span, Query()]) -> dict[str, Any]:
        return {"q": found.q, "limit": found.limit, "span": [span.start, span.end]}

    @app.post("/any")
    async def any_body(body: Annotated[Any, Body()]) -> dict[str, Any]:
        return {"type": type(body).__name__}

    @app.post("/lenient", strict_content_type=False)
    async def lenient(order: Order) -> dict[str, str]:
        return {"title": order.title}

    @app.get("/who")
    async def who(
        x_token: Annotated[str, Header()],
        agent: Annotated[str | None, Header("User-Agent")] = None,
        retries: Annotated[int, Header("X-Retries"), Meta(ge=0)] = 0,
        session: Annotated[str | None, Cookie("session")] = None,
        theme: Annotated[str, Cookie()] = "light",
    ) -> dict[str, Any]:
        return {"token": x_token, "agent": agent is not None, "retries": retries, "session": session, "theme": theme}

    @app.get("/users/{user_id:int}/files/{name}")
    async def user_file(user_id: Annotated[int, Meta(le=1000)], name: str, request: Request) -> dict[str, Any]:
        return {"user_id": user_id, "name": name, "params": dict(request.path_params)}

    @app.get("/items/{item_id:uuid}")
    async def item(item_id: uuid.UUID) -> dict[str, str]:
        return {"id": str(item_id), "type": type(item_id).__name__}

    @app.post("/points")
    async def points(point: Point) -> list[Point]:
        return [point, Point(point.y, point.x)]

    @app.post("/tags")
    async def tags(tags: Annotated[list[Tag], Body()]) -> list[Placed]:
        return [Placed(id=i, title=tag["label"], items=0) for i, tag in enumerate(tags)]

    @app.post("/maybe")
    async def maybe(order: Order | None = None) -> dict[str, Any]:
        return {"title": order.title if order else None}

    @app.get("/plain")
    async def plain(request):  # type: ignore[no-untyped-def]
        return {"plain": True}

    @app.get("/model-or-response/{flag}")
    async def model_or_response(flag: str) -> Placed | Response:
        if flag == "response":
            return Response("made by hand", status=202)
        if flag == "dict":
            return {"id": 1, "title": "a dict", "items": 0}  # type: ignore[return-value]
        return Placed(id=2, title="model", items=3)

    @app.delete("/orders/{order_id:int}", status=202)
    async def cancel(order_id: int) -> None:
        return None

    @app.post("/untyped-status", status=201, headers={"X-Made": "yes"})
    async def untyped_status(request: Request) -> dict[str, Any]:
        return {"created": await request.json()}

    return app


async def problems(response: Any) -> list[dict[str, str]]:
    assert response.status == 422, await response.text()
    body = await response.json()
    assert body["error"]["status"] == 422
    assert body["error"]["message"] == "the request is not valid"
    return body["error"]["details"]


# -- inputs ------------------------------------------------------------------------


async def test_body_struct_validated_and_model_encoded_with_declared_status_and_headers(aiorest_client):
    client = await aiorest_client(typed_app())
    order = {"title": "books", "items": [{"name": "a", "quantity": 2}, {"name": "b"}]}
    async with client.post("/orders", json=order) as response:
        assert response.status == 201
        assert response.headers["Cache-Control"] == "no-store"
        assert response.headers["Content-Type"] == "application/json"
        assert await response.read() == b'{"id":7,"title":"books","items":2}'
    async with client.post("/orders?notify=true", json={"title": "x"}) as response:
        assert (await response.json())["title"] == "X"


@pytest.mark.parametrize(
    ("body", "location", "message"),
    [
        ({"items": []}, "body.title", "Object missing required field `title`"),
        ({"title": ""}, "body.title", "Expected `str` of length >= 1"),
        ({"title": "x" * 21}, "body.title", "Expected `str` of length <= 20"),
        ({"title": "a", "code": "abc"}, "body.code", "Expected `str` matching regex '^[A-Z]{3}$'"),
        ({"title": "a", "items": [{"name": "n", "quantity": 0}]}, "body.items[0].quantity", "Expected `int` >= 1"),
        ({"title": "a", "items": [{}]}, "body.items[0].name", "Object missing required field `name`"),
        ({"title": 5}, "body.title", "Expected `str`, got `int`"),
        ([], "body", "Expected `object`, got `array`"),
    ],
)
async def test_body_problems_answer_422_with_their_location(aiorest_client, body, location, message):
    client = await aiorest_client(typed_app())
    async with client.post("/orders", json=body) as response:
        assert await problems(response) == [{"location": location, "message": message}]


async def test_every_query_problem_is_reported_with_the_body_problem(aiorest_client):
    client = await aiorest_client(typed_app())
    async with client.post("/orders?notify=maybe", json={"title": ""}) as response:
        assert await problems(response) == [
            {"location": "body.title", "message": "Expected `str` of length >= 1"},
            {"location": "query.notify", "message": "Expected `bool`, got `str`"},
        ]
    async with client.get("/search?limit=0&ids=1&ids=x&color=green&mode=some&since=soon") as response:
        assert await problems(response) == [
            {"location": "query.q", "message": "required"},
            {"location": "query.limit", "message": "Expected `int` >= 1"},
            {"location": "query.ids[1]", "message": "Expected `int`, got `str`"},
            {"location": "query.color", "message": "Invalid enum value 'green'"},
            {"location": "query.mode", "message": "Invalid enum value 'some'"},
            {"location": "query.since", "message": "Expected `float | null`, got `str`"},
        ]


async def test_query_parameters_defaults_optional_and_repeated_keys(aiorest_client):
    client = await aiorest_client(typed_app())
    async with client.get("/search?q=tea") as response:
        assert await response.json() == {
            "q": "tea",
            "limit": 10,
            "ids": None,
            "color": "red",
            "mode": "all",
            "since": None,
        }
    async with client.get("/search?q=a&q=b&limit=5&ids=3&ids=1&color=blue&mode=any&since=1.5") as response:
        assert await response.json() == {
            "q": "a",  # a single value takes the first
            "limit": 5,
            "ids": [3, 1],
            "color": "blue",
            "mode": "any",
            "since": 1.5,
        }


async def test_query_gathered_into_a_struct(aiorest_client):
    client = await aiorest_client(typed_app())
    async with client.get("/page?limit=3&tags=a&tags=b") as response:
        assert await response.json() == {"page": {"limit": 3, "offset": 0, "tags": ["a", "b"]}, "path": "/page"}
    async with client.get("/page") as response:
        assert (await response.json())["page"] == {"limit": 10, "offset": 0, "tags": []}
    async with client.get("/page?limit=101&offset=x") as response:
        assert await problems(response) == [
            {"location": "query.limit", "message": "Expected `int` <= 100"},
            {"location": "query.offset", "message": "Expected `int`, got `str`"},
        ]


async def test_a_gathered_query_model_missing_a_field_or_refused_by_its_post_init_is_422(aiorest_client):
    client = await aiorest_client(typed_app())
    async with client.get("/filter?q=tea&limit=3&start=2&end=4") as response:
        assert await response.json() == {"q": "tea", "limit": 3, "span": [2, 4]}
    async with client.get("/filter?limit=3") as response:  # was a 500: Filter(limit=3) missing q
        assert await problems(response) == [{"location": "query.q", "message": "required"}]
    async with client.get("/filter?limit=x&end=y") as response:
        assert await problems(response) == [
            {"location": "query.q", "message": "required"},
            {"location": "query.limit", "message": "Expected `int`, got `str`"},
            {"location": "query.end", "message": "Expected `int`, got `str`"},
        ]
    async with client.get("/filter?q=a&start=5&end=1") as response:  # as msgspec treats a body's __post_init__
        assert await problems(response) == [{"location": "query", "message": "end must not come before start"}]


async def test_headers_and_cookies(aiorest_client):
    client = await aiorest_client(typed_app())
    headers = {"X-Token": "t1", "X-Retries": "3", "Cookie": "session=s1; theme=dark"}
    async with client.get("/who", headers=headers) as response:
        assert await response.json() == {"token": "t1", "agent": True, "retries": 3, "session": "s1", "theme": "dark"}
    async with client.get("/who", headers={"x-token": "t2"}) as response:
        assert await response.json() == {"token": "t2", "agent": True, "retries": 0, "session": None, "theme": "light"}
    async with client.get("/who", headers={"X-Retries": "many"}) as response:
        assert await problems(response) == [
            {"location": "header.x-token", "message": "required"},
            {"location": "header.x-retries", "message": "Expected `int`, got `str`"},
        ]
    async with client.get("/who", headers={"X-Token": "t", "X-Retries": "-1"}) as response:
        assert await problems(response) == [{"location": "header.x-retries", "message": "Expected `int` >= 0"}]


async def test_path_parameters_by_route_name_with_constraints(aiorest_client):
    client = await aiorest_client(typed_app())
    async with client.get("/users/12/files/notes.txt") as response:
        assert await response.json() == {
            "user_id": 12,
            "name": "notes.txt",
            "params": {"user_id": 12, "name": "notes.txt"},
        }
    async with client.get("/users/1001/files/a") as response:
        assert await problems(response) == [{"location": "path.user_id", "message": "Expected `int` <= 1000"}]
    key = uuid.uuid4()
    async with client.get(f"/items/{key}") as response:
        assert await response.json() == {"id": str(key), "type": "UUID"}


async def test_dataclass_typeddict_and_list_bodies(aiorest_client):
    client = await aiorest_client(typed_app())
    async with client.post("/points", json={"x": 1, "y": 2}) as response:
        assert await response.json() == [{"x": 1, "y": 2}, {"x": 2, "y": 1}]
    async with client.post("/points", json={"y": 2}) as response:
        assert await problems(response) == [{"location": "body.x", "message": "Object missing required field `x`"}]
    async with client.post("/tags", json=[{"label": "a"}, {"label": "b"}]) as response:
        assert await response.json() == [{"id": 0, "title": "a", "items": 0}, {"id": 1, "title": "b", "items": 0}]
    async with client.post("/tags", json=[{"label": "a"}, {"label": 2}]) as response:
        assert await problems(response) == [{"location": "body[1].label", "message": "Expected `str`, got `int`"}]


async def test_an_optional_body_may_be_left_out(aiorest_client):
    client = await aiorest_client(typed_app())
    async with client.post("/maybe") as response:
        assert await response.json() == {"title": None}
    async with client.post("/maybe", json={"title": "t"}) as response:
        assert await response.json() == {"title": "t"}


async def test_malformed_json_stays_400_and_a_wrong_content_type_415(aiorest_client):
    client = await aiorest_client(typed_app())
    headers = {"Content-Type": "application/json"}
    for body in (b'{"title": ', b"\xff", b"{bad}"):
        async with client.post("/orders", data=body, headers=headers) as response:
            assert response.status == 400
            assert (await response.json())["error"]["message"].startswith("request body is not valid JSON")
    async with client.post("/orders", data=b"", headers=headers) as response:
        assert response.status == 400
        assert (await response.json())["error"]["message"] == "request body is empty; expected JSON"
    async with client.post("/orders", data=b"title=x", headers={"Content-Type": "text/plain"}) as response:
        assert response.status == 415
    async with client.post("/orders", data=b'{"title":"x"}', headers={"Content-Type": "application/vnd.a+json"}) as r:
        assert r.status == 201


def _error(body: dict[str, Any], status: int, location: str) -> str:
    assert body["error"]["status"] == status
    assert [problem["location"] for problem in body["error"]["details"]] == [location]
    return body["error"]["message"]


@pytest.mark.parametrize(
    "body",
    [
        b'{"title": "al\xffice"}',  # in a string the model keeps
        b'{"note": "\xff", "title": "alice"}',  # in a field the model ignores
        b'{"title": "alice"}\xc3',
    ],
)
async def test_a_body_that_is_not_utf_8_is_400_wherever_the_bad_byte_is(aiorest_client, body):
    client = await aiorest_client(typed_app())
    async with client.post("/orders", data=body, headers={"Content-Type": "application/json"}) as response:
        message = _error(await response.json(), 400, "body")  # was a 500 (UnicodeDecodeError), or a 201
        assert message.startswith("request body is not valid JSON: 'utf-8' codec can't decode byte")


@pytest.mark.parametrize("path", ["/any", "/orders"])  # nested where the model keeps it, and where it skips it
async def test_a_body_nested_too_deeply_is_400(aiorest_client, path):
    client = await aiorest_client(typed_app())
    headers = {"Content-Type": "application/json"}
    deep = b'{"title": "t", "x": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    async with client.post(path, data=deep, headers=headers) as response:  # was a 500 (RecursionError)
        message = _error(await response.json(), 400, "body")
        assert message == "request body is not valid JSON: JSON nested too deeply"
    nested = b'{"title": "t", "x": ' + b"[" * 500 + b"]" * 500 + b"}"
    async with client.post(path, data=nested, headers=headers) as response:
        assert response.status in (200, 201)


async def test_a_json_body_without_content_type_is_415_unless_the_route_allows_it(aiorest_client):
    client = await aiorest_client(typed_app())
    no_type = {"skip_auto_headers": ["Content-Type"]}
    async with client.post("/orders", data=b'{"title": "x"}', **no_type) as response:  # was a 201
        message = _error(await response.json(), 415, "header.content-type")
        assert message == "expected a JSON body (application/json), got no Content-Type"
    async with client.post("/maybe", data=b'{"title": "x"}', **no_type) as response:
        assert response.status == 415
    async with client.post("/maybe", **no_type) as response:  # an optional body left out
        assert await response.json() == {"title": None}
    async with client.post("/orders", data=b"", **no_type) as response:
        assert _error(await response.json(), 400, "body") == "request body is empty; expected JSON"
    async with client.post("/lenient", data=b'{"title": "x"}', **no_type) as response:
        assert await response.json() == {"title": "x"}
    async with client.post("/lenient", data=b'{"title": "x"}', headers={"Content-Type": "text/plain"}) as response:
        assert response.status == 415  # only a missing type is let through


def test_strict_content_type_is_kept_by_a_router_and_on_the_signature():
    router = Router()

    @router.post("/loose", strict_content_type=False)
    async def loose(order: Order) -> None: ...

    app = App()
    app.include(router, "/api")
    (route,) = app.router.routes()
    assert route.strict_content_type is False
    assert route.signature is not None and route.signature.strict_content_type is False


# -- outputs -----------------------------------------------------------------------


async def test_a_response_or_a_dict_returned_keeps_working(aiorest_client):
    client = await aiorest_client(typed_app())
    async with client.get("/model-or-response/model") as response:
        assert await response.read() == b'{"id":2,"title":"model","items":3}'
    async with client.get("/model-or-response/dict") as response:
        assert await response.json() == {"id": 1, "title": "a dict", "items": 0}
    async with client.get("/model-or-response/response") as response:
        assert response.status == 202
        assert await response.text() == "made by hand"


async def test_declared_status_for_none_and_for_an_untyped_handler(aiorest_client):
    client = await aiorest_client(typed_app())
    async with client.delete("/orders/3") as response:
        assert response.status == 202
        assert await response.read() == b""
    async with client.post("/untyped-status", json={"a": 1}) as response:
        assert response.status == 201
        assert response.headers["X-Made"] == "yes"
        assert await response.json() == {"created": {"a": 1}}


# -- what registration decides ----------------------------------------------------------


def test_an_untyped_handler_is_called_as_it_is():
    app = typed_app()
    routes = {(route.method, route.path): route for route in app.router.routes()}
    plain = routes["GET", "/plain"]
    assert plain.signature is None and plain.call is plain.handler
    typed = routes["POST", "/orders"]
    assert isinstance(typed.call, TypedEndpoint)
    assert isinstance(typed.signature, HandlerSignature)

    async def annotated(request: Request) -> dict[str, Any]:
        return {}

    async def named_request(request: Any) -> Response:
        return Response()

    for handler in (annotated, named_request):
        app.add_route("GET", f"/{handler.__name__}", handler)
    for route in app.router.routes():
        if route.path in ("/annotated", "/named_request"):
            assert route.call is route.handler


def test_the_signature_keeps_what_openapi_needs():
    app = typed_app()
    routes = {(route.method, route.path): route for route in app.router.routes()}
    signature = routes["POST", "/orders"].signature
    assert signature is not None
    assert signature.returns is Placed and signature.status == 201
    assert dict(signature.headers) == {"Cache-Control": "no-store"}
    body, notify = signature.parameters
    assert (body.name, body.source, body.annotation, body.required) == ("order", "body", Order, True)
    assert (notify.source, notify.key, notify.annotation, notify.required, notify.default) == (
        "query",
        "notify",
        bool,
        False,
        False,
    )
    who = routes["GET", "/who"].signature
    assert who is not None
    assert [(p.source, p.key, p.annotation) for p in who.parameters] == [
        ("header", "x-token", str),
        ("header", "user-agent", str | None),
        ("header", "x-retries", Annotated[int, Meta(ge=0)]),
        ("cookie", "session", str | None),
        ("cookie", "theme", str),
    ]
    search = routes["GET", "/search"].signature
    assert search is not None
    assert search.parameters[1].annotation == Annotated[int, Meta(ge=1, le=100)]
    page = routes["GET", "/page"].signature
    assert page is not None and page.request == "request"
    assert [(f.key, f.required, f.default) for f in page.parameters[0].fields] == [
        ("limit", False, 10),
        ("offset", False, 0),
        ("tags", False, None),
    ]


async def _handler_ok(order: Order) -> None: ...


@pytest.mark.parametrize(
    ("path", "handler_source", "expected"),
    [
        (
            "/x",
            "async def bad(request, limit): ...",
            "parameter 'limit' has no annotation and matches no path parameter",
        ),
        ("/x", "async def bad(a: Order, b: Point): ...", "parameters 'a' and 'b' both read the body"),
        ("/x", "async def bad(q: dict[str, int]): ...", "parameter 'q': unsupported annotation"),
        ("/x", "async def bad(s: Annotated[list[str], Cookie()]): ...", "parameter 's': unsupported annotation"),
        ("/x/{n:int}", "async def bad(n: str): ...", "parameter 'n' is annotated <class 'str'>, but its path"),
        ("/x/{n}", "async def bad(n: int): ...", "its path converter gives str"),
        ("/x/{n:int}", "async def bad(n: int = 1): ...", "parameter 'n' is a path parameter: it cannot have a default"),
        ("/x", "async def bad(*args: int): ...", "parameter 'args': a typed handler takes named parameters only"),
        ("/x", "async def bad(body: Annotated[Any, Body()]) -> Placed: ...", None),
        ("/x", "async def bad(request: Request) -> list[Placed | Point]: ...", "the return annotation: unsupported"),
        ("/x", "async def bad(s: Annotated[Request, Body()]): ...", "parameter 's': unsupported annotation"),
    ],
)
def test_bad_declarations_fail_at_registration_naming_handler_and_parameter(path, handler_source, expected):
    namespace: dict[str, Any] = {}
    exec(handler_source, globals(), namespace)  # noqa: S102 - the handlers under test
    handler = namespace["bad"]
    app = App()
    if expected is None:  # Any body is fine: it is JSON
        app.post(path)(handler)
        return
    with pytest.raises((TypeError, ValueError)) as caught:
        app.post(path)(handler)
    message = str(caught.value)
    assert f"handler 'bad' of POST {path}" in message
    assert expected in message
    assert not app.router.routes()  # nothing half registered


def test_bad_status_or_headers_fail_at_registration():
    app = App()
    with pytest.raises(ValueError, match="status must be from 200 to 599"):
        app.post("/a", status=99)(_handler_ok)
    with pytest.raises(ValueError, match="control characters"):
        app.post("/a", headers={"X-A": "one\r\nX-B: two"})(_handler_ok)
    with pytest.raises(ValueError, match="the server sets Content-Length"):
        app.post("/a", headers={"Content-Length": "3"})(_handler_ok)


def test_routers_carry_status_and_headers_and_are_checked_when_included():
    router = Router()

    @router.post("/things/{thing_id:int}", status=201, headers={"X-Router": "1"})
    async def make(thing_id: str) -> None: ...

    app = App()
    with pytest.raises(TypeError, match="handler 'test_routers.*make' of POST /api/things/{thing_id:int}"):
        app.include(router, "/api")


# -- the app around typed handlers ----------------------------------------------------------


async def test_middleware_sees_the_request_and_the_422_as_a_response(aiorest_client):
    seen: list[tuple[str, int]] = []

    async def record(request: Request, handler: Any) -> Response:
        response = await handler(request)
        seen.append((request.path, response.status))
        return response

    app = typed_app()
    app.add_middleware(record)
    client = await aiorest_client(app)
    async with client.post("/orders", json={"title": "t"}) as response:
        assert response.status == 201
    async with client.post("/orders", json={"title": ""}) as response:
        await problems(response)
    assert seen == [("/orders", 201), ("/orders", 422)]


async def test_an_exception_handler_for_422_gets_the_errors(aiorest_client):
    app = typed_app()

    @app.exception_handler(HTTPUnprocessableEntity)
    async def teapot(request: Request, exc: HTTPError) -> Response:
        return Response(f"{len(exc.details)} problems", status=418)

    client = await aiorest_client(app)
    async with client.get("/search?limit=x") as response:
        assert response.status == 418
        assert await response.text() == "2 problems"


async def test_without_msgspec_a_typed_handler_is_refused(monkeypatch):
    import aiorest.typed.annotations

    monkeypatch.setattr(aiorest.typed.annotations, "msgspec", None)
    app = App()

    async def plain(request: Request) -> dict[str, int]:
        return {}

    app.add_route("GET", "/plain", plain)  # untyped handlers do not need it
    with pytest.raises(
        TypeError, match=r"handler '_handler_ok' of POST /x: .*pip install '\.\[typed\]' in aiorest's checkout"
    ):
        app.add_route("POST", "/x", _handler_ok)

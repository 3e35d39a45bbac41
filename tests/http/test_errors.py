"""HTTP errors as JSON, unhandled exceptions, exception handlers, and keep-alive after errors."""

from __future__ import annotations

import asyncio
import json
import logging
from http import HTTPStatus

import pytest

import aiorest
from aiorest import (
    App,
    HTTPBadRequest,
    HTTPError,
    HTTPMethodNotAllowed,
    HTTPNotFound,
    HTTPServiceUnavailable,
    HTTPTooManyRequests,
    HTTPUnauthorized,
    HTTPUnprocessableEntity,
    JSONResponse,
    Request,
    Response,
)
from tests.rawclient import fetch, get, read_response

ERROR_CLASSES = [
    getattr(aiorest, name)
    for name in aiorest.http.exceptions.__all__
    if name not in ("HTTPError", "HTTPMethodNotAllowed", "ClientDisconnected")
]


def raising(exc: BaseException) -> App:
    app = App()

    @app.get("/raise")
    async def handler(request: Request) -> None:
        raise exc

    @app.get("/ok")
    async def ok(request: Request) -> dict[str, bool]:
        return {"ok": True}

    return app


@pytest.fixture
def error_log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.ERROR, logger="aiorest.error")
    return caplog


# -- HTTPError bodies and headers -----------------------------------------------------------------


def test_every_http_error_class_is_exported_with_a_4xx_or_5xx_status():
    assert len(ERROR_CLASSES) == 22
    for cls in ERROR_CLASSES:
        assert issubclass(cls, HTTPError)
        assert 400 <= cls.status <= 599


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda cls: cls.__name__)
async def test_http_error_renders_the_json_error_shape(aiorest_client, cls):
    client = await aiorest_client(raising(cls()))
    async with client.get("/raise") as response:
        assert response.status == cls.status
        assert response.content_type == "application/json"
        body = await response.json()
    assert body == {"error": {"status": cls.status, "message": HTTPStatus(cls.status).phrase, "details": None}}


async def test_message_and_details_are_passed_through(aiorest_client):
    details = [{"field": "title", "problem": "required"}, {"field": "size", "max": 10}]
    client = await aiorest_client(raising(HTTPUnprocessableEntity("invalid note", details=details)))
    async with client.get("/raise") as response:
        assert response.status == 422
        assert await response.json() == {"error": {"status": 422, "message": "invalid note", "details": details}}


async def test_http_error_with_any_status(aiorest_client):
    client = await aiorest_client(raising(HTTPError("I'm a teapot", status=418, details={"tea": "earl grey"})))
    async with client.get("/raise") as response:
        assert response.status == 418
        assert await response.json() == {
            "error": {"status": 418, "message": "I'm a teapot", "details": {"tea": "earl grey"}}
        }


@pytest.mark.parametrize("status", [200, 302, 399, 600])
def test_http_error_status_must_be_4xx_or_5xx(status):
    with pytest.raises(ValueError, match="4xx or 5xx"):
        HTTPError(status=status)


@pytest.mark.parametrize(
    ("exc", "status", "header", "value"),
    [
        (HTTPServiceUnavailable(retry_after=5), 503, "Retry-After", "5"),
        (HTTPTooManyRequests("slow down", retry_after=30), 429, "Retry-After", "30"),
        (HTTPMethodNotAllowed(["POST", "GET", "GET"]), 405, "Allow", "GET, POST"),
        (HTTPUnauthorized(headers={"WWW-Authenticate": 'Bearer realm="api"'}), 401, "WWW-Authenticate", None),
    ],
    ids=["503-retry-after", "429-retry-after", "405-allow", "401-www-authenticate"],
)
async def test_error_headers_are_sent(aiorest_client, exc, status, header, value):
    client = await aiorest_client(raising(exc))
    async with client.get("/raise") as response:
        assert response.status == status
        assert response.headers[header] == (value if value is not None else 'Bearer realm="api"')
        assert (await response.json())["error"]["status"] == status


async def test_a_method_not_allowed_given_one_method_as_a_string_allows_that_method(aiorest_client):
    # A str is one method: its letters would have made "Allow: E, G, T".
    client = await aiorest_client(raising(HTTPMethodNotAllowed("GET")))
    async with client.get("/raise") as response:
        assert response.status == 405
        assert response.headers["Allow"] == "GET"
    assert HTTPMethodNotAllowed("PATCH").allowed == ["PATCH"]


@pytest.mark.parametrize(
    ("allowed", "error"),
    [(b"GET", TypeError), ([b"GET"], TypeError), ([1], TypeError), (["G ET"], ValueError), ([""], ValueError)],
    ids=["bytes", "bytes-in-a-list", "int", "not-a-token", "empty"],
)
def test_a_method_not_allowed_refuses_what_is_not_a_method_name(allowed, error):
    with pytest.raises(error, match="method"):
        HTTPMethodNotAllowed(allowed)


@pytest.mark.parametrize(
    "headers",
    [{"X-Tag": "a\r\nX-Injected: yes"}, {"X-Tag": "a\nb"}, {"X-Tag": "\x00"}, {"X-Tag": "5 €"}, {"Bad Name": "v"}],
    ids=["crlf", "lf", "nul", "not-latin-1", "bad-name"],
)
def test_http_error_headers_are_checked_when_the_error_is_made(headers):
    with pytest.raises(ValueError, match="header"):
        HTTPError("nope", status=400, headers=headers)
    exc = HTTPError("nope", status=400)
    [(name, value)] = headers.items()
    with pytest.raises(ValueError, match="header"):
        exc.headers[name] = value
    with pytest.raises(ValueError, match="header"):
        exc.headers.update({name: value})
    with pytest.raises(ValueError, match="header"):
        exc.headers.setdefault(name, value)
    assert dict(exc.headers) == {}


def test_http_error_headers_are_a_mutable_mapping():
    exc = HTTPUnauthorized(headers={"WWW-Authenticate": "Bearer"})
    exc.headers["X-Tag"] = "one"
    exc.headers.update({"X-Other": "two"})
    assert exc.headers == {"WWW-Authenticate": "Bearer", "X-Tag": "one", "X-Other": "two"}
    del exc.headers["X-Tag"]
    assert list(exc.headers) == ["WWW-Authenticate", "X-Other"]


def test_http_error_headers_assigned_anew_are_checked_too():
    exc = HTTPNotFound()
    with pytest.raises(ValueError, match="CR, LF, NUL"):
        exc.headers = {"X-Tag": "a\r\nSet-Cookie: a=1"}
    exc.headers = {"Retry-After": "1"}
    exc.headers["retry-after"] = "2"  # the same header: one value, not two lines
    assert dict(exc.headers) == {"retry-after": "2"}


@pytest.mark.parametrize("status", ["404", True, 404.0], ids=repr)
def test_http_error_status_must_be_an_int(status):
    with pytest.raises(TypeError, match="must be an int"):
        HTTPError(status=status)


def test_http_error_status_may_be_an_http_status():
    exc = HTTPError(status=HTTPStatus.CONFLICT)
    assert exc.status == 409 and type(exc.status) is int
    assert exc.to_dict()["error"]["status"] == 409


async def test_a_bad_header_added_by_middleware_is_a_500(aiorest_client, error_log):
    # Before, it was refused only when the error's response was built, outside any
    # handler: the connection was dropped without an answer.
    app = raising(HTTPNotFound())

    async def tag(request: Request, handler):
        try:
            return await handler(request)
        except HTTPError as exc:
            exc.headers["X-Tag"] = "a\r\nX-Injected: yes"
            raise

    app.add_middleware(tag)
    client = await aiorest_client(app)
    [response, after] = await fetch(client.port, get("/raise") + get("/ok"), count=2)
    assert response.status == 500 and response.header("x-injected") is None
    assert json.loads(response.body)["error"]["message"] == "Internal Server Error"
    assert after.status == 200
    assert any(isinstance(r.exc_info[1], ValueError) for r in error_log.records if r.exc_info)


async def test_retry_after_is_absent_unless_given(aiorest_client):
    client = await aiorest_client(raising(HTTPServiceUnavailable()))
    async with client.get("/raise") as response:
        assert response.status == 503
        assert "Retry-After" not in response.headers


# -- unhandled exceptions ---------------------------------------------------------------------------


async def test_unhandled_exception_is_a_generic_500(aiorest_client, error_log):
    client = await aiorest_client(raising(ZeroDivisionError("secret detail 1234")))
    async with client.get("/raise") as response:
        assert response.status == 500
        body = await response.read()
    assert json.loads(body) == {"error": {"status": 500, "message": "Internal Server Error", "details": None}}
    assert b"secret" not in body and b"ZeroDivision" not in body and b"Traceback" not in body


async def test_unhandled_exception_traceback_goes_to_the_error_log(aiorest_client, error_log):
    client = await aiorest_client(raising(ZeroDivisionError("secret detail 1234")))
    async with client.get("/raise") as response:
        assert response.status == 500
    records = [r for r in error_log.records if r.name == "aiorest.error" and r.exc_info]
    assert len(records) == 1
    record = records[0]
    assert record.levelno == logging.ERROR
    assert "GET /raise" in record.getMessage()
    assert isinstance(record.exc_info[1], ZeroDivisionError)
    assert "secret detail 1234" in error_log.text and "Traceback" in error_log.text


async def test_unhandled_exception_after_await_is_also_a_500(aiorest_client, error_log):
    app = App()

    @app.get("/later")
    async def later(request: Request) -> None:
        await asyncio.sleep(0)
        raise RuntimeError("after a suspension")

    client = await aiorest_client(app)
    async with client.get("/later") as response:
        assert response.status == 500
        assert (await response.json())["error"]["message"] == "Internal Server Error"
    assert any(isinstance(r.exc_info[1], RuntimeError) for r in error_log.records if r.exc_info)


async def test_http_errors_are_not_logged_as_failures(aiorest_client, error_log):
    client = await aiorest_client(raising(HTTPNotFound("no note 9")))
    async with client.get("/raise") as response:
        assert response.status == 404
    assert [r for r in error_log.records if r.levelno >= logging.ERROR] == []


# -- exception handlers -----------------------------------------------------------------------------


@pytest.fixture
def handled_app() -> App:
    app = App()

    @app.get("/key")
    async def key(request: Request) -> None:
        raise KeyError("k")

    @app.get("/index")
    async def index(request: Request) -> None:
        raise IndexError("i")

    @app.get("/value")
    async def value(request: Request) -> None:
        raise ValueError("v")

    @app.exception_handler(LookupError)
    async def lookup(request: Request, exc: LookupError) -> JSONResponse:
        return JSONResponse({"handler": "LookupError", "type": type(exc).__name__}, status=404)

    @app.exception_handler(KeyError)
    async def key_error(request: Request, exc: KeyError) -> JSONResponse:
        return JSONResponse({"handler": "KeyError"}, status=410)

    @app.exception_handler(Exception)
    async def anything(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"handler": "Exception", "path": request.path}, status=503)

    return app


@pytest.mark.parametrize(
    ("path", "status", "body"),
    [
        ("/key", 410, {"handler": "KeyError"}),
        ("/index", 404, {"handler": "LookupError", "type": "IndexError"}),
        ("/value", 503, {"handler": "Exception", "path": "/value"}),
    ],
)
async def test_most_specific_exception_handler_wins(aiorest_client, handled_app, path, status, body):
    client = await aiorest_client(handled_app)
    async with client.get(path) as response:
        assert response.status == status
        assert await response.json() == body


async def test_not_found_handler_customises_routing_404s(aiorest_client):
    app = raising(HTTPNotFound("no note 9"))

    @app.exception_handler(HTTPNotFound)
    async def not_found(request: Request, exc: HTTPNotFound) -> Response:
        return Response(f"nothing at {request.path}: {exc.message}", status=404)

    client = await aiorest_client(app)
    async with client.get("/nowhere") as response:
        assert response.status == 404
        assert response.content_type == "text/plain"
        assert (await response.text()).startswith("nothing at /nowhere: ")
    async with client.get("/raise") as response:
        assert response.status == 404
        assert await response.text() == "nothing at /raise: no note 9"
    async with client.post("/ok") as response:  # 405 is not a 404
        assert response.status == 405
        assert (await response.json())["error"]["status"] == 405


async def test_http_error_handler_renders_every_error_its_way(aiorest_client):
    app = raising(HTTPBadRequest("bad"))

    @app.exception_handler(HTTPError)
    async def problem(request: Request, exc: HTTPError) -> JSONResponse:
        return JSONResponse({"title": exc.message, "status": exc.status}, status=exc.status, headers=exc.headers)

    client = await aiorest_client(app)
    async with client.get("/raise") as response:
        assert response.status == 400
        assert await response.json() == {"title": "bad", "status": 400}
    async with client.delete("/ok") as response:
        assert response.status == 405
        assert response.headers["Allow"] == "GET, HEAD, OPTIONS"
        assert (await response.json())["status"] == 405


async def test_exception_handler_sees_body_errors(aiorest_client):
    app = App()

    @app.post("/json")
    async def body(request: Request) -> object:
        return await request.json()

    @app.exception_handler(HTTPBadRequest)
    async def bad(request: Request, exc: HTTPBadRequest) -> dict[str, str]:
        return {"caught": "bad request"}

    client = await aiorest_client(app)
    async with client.post("/json", data=b"{nope", headers={"Content-Type": "application/json"}) as response:
        assert response.status == 200
        assert await response.json() == {"caught": "bad request"}


async def test_exception_handler_returning_none_is_204(aiorest_client):
    app = raising(KeyError("x"))

    @app.exception_handler(KeyError)
    async def swallow(request: Request, exc: KeyError) -> None:
        return None

    client = await aiorest_client(app)
    async with client.get("/raise") as response:
        assert response.status == 204


async def test_failing_exception_handler_is_a_logged_500(aiorest_client, error_log):
    app = raising(KeyError("original"))

    @app.exception_handler(KeyError)
    async def broken(request: Request, exc: KeyError) -> None:
        raise RuntimeError("handler bug")

    client = await aiorest_client(app)
    async with client.get("/raise") as response:
        assert response.status == 500
        body = await response.read()
    assert json.loads(body) == {"error": {"status": 500, "message": "Internal Server Error", "details": None}}
    assert b"handler bug" not in body
    assert any(isinstance(r.exc_info[1], RuntimeError) for r in error_log.records if r.exc_info)


async def test_exception_handler_raising_an_http_error_answers_with_it(aiorest_client):
    app = raising(KeyError("missing"))

    @app.exception_handler(KeyError)
    async def translate(request: Request, exc: KeyError) -> None:
        raise HTTPNotFound(f"no such key {exc.args[0]}")

    client = await aiorest_client(app)
    async with client.get("/raise") as response:
        assert response.status == 404
        assert (await response.json())["error"]["message"] == "no such key missing"


# -- keep-alive after errors ---------------------------------------------------------------------------


@pytest.fixture
def keepalive_app() -> App:
    app = raising(RuntimeError("boom"))

    @app.get("/bad")
    async def bad(request: Request) -> None:
        raise HTTPBadRequest("bad input")

    @app.post("/json")
    async def body(request: Request) -> object:
        return await request.json()

    return app


@pytest.mark.parametrize(
    ("first", "status"),
    [
        (get("/nowhere"), 404),
        (get("/bad"), 400),
        (b"POST /json HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: 5\r\n\r\n{nope", 400),
        (get("/raise"), 500),
        (b"DELETE /ok HTTP/1.1\r\nHost: t\r\n\r\n", 405),
    ],
    ids=["404", "400-raised", "400-json", "500", "405"],
)
async def test_connection_stays_open_after_an_error(aiorest_client, keepalive_app, error_log, first, status):
    client = await aiorest_client(keepalive_app)
    error, ok = await fetch(client.port, first + get("/ok"), count=2)
    assert error.status == status
    assert error.header("connection") is None
    assert ok.status == 200
    assert json.loads(ok.body) == {"ok": True}


async def test_connection_stays_open_after_an_error_when_requests_are_sent_one_by_one(aiorest_client, error_log):
    client = await aiorest_client(raising(RuntimeError("boom")))
    reader, writer = await asyncio.open_connection("127.0.0.1", client.port)
    try:
        writer.write(get("/raise"))
        error = await read_response(reader)
        writer.write(get("/ok"))
        ok = await read_response(reader)
    finally:
        writer.close()
    assert (error.status, ok.status) == (500, 200)

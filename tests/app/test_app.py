"""The App: middleware, startup and shutdown hooks, lifespan, state and context isolation."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import logging

import pytest

from aiorest import (
    App,
    HTTPError,
    HTTPMethodNotAllowed,
    HTTPNotFound,
    HTTPUnauthorized,
    JSONResponse,
    Request,
    Response,
)
from aiorest.server.stepping import INLINE, stepping
from aiorest.testing import TestClient
from tests.rawhttp import exchange


def hello_app(**options: object) -> App:
    app = App(**options)  # type: ignore[arg-type]

    @app.get("/hello")
    async def hello(request: Request) -> dict[str, str]:
        return {"hello": "world"}

    return app


def this_task() -> asyncio.Task:
    """The Task the calling handler runs in (handlers always run in one)."""
    task = asyncio.current_task()
    assert task is not None
    return task


# -- middleware -----------------------------------------------------------------------------------


async def test_middleware_runs_outermost_first(aiorest_client):
    events: list[str] = []

    def tracing(label: str):
        async def middleware(request: Request, handler):
            events.append(f"{label} in")
            response = await handler(request)
            events.append(f"{label} out")
            return response

        return middleware

    app = App(middleware=[tracing("outer"), tracing("middle")])
    app.add_middleware(tracing("inner"))

    @app.get("/")
    async def handler(request: Request) -> dict[str, bool]:
        events.append("handler")
        return {"ok": True}

    client = await aiorest_client(app)
    async with client.get("/") as response:
        assert await response.json() == {"ok": True}
    assert events == ["outer in", "middle in", "inner in", "handler", "inner out", "middle out", "outer out"]


async def test_a_middleware_that_is_a_plain_function_may_return_any_awaitable(aiorest_client):
    class Later:
        """An awaitable that is neither a coroutine nor a Future."""

        def __init__(self, awaitable):
            self.awaitable = awaitable

        def __await__(self):
            response = yield from self.awaitable.__await__()
            response.headers["X-Later"] = "yes"
            return response

    def plain(request: Request, handler):
        return Later(handler(request))

    app = hello_app(middleware=[plain, lambda request, handler: handler(request)])
    client = await aiorest_client(app)
    async with client.get("/hello") as response:
        assert response.status == 200
        assert response.headers["X-Later"] == "yes"
        assert await response.json() == {"hello": "world"}


async def test_middleware_sees_a_response_and_can_change_its_headers(aiorest_client):
    seen: list[str] = []

    async def stamp(request: Request, handler):
        response = await handler(request)
        seen.append(type(response).__name__)
        response.headers["X-Stamp"] = "yes"
        response.headers.add("X-Status", str(response.status))
        return response

    client = await aiorest_client(hello_app(middleware=[stamp]))
    async with client.get("/hello") as response:
        assert response.headers["X-Stamp"] == "yes"
        assert response.headers["X-Status"] == "200"
        assert await response.json() == {"hello": "world"}
    assert seen == ["JSONResponse"]


async def test_middleware_can_answer_without_calling_the_handler(aiorest_client):
    calls: list[str] = []

    async def require_token(request: Request, handler):
        if request.headers.get("authorization") != "Bearer good":
            return JSONResponse({"denied": True}, status=401)
        return await handler(request)

    app = App(middleware=[require_token])

    @app.get("/secret")
    async def secret(request: Request) -> dict[str, str]:
        calls.append("handler")
        return {"secret": "42"}

    client = await aiorest_client(app)
    async with client.get("/secret") as response:
        assert response.status == 401
        assert await response.json() == {"denied": True}
    assert calls == []
    async with client.get("/secret", headers={"Authorization": "Bearer good"}) as response:
        assert await response.json() == {"secret": "42"}
    assert calls == ["handler"]


async def test_middleware_raising_an_http_error_is_the_response(aiorest_client):
    async def deny(request: Request, handler):
        raise HTTPUnauthorized("token required", headers={"WWW-Authenticate": "Bearer"})

    client = await aiorest_client(hello_app(middleware=[deny]))
    async with client.get("/hello") as response:
        assert response.status == 401
        assert response.headers["WWW-Authenticate"] == "Bearer"
        assert (await response.json())["error"]["message"] == "token required"


async def test_middleware_sees_routing_errors_as_exceptions(aiorest_client):
    caught: list[tuple[str, list[str] | None]] = []

    async def catch(request: Request, handler):
        try:
            return await handler(request)
        except HTTPNotFound:
            caught.append(("404", None))
            return JSONResponse({"custom": "not found", "path": request.path}, status=404)
        except HTTPMethodNotAllowed as exc:
            caught.append(("405", exc.allowed))
            return Response("nope", status=405, headers={"Allow": ", ".join(exc.allowed)})

    client = await aiorest_client(hello_app(middleware=[catch]))
    async with client.get("/missing") as response:
        assert response.status == 404
        assert await response.json() == {"custom": "not found", "path": "/missing"}
    async with client.delete("/hello") as response:
        assert response.status == 405
        assert response.headers["Allow"] == "GET, HEAD, OPTIONS"
        assert await response.text() == "nope"
    assert caught == [("404", None), ("405", ["GET", "HEAD", "OPTIONS"])]


async def test_routing_errors_not_caught_by_middleware_still_answer_404(aiorest_client):
    async def passthrough(request: Request, handler):
        return await handler(request)

    client = await aiorest_client(hello_app(middleware=[passthrough]))
    async with client.get("/missing") as response:
        assert response.status == 404
        assert (await response.json())["error"]["status"] == 404


async def test_middleware_can_add_headers_to_error_responses_through_the_exception(aiorest_client):
    async def tag_errors(request: Request, handler):
        try:
            return await handler(request)
        except HTTPError as exc:
            exc.headers["X-Error-Tag"] = "tagged"
            raise

    client = await aiorest_client(hello_app(middleware=[tag_errors]))
    async with client.get("/missing") as response:
        assert response.status == 404
        assert response.headers["X-Error-Tag"] == "tagged"


async def test_automatic_options_answer_passes_through_middleware(aiorest_client):
    async def stamp(request: Request, handler):
        response = await handler(request)
        response.headers["X-Seen"] = request.method
        return response

    client = await aiorest_client(hello_app(middleware=[stamp]))
    async with client.options("/hello") as response:
        assert response.status == 204
        assert response.headers["Allow"] == "GET, HEAD, OPTIONS"
        assert response.headers["X-Seen"] == "OPTIONS"


async def test_middleware_chain_is_built_once_not_per_request(aiorest_client):
    next_links: dict[str, list[object]] = {}

    async def record(request: Request, handler):
        next_links.setdefault(request.path, []).append(handler)
        return await handler(request)

    async def inner(request: Request, handler):
        return await handler(request)

    app = hello_app(middleware=[record, inner])

    @app.get("/other")
    async def other(request: Request) -> None:
        return None

    client = await aiorest_client(app)
    for _ in range(3):
        for path in ("/hello", "/other"):
            async with client.get(path) as response:
                assert response.status in (200, 204)
    assert len(next_links["/hello"]) == len(next_links["/other"]) == 3
    assert all(link is next_links["/hello"][0] for link in next_links["/hello"])
    assert all(link is next_links["/other"][0] for link in next_links["/other"])
    assert next_links["/hello"][0] is not next_links["/other"][0]


async def test_adding_middleware_after_startup_is_refused():
    app = hello_app()
    async with TestClient(app):
        with pytest.raises(RuntimeError, match="started"):
            app.add_middleware(lambda request, handler: handler(request))


async def test_middleware_sees_request_state_set_for_the_handler(aiorest_client):
    async def authenticate(request: Request, handler):
        request.state.user = request.headers.get("x-user", "anonymous")
        return await handler(request)

    app = App(middleware=[authenticate])

    @app.get("/whoami")
    async def whoami(request: Request) -> dict[str, str]:
        return {"user": request.state.user}

    client = await aiorest_client(app)
    async with client.get("/whoami", headers={"X-User": "ada"}) as response:
        assert await response.json() == {"user": "ada"}
    async with client.get("/whoami") as response:
        assert await response.json() == {"user": "anonymous"}


# -- startup, shutdown, lifespan ---------------------------------------------------------------------


def lifecycle_app(events: list[str], *, fail_startup: bool = False) -> App:
    @contextlib.asynccontextmanager
    async def lifespan(app: App):
        events.append("lifespan enter")
        try:
            yield
        finally:
            events.append("lifespan exit")

    def hook(label: str):
        async def run(app: App) -> None:
            events.append(label)
            if fail_startup and label == "startup 2":
                raise RuntimeError("cannot connect")

        return run

    app = App(on_startup=[hook("startup 1")], on_shutdown=[hook("shutdown 1")], lifespan=lifespan)
    app.on_startup.append(hook("startup 2"))
    app.on_shutdown.append(hook("shutdown 2"))

    @app.get("/events")
    async def list_events(request: Request) -> list[str]:
        return list(events)

    return app


async def test_lifespan_wraps_hooks_and_shutdown_runs_in_reverse():
    events: list[str] = []
    async with TestClient(lifecycle_app(events)) as client:
        async with client.get("/events") as response:
            assert await response.json() == ["lifespan enter", "startup 1", "startup 2"]
    assert events == ["lifespan enter", "startup 1", "startup 2", "shutdown 2", "shutdown 1", "lifespan exit"]


async def test_failing_startup_hook_fails_start_and_exits_the_lifespan():
    events: list[str] = []
    client = TestClient(lifecycle_app(events, fail_startup=True))
    with pytest.raises(RuntimeError, match="cannot connect"):
        await client.start()
    assert events == ["lifespan enter", "startup 1", "startup 2", "lifespan exit"]
    with pytest.raises(RuntimeError, match="not started"):
        client.session  # noqa: B018
    await client.close()
    assert events[-1] == "lifespan exit" and "shutdown 1" not in events


async def test_failing_lifespan_fails_start_without_running_hooks():
    events: list[str] = []

    @contextlib.asynccontextmanager
    async def broken(app: App):
        raise OSError("no database")
        yield

    async def startup(app: App) -> None:
        events.append("startup")

    client = TestClient(App(lifespan=broken, on_startup=[startup]))
    with pytest.raises(OSError, match="no database"):
        await client.start()
    assert events == []


async def test_failing_shutdown_hook_is_logged_and_others_still_run(caplog):
    caplog.set_level(logging.ERROR, logger="aiorest.error")
    events: list[str] = []

    async def first(app: App) -> None:
        events.append("first")

    async def broken(app: App) -> None:
        raise RuntimeError("close failed")

    async with TestClient(App(on_shutdown=[first, broken])):
        pass
    assert events == ["first"]
    assert any(isinstance(r.exc_info[1], RuntimeError) for r in caplog.records if r.exc_info)


async def test_an_app_runs_once_at_a_time_and_can_restart():
    events: list[str] = []
    app = lifecycle_app(events)
    async with TestClient(app):
        with pytest.raises(RuntimeError, match="already started"):
            await app.startup()
    async with TestClient(app) as client:
        async with client.get("/events") as response:
            assert response.status == 200
    assert events.count("lifespan enter") == events.count("lifespan exit") == 2
    assert events.count("startup 1") == events.count("shutdown 1") == 2


# -- state -------------------------------------------------------------------------------------------


async def test_app_state_is_shared_by_requests_and_set_by_startup(aiorest_client):
    async def open_pool(app: App) -> None:
        app.state.pool = {"hits": 0}

    app = App(on_startup=[open_pool])

    @app.get("/hit")
    async def hit(request: Request) -> dict[str, int]:
        request.app.state.pool["hits"] += 1
        return {"hits": request.app.state["pool"]["hits"]}

    client = await aiorest_client(app)
    for expected in (1, 2, 3):
        async with client.get("/hit") as response:
            assert await response.json() == {"hits": expected}


def test_app_state_reading_an_unset_name_is_attribute_error():
    app = App()
    with pytest.raises(AttributeError, match="'pool'"):
        app.state.pool  # noqa: B018
    app.state.pool = 1
    assert app.state.get("pool") == 1 and "pool" in app.state and app.state["pool"] == 1


# -- context variables ----------------------------------------------------------------------------------


REQUEST_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)


async def test_context_variables_do_not_leak_between_requests(aiorest_client):
    app = App()

    @app.get("/set-now/{value}")
    async def set_now(request: Request) -> dict[str, object]:
        before = REQUEST_ID.get()
        REQUEST_ID.set(request.path_params["value"])
        return {"before": before}

    @app.get("/set-later/{value}")
    async def set_later(request: Request) -> dict[str, object]:
        before = REQUEST_ID.get()
        await asyncio.sleep(0)
        REQUEST_ID.set(request.path_params["value"])
        return {"before": before}

    client = await aiorest_client(app)
    for path in ("/set-now/a", "/set-later/b", "/set-now/c", "/set-later/d"):
        async with client.get(path) as response:  # the same connection every time
            assert await response.json() == {"before": None}
    assert REQUEST_ID.get() is None


async def test_concurrent_requests_each_see_their_own_context(aiorest_client):
    app = App()

    @app.get("/echo/{value}")
    async def echo(request: Request) -> dict[str, object]:
        REQUEST_ID.set(request.path_params["value"])
        await asyncio.sleep(0.01)
        return {"value": REQUEST_ID.get()}

    client = await aiorest_client(app)

    async def one(value: str) -> object:
        async with client.get(f"/echo/{value}") as response:
            return (await response.json())["value"]

    values = [str(i) for i in range(20)]
    assert await asyncio.gather(*(one(v) for v in values)) == values


async def test_middleware_context_variable_reaches_the_handler_only(aiorest_client):
    async def tag(request: Request, handler):
        REQUEST_ID.set(request.headers.get("x-request-id"))
        return await handler(request)

    app = App(middleware=[tag])

    @app.get("/id")
    async def current(request: Request) -> dict[str, object]:
        return {"id": REQUEST_ID.get()}

    client = await aiorest_client(app)
    async with client.get("/id", headers={"X-Request-Id": "r1"}) as response:
        assert await response.json() == {"id": "r1"}
    async with client.get("/id") as response:
        assert await response.json() == {"id": None}


# -- handlers are ordinary asyncio code --------------------------------------------------------------


async def test_handler_can_start_with_asyncio_timeout(aiorest_client):
    app = App()

    @app.get("/timeout")
    async def bounded(request: Request) -> dict[str, bool]:
        async with asyncio.timeout(1):
            await asyncio.sleep(0)
        return {"ok": True}

    client = await aiorest_client(app)
    async with client.get("/timeout") as response:
        assert response.status == 200
        assert await response.json() == {"ok": True}


async def test_handler_runs_in_one_task_from_its_first_line(aiorest_client):
    app = App()

    @app.get("/task")
    async def task(request: Request) -> dict[str, bool]:
        first = asyncio.current_task()
        await asyncio.sleep(0)
        return {"has_task": first is not None, "same_task": first is asyncio.current_task()}

    client = await aiorest_client(app)
    async with client.get("/task") as response:
        assert await response.json() == {"has_task": True, "same_task": True}


async def test_middleware_can_use_a_task_group(aiorest_client):
    async def fan_out(request: Request, handler):
        async with asyncio.TaskGroup() as group:
            response = group.create_task(handler(request))
        return response.result()

    client = await aiorest_client(hello_app(middleware=[fan_out]))
    async with client.get("/hello") as response:
        assert response.status == 200
        assert await response.json() == {"hello": "world"}


async def test_a_timeout_that_expires_in_a_handler_is_a_timeout_error_and_the_next_request_is_served(aiorest_client):
    app = App()

    @app.get("/bounded/{seconds:float}")
    async def bounded(request: Request) -> dict[str, object]:
        task = this_task()
        cancelling = task.cancelling()
        try:
            async with asyncio.timeout(request.path_params["seconds"]):
                await asyncio.sleep(5)
        except TimeoutError:
            return {"timed_out": True, "cancelling_before": cancelling}
        return {"timed_out": False}

    client = await aiorest_client(app)
    for seconds in ("0.05", "0", "0.01", "0"):  # timeout(0) is already expired at its first line
        async with client.get(f"/bounded/{seconds}") as response:  # one connection throughout
            assert await response.json() == {"timed_out": True, "cancelling_before": 0}


async def test_contexts_stay_apart_when_a_pipelined_request_follows_one_that_waited(aiorest_client):
    app = App()

    @app.get("/set-later/{value}")
    async def set_later(request: Request) -> dict[str, object]:
        before = REQUEST_ID.get()
        await asyncio.sleep(0.01)
        REQUEST_ID.set(request.path_params["value"])
        return {"before": before, "after": REQUEST_ID.get()}

    client = await aiorest_client(app)
    payload = b"".join(b"GET /set-later/%d HTTP/1.1\r\nHost: t\r\n\r\n" % i for i in range(3))
    responses, closed = await exchange(client.port, payload, count=3)
    assert [json.loads(r.body) for r in responses] == [{"before": None, "after": str(i)} for i in range(3)]
    assert not closed


async def test_a_handler_cancelled_outright_closes_its_connection_and_the_server_goes_on(aiorest_client, caplog):
    app = App()

    @app.get("/cancel-now")
    async def cancel_now(request: Request) -> dict[str, bool]:
        raise asyncio.CancelledError

    @app.get("/cancel-later")
    async def cancel_later(request: Request) -> dict[str, bool]:
        await asyncio.sleep(0)
        raise asyncio.CancelledError

    @app.get("/cancel-self")
    async def cancel_self(request: Request) -> dict[str, bool]:
        task = this_task()
        task.cancel()  # takes effect at the task's next wait, which never comes
        return {"answered": True}

    client = await aiorest_client(app)
    for path in (b"/cancel-now", b"/cancel-later"):
        responses, closed = await exchange(client.port, b"GET %s HTTP/1.1\r\nHost: t\r\n\r\n" % path)
        assert responses == [] and closed
    twice = b"GET /cancel-self HTTP/1.1\r\nHost: t\r\n\r\n" * 2
    responses, closed = await exchange(client.port, twice, count=2)
    assert [json.loads(r.body) for r in responses] == [{"answered": True}] * 2
    assert not closed
    async with client.get("/cancel-self") as response:
        assert response.status == 200
    assert not [r for r in caplog.records if r.levelname == "ERROR"]


async def test_requests_on_one_connection_share_its_task_and_it_ends_with_the_connection(aiorest_client):
    app = App()

    @app.get("/task")
    async def task_id(request: Request) -> dict[str, int]:
        await asyncio.sleep(0)
        return {"task": id(asyncio.current_task())}

    client = await aiorest_client(app)
    before = len(asyncio.all_tasks())
    payload = b"GET /task HTTP/1.1\r\nHost: t\r\n\r\n" * 2
    first, _ = await exchange(client.port, payload, count=2)
    second, _ = await exchange(client.port, payload, count=2)
    tasks = [json.loads(r.body)["task"] for r in first + second]
    if stepping() == INLINE:  # the Task path (AIOREST_HANDLER_STEPPING=task) gives each request its own
        assert tasks[0] == tasks[1] and tasks[2] == tasks[3]
    for _ in range(50):  # the server sees each close a moment after the client
        if len(asyncio.all_tasks()) == before:
            break
        await asyncio.sleep(0.01)
    assert len(asyncio.all_tasks()) == before


async def test_a_cancel_a_finished_handler_left_behind_does_not_reach_the_next_request(aiorest_client):
    app = App()

    @app.get("/cancel-and-answer")
    async def cancel_and_answer(request: Request) -> dict[str, int]:
        task = this_task()
        task.cancel()  # then answers without waiting: the cancel ends with this request
        return {"cancelling": task.cancelling()}

    @app.get("/swallow")
    async def swallow(request: Request) -> dict[str, bool]:
        task = this_task()
        task.cancel()
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:  # caught and answered, without uncancel()
            return {"caught": True}
        return {"caught": False}

    @app.get("/waits")
    async def waits(request: Request) -> dict[str, int]:
        task = this_task()
        cancelling = task.cancelling()
        await asyncio.sleep(0.01)
        return {"cancelling": cancelling}

    client = await aiorest_client(app)
    # Pipelined, so that the next request starts while the first one's cancel is pending;
    # the first request of a connection included, when its Task has only just started.
    payload = b"".join(
        b"GET %s HTTP/1.1\r\nHost: t\r\n\r\n" % path
        for path in (b"/cancel-and-answer", b"/waits", b"/swallow", b"/waits")
    )
    responses, closed = await exchange(client.port, payload, count=4)
    assert [json.loads(r.body) for r in responses] == [
        {"cancelling": 1},
        {"cancelling": 0},
        {"caught": True},
        {"cancelling": 0},
    ]
    assert not closed

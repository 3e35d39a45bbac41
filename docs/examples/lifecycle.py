"""Middleware, a lifespan, a context, startup and shutdown hooks, app and request state."""

import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from aiorest import App, HTTPError, HTTPUnauthorized, Request, Response

Handler = Callable[[Request], Awaitable[Response]]

events: list[str] = []


async def timing(request: Request, handler: Handler) -> Response:
    started = time.perf_counter()
    try:
        response = await handler(request)
    except HTTPError as exc:
        exc.headers["X-Elapsed-Ms"] = f"{(time.perf_counter() - started) * 1000:.1f}"
        raise
    response.headers["X-Elapsed-Ms"] = f"{(time.perf_counter() - started) * 1000:.1f}"
    return response


async def require_token(request: Request, handler: Handler) -> Response:
    if request.path.startswith("/private/"):
        token = request.headers.get("authorization", "")
        if token != f"Bearer {request.app.state.token}":
            raise HTTPUnauthorized("missing or wrong token", headers={"WWW-Authenticate": "Bearer"})
        request.state.user = "admin"
    return await handler(request)


@contextlib.asynccontextmanager
async def lifespan(app: App) -> AsyncIterator[None]:
    events.append("lifespan enter")
    app.state.token = "s3cret"
    try:
        yield
    finally:
        events.append("lifespan exit")


@contextlib.asynccontextmanager
async def pool(app: App) -> AsyncIterator[None]:
    events.append("open pool")
    app.state.pool = ["connection"]
    try:
        yield
    finally:
        app.state.pool.clear()
        events.append("close pool")


async def warm_up(app: App) -> None:
    events.append("startup: warm up")


async def log_stats(app: App) -> None:
    events.append("shutdown: log stats")


app = App(
    middleware=[timing, require_token],
    lifespan=lifespan,
    contexts=[pool],
    on_startup=[warm_up],
    on_shutdown=[log_stats],
)


@app.get("/public/hello")
async def hello(request: Request) -> dict[str, int]:
    return {"pool_size": len(request.app.state.pool)}


@app.get("/private/report")
async def report(request: Request) -> dict[str, str]:
    return {"user": request.state.user}

"""Middleware of one route, and of a group of routes (a Router)."""

from aiorest import App, Handler, HTTPForbidden, Request, Response, Router


async def admins_only(request: Request, handler: Handler) -> Response:
    """Refuses anyone but an admin, before the handler runs."""
    if request.headers.get("X-Role") != "admin":
        raise HTTPForbidden("admins only")
    response: Response = await handler(request)
    return response


async def no_store(request: Request, handler: Handler) -> Response:
    """Asks caches not to keep the answer."""
    response: Response = await handler(request)
    response.headers["Cache-Control"] = "no-store"
    return response


admin = Router(middleware=[admins_only])  # every route of the group


@admin.get("/stats")
async def stats(request: Request) -> dict[str, int]:
    return {"users": 3}


app = App()
app.include(admin, "/admin", name="admin")


@app.get("/me", middleware=[no_store])  # this route only
async def me(request: Request) -> dict[str, str]:
    return {"name": "Ada"}


@app.get("/public")
async def public(request: Request) -> dict[str, str]:
    return {"hello": "world"}

"""Routes declared as a list instead of with decorators."""

from aiorest import App, Request, Route


async def list_users(request: Request) -> list[str]:
    return ["ada", "grace"]


async def get_user(request: Request) -> dict[str, str]:
    return {"name": request.path_params["name"]}


async def replace_user(request: Request) -> dict[str, str]:
    return {"name": request.path_params["name"], "replaced": "yes"}


routes = [
    Route("GET", "/users", list_users),
    Route("GET", "/users/{name}", get_user, name="user"),
    Route("PUT", "/users/{name}", replace_user),
]

app = App(routes)

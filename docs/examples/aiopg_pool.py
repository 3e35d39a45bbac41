"""An aiohttp.web + aiopg service moved to aiorest: its aiopg pool stays, and aiorest.db runs on it."""

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiopg

from aiorest import App, Request
from aiorest.db import Database

app = App()


@asynccontextmanager
async def aiopg_pool(app: App) -> AsyncIterator[None]:
    # The service's pool, made as it was under aiohttp.web (there, a cleanup context).
    async with aiopg.create_pool(os.environ["DATABASE_URL"], maxsize=8) as pool:
        app.state.pool = pool
        yield


app.contexts.append(aiopg_pool)  # before db.setup(app): the contexts open in order
db = Database.from_aiopg(lambda: app.state.pool)  # borrows from that pool, statement by statement
db.setup(app)  # /readyz, the pool metrics and app.state.db, as for any Database


async def create_table(app: App) -> None:
    await db.execute("CREATE TABLE IF NOT EXISTS pages (name text PRIMARY KEY, visits int NOT NULL DEFAULT 0)")


app.on_startup.append(create_table)


@app.post("/pages/{name}")
async def add_page(request: Request) -> dict[str, object]:
    # New code: aiorest.db's helpers; rows are dicts, a second insert is a 409.
    return await db.fetchone(
        "INSERT INTO pages (name) VALUES (%s) RETURNING name, visits", (request.path_params["name"],)
    )


@app.post("/pages/{name}/visit")
async def visit(request: Request) -> dict[str, object]:
    async with db.transaction():
        await db.execute("UPDATE pages SET visits = visits + 1 WHERE name = %s", (request.path_params["name"],))
        return await db.fetchone("SELECT name, visits FROM pages WHERE name = %s", (request.path_params["name"],))


@app.get("/pages")
async def pages(request: Request) -> list[dict[str, object]]:
    # Old code, unchanged: the service's own aiopg pool, beside aiorest.db.
    async with request.app.state.pool.acquire() as conn, conn.cursor() as cursor:
        await cursor.execute("SELECT name, visits FROM pages ORDER BY name")
        return [{"name": name, "visits": visits} for name, visits in await cursor.fetchall()]

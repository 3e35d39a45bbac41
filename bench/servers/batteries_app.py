"""The routes of bench/batteries.py: each battery's route beside the same route without it, in one process.

``/small`` (about 100 B of JSON) and ``/big`` (about 10 KB) plain; under ``/gz``
with ``Compression``; under ``/cors`` with ``CORS`` for one allowed origin.
``/me`` answers a user's name; under ``/session/cookie``, ``/session/redis`` and
``/session/pg`` it reads the name from the session (``POST .../login`` makes
one), kept in a signed cookie, in Redis (``--redis``) or in PostgreSQL
(``--dsn``; aiorest's session table is migrated at startup).
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from aiorest import (
    CORS,
    App,
    Compression,
    CookieSessionStore,
    PostgresSessionStore,
    RedisSessionStore,
    Request,
    Router,
    SessionMiddleware,
)
from aiorest.db import Database, migrate

SMALL = {"id": 1, "title": "a note", "done": False, "tags": ["x", "y"], "body": "b" * 40}  # about 100 B
BIG = {"items": [{"id": i, "title": f"note {i}", "done": i % 2 == 0} for i in range(250)]}  # about 10 KB
ORIGIN = "https://app.example.org"

app = App()
gz = Router(middleware=[Compression(brotli=False)])
cors = Router(middleware=[CORS([ORIGIN], allow_credentials=True)])


@app.get("/small")
@gz.get("/small")
@cors.get("/small")
async def small(request: Request) -> dict[str, object]:
    return SMALL


@app.get("/big")
@gz.get("/big")
async def big(request: Request) -> dict[str, object]:
    return BIG


app.include(gz, "/gz")
app.include(cors, "/cors")

USER = {"user": "ada", "roles": ["reader"]}


@app.get("/me")
async def me(request: Request) -> dict[str, Any]:
    return USER


async def session_me(request: Request) -> dict[str, Any]:
    return {"user": request.session["user"], "roles": request.session["roles"]}


async def session_login(request: Request) -> dict[str, Any]:
    request.session.rotate()
    request.session.update(USER)
    return USER


def add_session_routes(name: str, store: Any) -> None:
    sessions = Router(middleware=[SessionMiddleware(store, cookie_name=f"s_{name}")])
    sessions.add_route("GET", "/me", session_me)
    sessions.add_route("POST", "/login", session_login)
    app.include(sessions, f"/session/{name}")


add_session_routes("cookie", CookieSessionStore(secrets=["bench-secret-" + "x" * 32]))
if os.environ.get("BATTERIES_REDIS"):
    add_session_routes("redis", RedisSessionStore(os.environ["BATTERIES_REDIS"], prefix="aiorest-bench:"))
if os.environ.get("BATTERIES_DSN"):
    database = Database(os.environ["BATTERIES_DSN"], min_size=2, max_size=8)
    database.setup(app)

    async def sessions_table(app: App) -> None:
        await migrate(database, "aiorest:sessions")

    app.on_startup.append(sessions_table)
    add_session_routes("pg", PostgresSessionStore(database))

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    app.run(host="127.0.0.1", port=parser.parse_args().port, log_level="warning")

"""The contender: aiohttp.web on uvloop, written the usual way, with an aiopg pool.

Same endpoints as aiorest's: /json and /plaintext, and with DATABASE_URL set the
TechEmpower database endpoints, on an aiopg.Pool of the same size as aiorest's.
"""

from __future__ import annotations

import argparse
import os
import random
from html import escape

import uvloop
from aiohttp import web

POOL_SIZE = int(os.environ.get("BENCH_POOL_SIZE", "32"))


async def json_handler(request: web.Request) -> web.Response:
    return web.json_response({"message": "Hello, World!"})


async def plaintext(request: web.Request) -> web.Response:
    return web.Response(body=b"Hello, World!", content_type="text/plain")


def count(request: web.Request) -> int:
    try:
        return min(max(int(request.query.get("queries", "1")), 1), 500)
    except ValueError:
        return 1


async def db(request: web.Request) -> web.Response:
    async with request.app["pool"].acquire() as conn:
        async with conn.cursor() as cur:
            await cur.execute("SELECT id, randomnumber FROM world WHERE id = %s", (random.randint(1, 10000),))
            row = await cur.fetchone()
    return web.json_response({"id": row[0], "randomNumber": row[1]})


async def queries(request: web.Request) -> web.Response:
    worlds = []
    async with request.app["pool"].acquire() as conn:
        async with conn.cursor() as cur:
            for _ in range(count(request)):
                await cur.execute("SELECT id, randomnumber FROM world WHERE id = %s", (random.randint(1, 10000),))
                row = await cur.fetchone()
                worlds.append({"id": row[0], "randomNumber": row[1]})
    return web.json_response(worlds)


async def fortunes(request: web.Request) -> web.Response:
    async with request.app["pool"].acquire() as conn:
        async with conn.cursor() as cur:
            await cur.execute("SELECT id, message FROM fortune")
            rows = list(await cur.fetchall())
    rows.append((0, "Additional fortune added at request time."))
    rows.sort(key=lambda row: row[1])
    cells = "".join(f"<tr><td>{i}</td><td>{escape(message)}</td></tr>" for i, message in rows)
    html = (
        "<!DOCTYPE html><html><head><title>Fortunes</title></head><body><table>"
        f"<tr><th>id</th><th>message</th></tr>{cells}</table></body></html>"
    )
    return web.Response(text=html, content_type="text/html")


async def updates(request: web.Request) -> web.Response:
    worlds = []
    new_numbers: dict[int, int] = {}
    async with request.app["pool"].acquire() as conn:
        async with conn.cursor() as cur:
            for _ in range(count(request)):
                await cur.execute("SELECT id, randomnumber FROM world WHERE id = %s", (random.randint(1, 10000),))
                row = await cur.fetchone()
                number = new_numbers.setdefault(row[0], random.randint(1, 10000))
                worlds.append({"id": row[0], "randomNumber": number})
            ordered = sorted(new_numbers.items())
            values = ", ".join(["(%s::int, %s::int)"] * len(ordered))
            await cur.execute(
                f"UPDATE world SET randomnumber = v.r FROM (VALUES {values}) AS v(id, r) WHERE world.id = v.id",
                [value for pair in ordered for value in pair],
            )
    return web.json_response(worlds)


async def open_pool(app: web.Application) -> None:
    import aiopg

    app["pool"] = await aiopg.create_pool(os.environ["DATABASE_URL"], minsize=POOL_SIZE, maxsize=POOL_SIZE)


async def close_pool(app: web.Application) -> None:
    app["pool"].close()
    await app["pool"].wait_closed()


def make_app() -> web.Application:
    app = web.Application()
    app.router.add_get("/json", json_handler)
    app.router.add_get("/plaintext", plaintext)
    if os.environ.get("DATABASE_URL"):
        app.on_startup.append(open_pool)
        app.on_cleanup.append(close_pool)
        for path, handler in (("/db", db), ("/queries", queries), ("/fortunes", fortunes), ("/updates", updates)):
            app.router.add_get(path, handler)
    return app


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    port = parser.parse_args().port
    uvloop.install()
    web.run_app(make_app(), host="127.0.0.1", port=port, access_log=None, print=None)

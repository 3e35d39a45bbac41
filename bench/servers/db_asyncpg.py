"""The floor for the database endpoints: a bare asyncpg loop, no framework.

The least a Python server does to answer TechEmpower's database tests: a uvloop
``asyncio.Protocol`` that reads the request line of each head and nothing else
(keep-alive, one request at a time per connection, as wrk sends them; no body),
writes canned headers with a Date refreshed every second, and runs each request
as a Task that asks an ``asyncpg`` pool (``BENCH_POOL_SIZE`` connections, 32 by
default, opened in full). asyncpg prepares every statement once per connection
and keeps it in its cache. The SQL is the example app's (example_app/queries.py),
with asyncpg's ``$n`` placeholders, and the rows go out through ujson, aiorest's
default codec, so the comparison is the framework's cost and not another way of
asking PostgreSQL or writing JSON.

    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/hello_world python bench/servers/db_asyncpg.py --port 8080

asyncpg's pool, as shipped, sends a reset (``SELECT pg_advisory_unlock_all();
CLOSE ALL; UNLISTEN *; RESET ALL;``) each time a connection goes back to it: a
second round trip for every request. ``--no-reset`` leaves it out (these handlers
change no session state), the least a Python server on asyncpg can do.

Routes: /db, /queries?queries=N, /fortunes, /updates?queries=N (TFB's rules,
shared/TFB.md) and /ready. Anything else is a 404.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import socket
import sys
from collections.abc import Awaitable, Callable
from email.utils import formatdate
from html import escape
from operator import itemgetter
from typing import cast

import asyncpg  # type: ignore[import-untyped]
import ujson
import uvloop

POOL_SIZE = int(os.environ.get("BENCH_POOL_SIZE", "32"))
SELECT_WORLD = "SELECT id, randomnumber FROM world WHERE id = $1"
SELECT_FORTUNES = "SELECT id, message FROM fortune"
JSON = b"application/json"
HTML = b"text/html; charset=utf-8"
FORTUNES_HEAD = (
    "<!DOCTYPE html><html><head><title>Fortunes</title></head><body><table><tr><th>id</th><th>message</th></tr>"
)
FORTUNES_TAIL = "</table></body></html>"
NOT_FOUND = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"
ERROR = b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n"
by_message = itemgetter(1)
date = b""  # the Date header's value, refreshed every second


def refresh_date(loop: asyncio.AbstractEventLoop) -> None:
    global date
    date = formatdate(usegmt=True).encode()
    loop.call_later(1.0, refresh_date, loop)


def response(content_type: bytes, body: bytes) -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\nServer: bare\r\nDate: %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n"
        % (date, content_type, len(body))
        + body
    )


def query_count(query: bytes) -> int:
    """``queries``: missing, empty, 0 or not a number → 1; above 500 → 500 (example_app's rule)."""
    for pair in query.split(b"&"):
        name, _, value = pair.partition(b"=")
        if name == b"queries":
            if not (value.isascii() and value.isdigit()):
                return 1
            digits = value.lstrip(b"0")
            return 500 if len(digits) > 3 else min(max(int(digits or b"0"), 1), 500)
    return 1


def random_id() -> int:
    return random.randint(1, 10000)


async def db(pool: asyncpg.Pool, query: bytes) -> bytes:
    row = await pool.fetchrow(SELECT_WORLD, random_id())
    return response(JSON, ujson.dumps({"id": row[0], "randomNumber": row[1]}).encode())


async def queries(pool: asyncpg.Pool, query: bytes) -> bytes:
    worlds = []
    async with pool.acquire() as conn:
        for _ in range(query_count(query)):
            row = await conn.fetchrow(SELECT_WORLD, random_id())
            worlds.append({"id": row[0], "randomNumber": row[1]})
    return response(JSON, ujson.dumps(worlds).encode())


async def fortunes(pool: asyncpg.Pool, query: bytes) -> bytes:
    rows = [tuple(row) for row in await pool.fetch(SELECT_FORTUNES)]
    rows.append((0, "Additional fortune added at request time."))
    rows.sort(key=by_message)
    cells = "".join([f"<tr><td>{id_}</td><td>{escape(message)}</td></tr>" for id_, message in rows])
    return response(HTML, (FORTUNES_HEAD + cells + FORTUNES_TAIL).encode())


async def updates(pool: asyncpg.Pool, query: bytes) -> bytes:
    worlds = []
    new_numbers: dict[int, int] = {}  # a repeated id gets one new number
    async with pool.acquire() as conn:
        for _ in range(query_count(query)):
            row = await conn.fetchrow(SELECT_WORLD, random_id())
            number = new_numbers.setdefault(row[0], random_id())
            worlds.append({"id": row[0], "randomNumber": number})
        # one bulk UPDATE, rows in id order (no deadlocks), as the example app's update_worlds writes it
        ordered = sorted(new_numbers.items())
        values = ", ".join(f"(${2 * i + 1}::int, ${2 * i + 2}::int)" for i in range(len(ordered)))
        sql = f"UPDATE world SET randomnumber = v.r FROM (VALUES {values}) AS v(id, r) WHERE world.id = v.id"
        await conn.execute(sql, *[value for pair in ordered for value in pair])
    return response(JSON, ujson.dumps(worlds).encode())


Handler = Callable[[asyncpg.Pool, bytes], Awaitable[bytes]]
ROUTES: dict[bytes, Handler] = {b"/db": db, b"/queries": queries, b"/fortunes": fortunes, b"/updates": updates}


class Bare(asyncio.Protocol):
    """One connection: heads are read in order, and each is answered before the next is looked at."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool
        self.buffer = b""
        self.busy = False
        self.close_after = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self.buffer = self.buffer + data if self.buffer else data
        if not self.busy:
            self.next_request()

    def next_request(self) -> None:
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            return
        head, self.buffer = self.buffer[:end], self.buffer[end + 4 :]
        line, _, headers = head.partition(b"\r\n")
        target = line.split(b" ", 2)[1] if line.count(b" ") >= 2 else b""
        path, _, query = target.partition(b"?")
        self.close_after = b"connection: close" in headers.lower()
        handler = ROUTES.get(path)
        if handler is None:
            self.answer(response(b"text/plain", b"ready") if path == b"/ready" else NOT_FOUND)
            return
        self.busy = True
        asyncio.get_running_loop().create_task(self.run(handler, query))

    async def run(self, handler: Handler, query: bytes) -> None:
        try:
            answer = await handler(self.pool, query)
        except Exception as exc:  # noqa: BLE001 - a floor server: say what failed, answer 500, go on
            print(f"{type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            answer = ERROR
        self.busy = False
        self.answer(answer)

    def answer(self, data: bytes) -> None:
        if self.transport.is_closing():
            return
        self.transport.write(data)
        if self.close_after:
            self.transport.close()
        elif self.buffer:
            self.next_request()


class NoReset(asyncpg.Connection):  # type: ignore[misc]
    """A connection the pool hands back without a reset query (an open transaction is still rolled back)."""

    def get_reset_query(self) -> str:
        return ""


async def main(port: int, reset: bool) -> None:
    loop = asyncio.get_running_loop()
    refresh_date(loop)
    dsn = os.environ["DATABASE_URL"]
    connection_class = asyncpg.Connection if reset else NoReset
    pool = await asyncpg.create_pool(dsn, min_size=POOL_SIZE, max_size=POOL_SIZE, connection_class=connection_class)
    server = await loop.create_server(lambda: Bare(pool), "127.0.0.1", port, backlog=2048)
    stopped = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stopped.set)
    loop.add_signal_handler(signal.SIGINT, stopped.set)
    await stopped.wait()
    server.close()
    try:
        await asyncio.wait_for(pool.close(), 5)
    except TimeoutError:
        pool.terminate()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--no-reset", action="store_true", help="no reset query when a connection is released")
    args = parser.parse_args()
    uvloop.run(main(args.port, not args.no_reset))

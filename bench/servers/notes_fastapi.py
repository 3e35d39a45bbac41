"""The FastAPI contender of bench/notes.py: example_app's GET /notes as a FastAPI user writes it.

An asyncpg pool, pydantic models with the fields and JSON shape of example_app's
``NotePage`` (``items``, ``next``), the bearer token looked up by its SHA-256 in
example_app's ``api_tokens`` table through a ``Depends`` on FastAPI's ``HTTPBearer``,
the same page semantics (``limit`` 1..100, the ``after`` cursor, ``done`` and ``q``
filters, one row more than the page to tell whether a next one exists). uvicorn
with httptools and uvloop, one process, access log off. ``DATABASE_URL`` names the
database, ``BENCH_POOL_SIZE`` the pool's size (opened in full at start).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated
from urllib.parse import quote

import asyncpg
import uvicorn
from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel

MAX_LIMIT = 100
MAX_ID = 2**63 - 1


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    size = int(os.environ.get("BENCH_POOL_SIZE", "32"))
    app.state.pool = await asyncpg.create_pool(os.environ["DATABASE_URL"], min_size=size, max_size=size)
    yield
    await app.state.pool.close()


app = FastAPI(lifespan=lifespan)
bearer = HTTPBearer()


class Note(BaseModel):
    id: int
    title: str
    body: str
    done: bool
    version: int
    created_at: datetime.datetime
    updated_at: datetime.datetime


class NotePage(BaseModel):
    items: list[Note]
    next: str | None


async def get_pool(request: Request) -> asyncpg.Pool:
    pool: asyncpg.Pool = request.app.state.pool
    return pool


Pool = Annotated[asyncpg.Pool, Depends(get_pool)]


async def current_user_id(pool: Pool, credentials: Annotated[HTTPAuthorizationCredentials, Depends(bearer)]) -> int:
    token_hash = hashlib.sha256(credentials.credentials.encode()).hexdigest()
    user_id = await pool.fetchval(
        "SELECT users.id FROM api_tokens JOIN users ON users.id = api_tokens.user_id"
        " WHERE token_hash = $1 AND expires_at > now()",
        token_hash,
    )
    if user_id is None:
        raise HTTPException(401, "not logged in", headers={"WWW-Authenticate": "Bearer"})
    return int(user_id)


@app.get("/notes", response_model=NotePage)
async def list_notes(
    pool: Pool,
    user_id: Annotated[int, Depends(current_user_id)],
    limit: Annotated[int, Query(ge=1, le=MAX_ID)] = 20,
    after: Annotated[int, Query(ge=0, le=MAX_ID)] = 0,
    done: bool | None = None,
    q: str | None = None,
) -> NotePage:
    limit = min(limit, MAX_LIMIT)
    where, params = ["owner_id = $1", "id > $2"], [user_id, after]
    if done is not None:
        params.append(done)
        where.append(f"done = ${len(params)}")
    if q:
        params.append("%" + q.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%")
        where.append(f"title ILIKE ${len(params)}")
    params.append(limit + 1)
    rows = await pool.fetch(
        "SELECT id, title, body, done, version, created_at, updated_at FROM notes"
        f" WHERE {' AND '.join(where)} ORDER BY id LIMIT ${len(params)}",
        *params,
    )
    more = len(rows) > limit
    rows = rows[:limit]
    next_url = None
    if more:
        next_url = f"{app.url_path_for('list_notes')}?after={rows[-1]['id']}&limit={limit}"
        if done is not None:
            next_url += f"&done={'true' if done else 'false'}"
        if q:
            next_url += f"&q={quote(q)}"
    return NotePage(items=[Note(**dict(row)) for row in rows], next=next_url)


@app.get("/ready")
async def ready() -> dict[str, bool]:
    return {"ready": True}


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    port = parser.parse_args().port
    uvicorn.run(
        app, host="127.0.0.1", port=port, loop="uvloop", http="httptools", log_level="warning", access_log=False
    )

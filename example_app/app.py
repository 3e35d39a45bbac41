"""Assembles the example app: database, migrations at startup, routes, and an index at ``/``."""

from __future__ import annotations

import html
import logging
import os
import re
from pathlib import Path

from aiorest import (
    App,
    Idempotency,
    PostgresIdempotencyStore,
    PostgresSessionStore,
    RedisSessionStore,
    Request,
    Response,
    Router,
    SessionMiddleware,
)
from aiorest.db import Database, migrate
from aiorest.middleware.sessions import SessionStore
from aiorest.security import LimitStore, PostgresLimitStore, RedisLimitStore, identity

from . import attachments, users
from .attachments import router as attachments_router
from .live import router as live_router
from .notes import router as notes_router
from .techempower import router as techempower_router

MIGRATIONS = Path(__file__).resolve().parent.parent / "migrations"
#: What the app applies at startup, in order: aiorest's sessions, rate limits and idempotency keys
#: tables, then the app's own.
MIGRATION_DIRS = ("aiorest:sessions", "aiorest:ratelimits", "aiorest:idempotency", str(MIGRATIONS))
#: The same as ``aiorest migrate`` arguments: what a tool runs to give a database the app's schema.
MIGRATE_ARGS = tuple(arg for directory in MIGRATION_DIRS for arg in ("--dir", directory))

logger = logging.getLogger("example_app")


def create_app(database: Database | None = None) -> App:
    """A new App on ``database`` (default: a pool on ``$DATABASE_URL``, see ``database_from_env``)."""
    database = database or database_from_env()
    app = App(title="aiorest example: notes", version="1.0")
    database.setup(app)

    async def apply_migrations(app: App) -> None:
        # Safe when several workers start at once: the runner takes an advisory lock.
        applied = [migration for directory in MIGRATION_DIRS for migration in await migrate(database, directory)]
        seeded = await database.fetchone(
            "SELECT (SELECT count(*) FROM world) AS worlds, (SELECT count(*) FROM fortune) AS fortunes"
        )
        assert seeded is not None
        done = ", ".join(migration.path.stem for migration in applied)
        logger.info(
            "database ready: %s; seeded with %d World rows and %d fortunes",
            f"migrations applied: {done}" if applied else "no migration pending",
            seeded["worlds"],
            seeded["fortunes"],
        )

    app.on_startup.append(apply_migrations)
    sessions, limits = session_store_from_env(database), limit_store_from_env(database)
    for store in (sessions, limits):
        if isinstance(store, (RedisSessionStore, RedisLimitStore)):
            app.on_shutdown.append(lambda app, store=store: store.close())
    if limits is not None:  # /readyz (--health) checks it; the session store is its middleware's
        app.readiness.add("limit store", limits.ping)
    users.setup(app, limits)
    attachments.setup(app)
    # The users and the notes know the caller: a session (kept in PostgreSQL or Redis) or a
    # bearer token. The TechEmpower routes stay outside, and pay for neither. A POST or PATCH
    # of a note, or an upload of an attachment, with an Idempotency-Key runs once
    # (docs/idempotency.rst): its writes and its kept answer commit in one transaction, so a
    # client may retry a write that got 502 from a host that died. Only the notes and their
    # attachments are keyed: the users' routes hand out sessions and tokens, which no store may
    # keep and no replay may hand out again.
    idempotency = Idempotency(PostgresIdempotencyStore(database), scope=user_scope)
    session_middleware = SessionMiddleware(sessions)
    app.state.session_cookie = session_middleware.cookie_name  # GET /notes reads a bearer token alone without it
    accounts = Router(middleware=[session_middleware, users.auth(database)])
    accounts.include(users.router)
    keyed = Router(middleware=[idempotency])
    keyed.include(notes_router)
    keyed.include(attachments_router)  # without the notes' compression: files are served as they are
    accounts.include(keyed)
    accounts.include(live_router)  # GET only: nothing to key
    app.include(accounts)
    app.include(techempower_router)
    app.add_openapi_routes()  # /openapi.json, /docs (Swagger UI), /redoc
    page: list[bytes] = []  # made at the first request: the OpenAPI document lists every route by then

    @app.get("/")
    async def index(request: Request) -> Response:
        """This page: the API's title, its documentation and its routes."""
        if not page:
            page.append(index_page(app))
        return Response(page[0], media_type="text/html; charset=utf-8")

    return app


async def user_scope(request: Request) -> str | None:
    """The scope of an Idempotency-Key: the caller's user id; anonymous requests (register, login) have none."""
    user = await identity(request)
    return None if user is None else str(user.id)


def index_page(app: App) -> bytes:
    """An HTML page naming the app, linking its docs and listing its routes (GET ones without parameters linked)."""
    document = app.openapi()
    title = html.escape(f"{document['info']['title']} {document['info']['version']}")
    rows = []
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            shown = html.escape(path)
            if method == "get" and "{" not in path:
                shown = f'<a href="{shown}">{shown}</a>'
            summary = _html(operation.get("summary", ""))
            rows.append(f"<tr><td>{method.upper()}</td><td>{shown}</td><td>{summary}</td></tr>")
    return (
        f"<!DOCTYPE html><html><head><meta charset=utf-8><title>{title}</title></head><body><h1>{title}</h1>"
        '<p><a href="/docs">/docs</a> (Swagger UI), <a href="/redoc">/redoc</a> (ReDoc),'
        ' <a href="/openapi.json">/openapi.json</a> (the OpenAPI document)</p>'
        f"<table><tr><th>method</th><th>path</th><th>what</th></tr>{''.join(rows)}</table></body></html>"
    ).encode()


def _html(text: str) -> str:
    """A summary, plain text with Markdown code spans (`limit`: the OpenAPI document's), as HTML."""
    return _CODE.sub(r"<code>\1</code>", html.escape(text, quote=False))


_CODE = re.compile(r"`([^`]+)`")


def session_store_from_env(database: Database) -> SessionStore:
    """Where sessions live (docs/deployment.rst): ``SESSION_STORE`` unset or ``postgres`` in
    the app's database (aiorest's ``aiorest_sessions`` table), or a ``redis://`` URL."""
    where = os.environ.get("SESSION_STORE", "postgres")
    if where.startswith(("redis://", "rediss://", "unix://")):
        return RedisSessionStore(where)
    if where not in ("postgres", "postgresql"):
        raise ValueError(f"SESSION_STORE is 'postgres' or a redis:// URL, not {where!r}")
    return PostgresSessionStore(database)


def limit_store_from_env(database: Database) -> LimitStore | None:
    """Where the rate limits count (docs/deployment.rst): ``RATE_LIMIT_STORE`` unset or
    ``memory`` in each worker's memory (a limit per process), ``postgres`` in the app's
    database (aiorest's ``aiorest_rate_limits`` table), or a ``redis://`` URL: the last two
    hold for every worker and host sharing them."""
    where = os.environ.get("RATE_LIMIT_STORE", "memory")
    if where.startswith(("redis://", "rediss://", "unix://")):
        return RedisLimitStore(where)
    if where in ("postgres", "postgresql"):
        return PostgresLimitStore(database)
    if where != "memory":
        raise ValueError(f"RATE_LIMIT_STORE is 'memory', 'postgres' or a redis:// URL, not {where!r}")
    return None


def database_from_env() -> Database:
    """The example's pool, configured by the environment (docs/deployment.rst):

    ``DATABASE_POOL_TOTAL`` connections for the whole host (default 64: with
    PostgreSQL's default max_connections of 100 that leaves a third for other
    clients), shared out between the ``--workers``; or ``DATABASE_POOL_MAX`` per
    worker instead. ``DATABASE_POOL_MIN`` per worker (default 4).
    ``DATABASE_ACQUIRE_TIMEOUT`` seconds a request may queue for a connection
    (default 10: a burst of hundreds of clients queues, it is not an error).
    ``DATABASE_POOLER=transaction`` behind PgBouncer in transaction mode
    (``session`` in session mode); ``DATABASE_PREPARE=0`` turns prepared
    statements off alone. ``DATABASE_DRIVER=aiopg`` runs the pool on aiopg's
    connections (default ``psycopg2``, aiorest's own: docs/database.rst, choosing a driver).
    ``DATABASE_LISTEN_URL``: where the live feed's LISTEN connects (default ``DATABASE_URL``;
    behind PgBouncer in transaction mode, PostgreSQL's own address: a LISTEN needs a session).
    """
    env = os.environ
    per_worker = env.get("DATABASE_POOL_MAX")
    prepare = env.get("DATABASE_PREPARE")
    return Database(
        min_size=int(env.get("DATABASE_POOL_MIN", "4")),
        max_size=int(per_worker) if per_worker else None,
        max_total=None if per_worker else int(env.get("DATABASE_POOL_TOTAL", "64")),
        acquire_timeout=float(env.get("DATABASE_ACQUIRE_TIMEOUT", "10")),
        prepare=None if prepare is None else prepare not in ("0", "false", "no", "off"),
        pooler=env.get("DATABASE_POOLER") or None,  # type: ignore[arg-type]  # Database checks the value
        driver=env.get("DATABASE_DRIVER") or "psycopg2",  # type: ignore[arg-type]  # Database checks the value
        listen_dsn=env.get("DATABASE_LISTEN_URL") or None,
    )


db = database_from_env()
app = create_app(db)

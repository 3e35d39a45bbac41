"""Assembles the example app: database, migrations at startup, routes."""

from __future__ import annotations

import os
from pathlib import Path

from aiorest import App
from aiorest.db import Database
from aiorest.migrations import migrate

from .notes import router as notes_router
from .techempower import router as techempower_router

MIGRATIONS = Path(__file__).resolve().parent.parent / "migrations"


def create_app(database: Database | None = None) -> App:
    """A new App on ``database`` (default: a pool on ``$DATABASE_URL``)."""
    database = database or Database(min_size=4, max_size=32)
    app = App()
    database.setup(app)

    async def apply_migrations(app: App) -> None:
        # Safe when several workers start at once: the runner takes an advisory lock.
        await migrate(database, MIGRATIONS)

    app.on_startup.append(apply_migrations)
    app.include(notes_router)
    app.include(techempower_router)
    return app


db = Database(
    min_size=int(os.environ.get("DATABASE_POOL_MIN", "4")),
    max_size=int(os.environ.get("DATABASE_POOL_MAX", "32")),
)
app = create_app(db)

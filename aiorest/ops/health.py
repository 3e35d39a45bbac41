"""Health probes: ``/healthz`` (alive) and ``/readyz`` (ready to serve), served by the server.

``/healthz`` answers 200 whenever the event loop runs: a process that cannot
answer it is stuck and should be restarted. ``/readyz`` answers 200 when the
worker should be sent traffic: it is not draining (``Server.stop`` has not
begun) and, if the probes were given a database (the server gives the app's,
``app.database``, set by ``Database.setup``), a ``SELECT 1`` succeeded within ``timeout`` seconds (or
every connection of the pool is busy with requests: a busy database is not a
down one, and a probe queued behind them would fail under load). That
result is kept ``cache_for`` seconds and one check at a time is run, so a storm
of probes costs PostgreSQL one query a second at most. Otherwise 503 with
``Retry-After``, in the usual JSON error shape.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..http.exceptions import HTTPServiceUnavailable
from ..routing.route import Route

if TYPE_CHECKING:
    from ..http.request import Request

__all__ = ["HealthProbes"]

logger = logging.getLogger("aiorest.server")


class HealthProbes:
    """The ``/healthz`` and ``/readyz`` routes of one server.

    ``draining``: whether the server is shutting down (``/readyz`` then answers
    503). ``database``: the ``aiorest.db.Database`` ``/readyz`` checks,
    None for none.
    """

    def __init__(
        self,
        draining: Callable[[], bool],
        database: Any = None,
        *,
        timeout: float = 1.0,
        cache_for: float = 1.0,
    ) -> None:
        self.draining = draining
        self.database = database
        self.timeout = timeout
        self.cache_for = cache_for
        self._checked_at = float("-inf")
        self._db_ok = False
        self._checking: asyncio.Task[bool] | None = None

    def routes(self) -> list[Route]:
        return [Route("GET", "/healthz", self.healthz), Route("GET", "/readyz", self.readyz)]

    async def healthz(self, request: Request) -> dict[str, Any]:
        return {"status": "ok"}

    async def readyz(self, request: Request) -> dict[str, Any]:
        if self.draining():
            raise HTTPServiceUnavailable("not ready: the server is shutting down", retry_after=1)
        db = self.database
        if db is not None and not await self._database_reachable(db):
            raise HTTPServiceUnavailable("not ready: the database is unreachable", retry_after=1)
        return {"status": "ready"}

    async def _database_reachable(self, db: Any) -> bool:
        loop = asyncio.get_running_loop()
        if loop.time() - self._checked_at < self.cache_for:
            return self._db_ok
        checking = self._checking
        if checking is None or checking.done():
            checking = self._checking = loop.create_task(self._check(db))
        # shielded: a probe whose client leaves does not cancel the others' check
        return await asyncio.shield(checking)

    async def close(self) -> None:
        """Cancel a check under way (the server stops)."""
        checking, self._checking = self._checking, None
        if checking is not None and not checking.done():
            checking.cancel()
            await asyncio.wait([checking])

    async def _check(self, db: Any) -> bool:
        if db.size >= db.max_size and db.idle == 0:
            # Every connection is open and busy answering requests: the database is
            # reachable. A probe would queue behind them and, under load, time out in
            # every worker at once: the balancer would take the whole service out.
            self._db_ok = True
            self._checked_at = asyncio.get_running_loop().time()
            return True
        try:
            async with asyncio.timeout(self.timeout):
                ok = bool(await db.fetchval("SELECT 1") == 1)
        except Exception as exc:  # noqa: BLE001  # any failure means not ready
            ok = False
            if self._db_ok or self._checked_at == float("-inf"):
                logger.warning("readiness: the database is unreachable: %s: %s", type(exc).__name__, exc)
        else:
            if not self._db_ok and self._checked_at != float("-inf"):
                logger.info("readiness: the database is reachable again")
        self._db_ok = ok
        self._checked_at = asyncio.get_running_loop().time()
        return ok

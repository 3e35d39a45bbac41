"""Health probes: ``/healthz`` (alive) and ``/readyz`` (ready to serve), served by the server.

``/healthz`` answers 200 whenever the event loop runs: a process that cannot
answer it is stuck and should be restarted. ``/readyz`` answers 200 when the
worker should be sent traffic: it is not draining (``Server.stop`` has not
begun) and every backing service the app was configured with answers. Those
are the database the probes were given (the server gives the app's,
``app.database``, set by ``Database.setup``: ``Database.ping``, which a pool
whose every connection is busy passes at once, since a busy database is not a
down one) and the checks of ``app.readiness`` (the session store, the limit
store, the idempotency store: see ``aiorest.app.readiness``), read from the app
the probe was routed by. Each succeeds within ``timeout`` seconds or counts as
unreachable; its result is kept ``cache_for`` seconds and one check of each runs
at a time, so a storm of probes costs each service one check a second at most.
The body names every check and its state; when one fails, 503 with
``Retry-After``, in the usual JSON error shape, the states in ``details``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..http.exceptions import HTTPServiceUnavailable
from ..routing.route import Route

if TYPE_CHECKING:
    from ..http.request import Request

__all__ = ["HealthProbes"]

logger = logging.getLogger("aiorest.server")


class _Probe:
    """One backing service's check: its last result, kept ``cache_for`` seconds, and the check under way."""

    def __init__(self, name: str, check: Callable[[], Awaitable[object]], timeout: float, cache_for: float) -> None:
        self.name = name
        self.check = check
        self.timeout = timeout
        self.cache_for = cache_for
        self.checked_at = float("-inf")
        self.ok = False
        self.task: asyncio.Task[bool] | None = None

    async def ready(self) -> bool:
        loop = asyncio.get_running_loop()
        if loop.time() - self.checked_at < self.cache_for:
            return self.ok
        task = self.task
        if task is None or task.done():
            task = self.task = loop.create_task(self._run())
        # shielded: a probe whose client leaves does not cancel the others' check
        return await asyncio.shield(task)

    async def _run(self) -> bool:
        first = self.checked_at == float("-inf")
        try:
            async with asyncio.timeout(self.timeout):
                await self.check()
        except Exception as exc:  # noqa: BLE001  # any failure means not ready
            if self.ok or first:
                logger.warning("readiness: the %s is unreachable: %s: %s", self.name, type(exc).__name__, exc)
            self.ok = False
        else:
            if not self.ok and not first:
                logger.info("readiness: the %s is reachable again", self.name)
            self.ok = True
        self.checked_at = asyncio.get_running_loop().time()
        return self.ok

    async def close(self) -> None:
        task, self.task = self.task, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait([task])


class HealthProbes:
    """The ``/healthz`` and ``/readyz`` routes of one server.

    ``draining``: whether the server is shutting down (``/readyz`` then answers
    503). ``database``: the ``aiorest.db.Database`` ``/readyz`` checks,
    None for none. ``checks``: the app's other services by name (``app.readiness.checks``, read at each call).
    """

    def __init__(
        self,
        draining: Callable[[], bool],
        database: Any = None,
        checks: Mapping[str, Callable[[], Awaitable[object]]] | None = None,
        *,
        timeout: float = 1.0,
        cache_for: float = 1.0,
    ) -> None:
        self.draining = draining
        self.database = database
        self.timeout = timeout
        self.cache_for = cache_for
        self._database = None if database is None else _Probe("database", database.ping, timeout, cache_for)
        self.checks = checks if checks is not None else {}  # the app's (app.readiness), read at each /readyz
        self._probes: dict[str, _Probe] = {}  # the app's checks, by name

    def routes(self) -> list[Route]:
        return [Route("GET", "/healthz", self.healthz), Route("GET", "/readyz", self.readyz)]

    async def healthz(self, request: Request) -> dict[str, Any]:
        return {"status": "ok"}

    async def readyz(self, request: Request) -> dict[str, Any]:
        if self.draining():
            raise HTTPServiceUnavailable("not ready: the server is shutting down", retry_after=1)
        probes = [] if self._database is None else [self._database]
        probes += [self._probe(name, check) for name, check in self.checks.items()]
        states = await asyncio.gather(*(probe.ready() for probe in probes))
        checks = {probe.name: "ok" if ok else "unreachable" for probe, ok in zip(probes, states, strict=True)}
        down = [f"the {name}" for name, state in checks.items() if state != "ok"]
        if down:
            names = down[0] if len(down) == 1 else f"{', '.join(down[:-1])} and {down[-1]}"
            verb = "is" if len(down) == 1 else "are"
            raise HTTPServiceUnavailable(f"not ready: {names} {verb} unreachable", retry_after=1, details=checks)
        return {"status": "ready", "checks": checks}

    def _probe(self, name: str, check: Callable[[], Awaitable[object]]) -> _Probe:
        probe = self._probes.get(name)
        if probe is None or probe.check != check:  # a check added under a name since
            probe = self._probes[name] = _Probe(name, check, self.timeout, self.cache_for)
        return probe

    async def close(self) -> None:
        """Cancel the checks under way (the server stops)."""
        for probe in [*self._probes.values(), *([self._database] if self._database else [])]:
            await probe.close()

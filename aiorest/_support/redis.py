"""The Redis client of the stores that keep state in Redis (sessions, rate limits).

Both take a URL or a ``redis.asyncio.Redis`` the app made (aiorest's
``sessions-redis`` extra), and treat the same failures as "Redis is down".
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["RedisClient"]


class RedisClient:
    """``client`` is the one given, or one made from a URL with ``timeout`` on connecting and on every reply.

    ``unavailable`` is what a Redis that is down, restarting, too slow or out of
    memory raises: a store turns it into a 503 (or lets the request through),
    never a 500. ``owned`` says whether :meth:`close` closes the client.
    """

    def __init__(self, redis: Any, *, timeout: float, user: str) -> None:
        if not timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
        try:
            errors = importlib.import_module("redis.exceptions")
        except ImportError:
            raise RuntimeError(f"{user} needs redis: pip install '.[sessions-redis]' in aiorest's checkout") from None
        self.unavailable: tuple[type[BaseException], ...] = (
            errors.ConnectionError,
            errors.TimeoutError,
            errors.BusyLoadingError,
            errors.ReadOnlyError,
            errors.OutOfMemoryError,
        )
        self.owned = isinstance(redis, str)
        if isinstance(redis, str):
            # Bounded: a Redis that stops answering fails the call after ``timeout`` seconds, never hangs it.
            redis = importlib.import_module("redis.asyncio").from_url(
                redis, socket_timeout=timeout, socket_connect_timeout=timeout
            )
        self.client: Any = redis

    async def ping(self) -> None:
        """Return when Redis answers ``PING``, raise when it cannot (a store's readiness check)."""
        await self.client.ping()

    async def close(self) -> None:
        """Close the client, if it was made from a URL."""
        if self.owned:
            await self.client.aclose()

"""Idempotency keys (:mod:`.middleware`) and where they are kept (:mod:`.stores`)."""

from .middleware import KEPT_HEADERS, REPLAYED_HEADER, Idempotency
from .stores import (
    Claim,
    IdempotencyStore,
    MemoryIdempotencyStore,
    PostgresIdempotencyStore,
    RedisIdempotencyStore,
    Stored,
)

__all__ = [
    "KEPT_HEADERS",
    "REPLAYED_HEADER",
    "Claim",
    "Idempotency",
    "IdempotencyStore",
    "MemoryIdempotencyStore",
    "PostgresIdempotencyStore",
    "RedisIdempotencyStore",
    "Stored",
]

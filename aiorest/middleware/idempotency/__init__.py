"""Idempotency keys (:mod:`.middleware`) and where they are kept (:mod:`.stores`)."""

from .middleware import KEPT_HEADERS, REPLAYED_HEADER, SECRET_HEADERS, Idempotency, idempotency_exempt
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
    "SECRET_HEADERS",
    "Claim",
    "Idempotency",
    "IdempotencyStore",
    "MemoryIdempotencyStore",
    "PostgresIdempotencyStore",
    "RedisIdempotencyStore",
    "Stored",
    "idempotency_exempt",
]

"""Middleware that ships with aiorest: CORS and compression here; sessions and idempotency keys
in their own packages (:mod:`aiorest.middleware.sessions`, :mod:`aiorest.middleware.idempotency`)."""

from .compression import BROTLI_AVAILABLE, Compression
from .cors import CORS
from .decompression import Decompression

__all__ = ["CORS", "Compression", "Decompression", "BROTLI_AVAILABLE"]

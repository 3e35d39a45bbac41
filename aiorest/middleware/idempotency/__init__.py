"""Idempotency keys (:mod:`.middleware`) and where they are kept (:mod:`.stores`)."""

"""The public path of :mod:`aiorest.middleware.idempotency`: re-exports only."""

from .middleware.idempotency import *  # noqa: F403
from .middleware.idempotency import __all__  # noqa: F401

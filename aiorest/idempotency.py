"""The public path of :mod:`aiorest.middleware.idempotency`: re-exports only."""

from .middleware.idempotency.middleware import *  # noqa: F403
from .middleware.idempotency.middleware import __all__ as _middleware_all
from .middleware.idempotency.stores import *  # noqa: F403
from .middleware.idempotency.stores import __all__ as _stores_all

__all__ = [*_middleware_all, *_stores_all]

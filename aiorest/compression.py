"""The public path of :mod:`aiorest.middleware.compression`: re-exports only."""

from .middleware.compression import *  # noqa: F403
from .middleware.compression import __all__  # noqa: F401

"""The public path of :mod:`aiorest.middleware.cors`: re-exports only."""

from .middleware.cors import *  # noqa: F403
from .middleware.cors import __all__  # noqa: F401

"""The public path of :mod:`aiorest.middleware.sessions.middleware`: re-exports only."""

from .middleware.sessions.middleware import *  # noqa: F403
from .middleware.sessions.middleware import __all__  # noqa: F401

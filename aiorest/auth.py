"""The public path of :mod:`aiorest.security.auth`: re-exports only."""

from .security.auth import *  # noqa: F403
from .security.auth import __all__  # noqa: F401

"""The public path of :mod:`aiorest.db.migrations`: re-exports only."""

from .db.migrations import *  # noqa: F403
from .db.migrations import __all__  # noqa: F401

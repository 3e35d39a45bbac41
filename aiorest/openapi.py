"""The public path of :mod:`aiorest.typed.openapi`: re-exports only."""

from .typed.openapi import *  # noqa: F403
from .typed.openapi import __all__  # noqa: F401

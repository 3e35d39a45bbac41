"""The public path of :mod:`aiorest.http.exceptions`: re-exports only."""

from .http.exceptions import *  # noqa: F403
from .http.exceptions import __all__  # noqa: F401

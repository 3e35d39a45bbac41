"""The public path of :mod:`aiorest.http.jsoncodec`: re-exports only."""

from .http.jsoncodec import *  # noqa: F403
from .http.jsoncodec import __all__  # noqa: F401

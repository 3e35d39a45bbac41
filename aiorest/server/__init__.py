"""The server: listeners, the connection, driving handlers, the process model."""

from ..http.limits import Limits
from ..ops.logformat import LOG_FORMAT, WORKERS_LOG_FORMAT
from .config import ServerConfig
from .server import DEFAULT_QUEUE_TIMEOUT, IDLE_GRACE, Server, new_event_loop, run
from .shared import ServerState

__all__ = [
    "Server",
    "ServerConfig",
    "ServerState",
    "Limits",
    "run",
    "new_event_loop",
    "LOG_FORMAT",
    "WORKERS_LOG_FORMAT",
    "DEFAULT_QUEUE_TIMEOUT",
    "IDLE_GRACE",
]

"""WebSockets on the server: the opening handshake and an accepted connection, framed by the
``websockets`` library's sans-IO protocol (docs/websockets.rst says why that library)."""

from .connection import WebSocketConnection
from .handshake import handshake

__all__ = ["WebSocketConnection", "handshake"]

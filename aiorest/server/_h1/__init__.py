"""The HTTP/1.1 connection without I/O: bytes in, Requests out, the state as data (see connection.py, reader.py)."""

from .connection import H1Connection
from .states import ANSWERING, BODY, CLOSED, CLOSING, HEAD, IDLE, STOPPED, UPGRADED, Timeout

__all__ = ["H1Connection", "Timeout", "HEAD", "BODY", "STOPPED", "CLOSED", "IDLE", "ANSWERING", "CLOSING", "UPGRADED"]

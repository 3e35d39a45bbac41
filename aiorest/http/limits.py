"""The server's limits and timeouts, each with the answer given when it is reached."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Limits"]


@dataclass(frozen=True, slots=True)
class Limits:
    """Limits on what one connection may send and how long it may take.

    ==========================  ======================================================
    ``max_request_line``        request-target bytes; past it: 414, then close
    ``max_header_size``         bytes of the whole request head; past it: 431, then close
    ``max_headers``             header lines; past it: 431, then close
    ``max_body_size``           body bytes; a larger ``Content-Length``: 413 before the
                                body is read, then close; a chunked body that grows
                                past it: 413, then close
    ``max_pipeline``            requests received but not yet answered on a connection;
                                past it the server stops reading until it catches up
    ``body_buffer``             body bytes buffered before the handler reads them;
                                past it the server stops reading from that client
    ``head_timeout``            seconds to receive a request head, counted from when
                                the connection opens or the head's first byte arrives
                                on a kept-alive connection; then close (408 if a
                                partial head came)
    ``body_timeout``            seconds without progress while a handler (or the
                                admission gate) waits for the body, not counting
                                while the server itself stopped reading; then 408
                                and close
    ``keepalive_timeout``       seconds an idle kept-alive connection stays open; keep it
                                longer than a proxy's (nginx: 75 s)
    ``max_connections``         open connections; past it, a new one's first request
                                gets 503, then close
    ==========================  ======================================================
    """

    max_request_line: int = 8190
    max_header_size: int = 16384
    max_headers: int = 100
    max_body_size: int = 1024 * 1024
    max_pipeline: int = 32
    body_buffer: int = 256 * 1024
    head_timeout: float = 10.0
    body_timeout: float = 60.0
    keepalive_timeout: float = 90.0
    max_connections: int = 16384

    def __post_init__(self) -> None:
        for name in self.__slots__:
            if getattr(self, name) <= 0:
                raise ValueError(f"Limits.{name} must be positive, got {getattr(self, name)!r}")

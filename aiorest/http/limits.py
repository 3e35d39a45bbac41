"""The server's limits and timeouts, each with the answer given when it is reached."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

__all__ = ["Limits", "limit_help"]


def _limit(default: Any, help: str) -> Any:
    """A field with the one line the command line's ``--flag`` shows (``aiorest run --help``)."""
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True, slots=True)
class Limits:
    """Limits on what one connection may send and how long it may take.

    ==========================  ======================================================
    ``max_request_line``        request-target bytes; past it: 414, then close
    ``max_header_size``         bytes of the whole request head; past it: 431, then close
    ``max_headers``             header lines; past it: 431, then close
    ``max_body_size``           body bytes; a larger ``Content-Length``: 413 before the
                                body is read, then close; a chunked body whose bytes on
                                the wire (data, chunk sizes, extensions) grow past it:
                                413, then close
    ``max_pipeline``            requests received but not yet answered on a connection;
                                past it the server stops reading until it catches up
    ``body_buffer``             body bytes buffered before the handler reads them;
                                past it the server stops reading from that client
                                (behind the admission gate, a whole body is buffered
                                before the handler runs: see ``max_body_memory``)
    ``max_body_memory``         body bytes buffered by all the connections of a
                                process together; the request whose body would go
                                past it: 503 with ``Retry-After``, then close
    ``head_timeout``            seconds to receive a request head, counted from when
                                the connection opens or the head's first byte arrives
                                on a kept-alive connection; then close (408 if a
                                partial head came)
    ``body_timeout``            seconds a body may take, counted from the end of its
                                head, plus one second for every ``body_min_rate``
                                bytes received (Apache's ``RequestReadTimeout
                                body=T,MinRate=R``); time while the server itself
                                stopped reading does not count; then 408 and close
    ``body_min_rate``           bytes a second that earn a body one more second
    ``keepalive_timeout``       seconds an idle kept-alive connection stays open; keep it
                                longer than a proxy's (nginx: 75 s)
    ``max_connections``         open connections; past it, a new one's first request
                                gets 503, then close
    ``max_websockets``          open WebSockets (they count as connections too); past
                                it, a handler's ``accept`` answers 503 instead of 101
    ``max_background_tasks``    background tasks pending in a process (added by
                                handlers, not yet finished: docs/background.rst);
                                past it ``request.background.add`` raises a 503
    ==========================  ======================================================
    """

    max_request_line: int = _limit(8190, "request-target bytes at most; past it 414 (default 8190)")
    max_header_size: int = _limit(16384, "bytes of a request head at most; past it 431 (default 16384)")
    max_headers: int = _limit(100, "header lines at most; past it 431 (default 100)")
    max_body_size: int = _limit(
        1024 * 1024, "bytes of a request body at most, chunk framing included; past it 413 (default 1048576)"
    )
    max_pipeline: int = _limit(32, "requests queued unanswered on a connection before it stops reading (default 32)")
    body_buffer: int = _limit(
        256 * 1024, "body bytes buffered per connection before a handler reads them (default 262144)"
    )
    max_body_memory: int = _limit(
        64 * 1024 * 1024, "body bytes buffered by all connections of a worker; past it 503 (default 67108864)"
    )
    head_timeout: float = _limit(10.0, "seconds to receive a request head; then 408 and close (default 10)")
    body_timeout: float = _limit(
        60.0, "seconds a body may take after its head, plus 1 s per --body-min-rate bytes; then 408 (default 60)"
    )
    body_min_rate: int = _limit(8192, "bytes received that earn a body one more second (default 8192)")
    keepalive_timeout: float = _limit(90.0, "seconds an idle kept-alive connection stays open (default 90)")
    max_connections: int = _limit(16384, "open connections per worker; past it 503 (default 16384)")
    max_websockets: int = _limit(1024, "open WebSockets per worker; past it accept answers 503 (default 1024)")
    max_background_tasks: int = _limit(
        1000, "background tasks pending per worker; past it adding one raises a 503 (default 1000)"
    )

    def __post_init__(self) -> None:
        for name in self.__slots__:
            if getattr(self, name) <= 0:
                raise ValueError(f"Limits.{name} must be positive, got {getattr(self, name)!r}")
        if self.max_body_size > self.max_body_memory:
            # Behind the admission gate a whole body is buffered before its handler runs: one that cannot fit in
            # the process's budget could never be served.
            raise ValueError(
                f"Limits.max_body_size ({self.max_body_size}) must not exceed max_body_memory ({self.max_body_memory})"
            )

    def body_deadline(self, since: float, received: int) -> float:
        """When a body that began at ``since`` and has ``received`` bytes so far must be complete."""
        return since + self.body_timeout + received / self.body_min_rate


def limit_help() -> dict[str, str]:
    """Each field's name and its one line of help, for the command line's flags."""
    return {option.name: option.metadata["help"] for option in fields(Limits)}

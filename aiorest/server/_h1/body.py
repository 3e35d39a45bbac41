"""The body arriving on a connection, and what bounds it: its deadline, its share of the memory all
connections hold, and the bytes a chunked body spends on the wire beside its data.

No I/O here: H1Connection (connection.py) calls BodyIntake from llhttp's callbacks as it parses
(``on_chunk_header`` is llhttp's own callback, bound here).
"""

from __future__ import annotations

from ...http import exceptions as errors
from ...http.exceptions import HTTPError
from ...http.limits import Limits
from ...http.request import Request
from .broken import StopParsing
from .states import Clock

__all__ = ["BodyIntake", "BodyMemory", "MAX_CHUNK_EXTENSIONS"]

#: Bytes of chunk extensions a body may carry in all, as Node.js allows since CVE-2024-22019 (413 past it):
#: llhttp skips them unread, so without a bound a client makes the server parse megabytes for no data.
MAX_CHUNK_EXTENSIONS = 16 * 1024
# A chunk's size line and the CRLF after its data, without extensions: at most 16 hex digits and two CRLFs.
_CHUNK_FRAMING = 20


class BodyMemory:
    """Body bytes buffered by every connection of a server, against ``Limits.max_body_memory``.

    One per server (ServerState's), shared by its connections: each adds what it buffers
    and takes back what its handlers read or its answers drop, so that a crowd of stalled
    bodies holds at most ``limit`` bytes in all, not ``body_buffer`` times the connections.
    """

    __slots__ = ("used", "limit", "peak")

    def __init__(self, limit: int) -> None:
        self.used = 0
        self.limit = limit
        self.peak = 0  # the most held since the server last gave memory back (ServerState)


class BodyIntake:
    """The body arriving on one connection: its request, its deadline, the bytes it holds.

    The deadline (``Limits.body_timeout`` and ``body_min_rate``) runs from the end of the
    head, whoever reads the body, and stands still while the server itself stops reading
    (``paused``/``resumed``): a client sending at its own pace is bounded, a handler that
    is slow to read is not the client's fault.
    """

    __slots__ = (
        "_limits",
        "_clock",
        "_memory",
        "_per_byte",
        "receiving",
        "received",
        "buffered",
        "buffer_limit",
        "deadline",
        "_paused_at",
        "_chunked",
        "_framing",
        "chunks",
        "limit",
        "_whole_limit",
    )

    def __init__(self, limits: Limits, clock: Clock, memory: BodyMemory | None) -> None:
        self._limits = limits
        self._clock = clock
        self._memory = memory or BodyMemory(limits.max_body_memory)  # a connection fed by a test: its own
        self._per_byte = 1.0 / limits.body_min_rate  # seconds a body byte earns
        self.receiving: Request | None = None  # the request whose body is arriving
        self.received = 0  # its data bytes so far
        self.buffered = 0  # body bytes received and not yet taken by a handler (of any request)
        self.buffer_limit = limits.body_buffer  # past it, stop reading (see whole)
        self.deadline = 0.0  # when the body arriving must be complete; 0: none arriving
        self._paused_at = 0.0  # when the server stopped reading it
        self._chunked = False
        self._framing = 0  # a chunked body's bytes on the wire beside its data
        self.chunks = 0  # its chunks so far (llhttp's on_chunk_header)
        self.limit = limits.max_body_size  # its bytes at most: the server's, or its route's own
        self._whole_limit = min(limits.max_body_size, limits.max_body_memory)  # what is ever buffered whole

    def begin(self, request: Request, chunked: bool) -> None:
        """``request``'s head is complete and announces a body."""
        self.receiving = request
        self.received = 0
        self.deadline = self._clock.now + self._limits.body_timeout
        self._chunked = chunked
        self._framing = self.chunks = 0
        own = request.body_limit
        self.limit = self._limits.max_body_size if own is None else own

    def feed(self, body: bytes) -> bool:
        """Body bytes, from llhttp's on_body; True: the buffer is full, stop reading. At a limit the
        request's body ends with the error and StopParsing is raised."""
        request = self.receiving
        assert request is not None
        size = len(body)
        self.received += size
        if self.received > self.limit:
            limit = self.limit
            self._fail(request, errors.HTTPPayloadTooLarge(f"request body exceeds the limit of {limit} bytes"))
        buffered = request.feed_body(body)  # 0: answered already, the rest is discarded
        if buffered:
            self.buffered += buffered
            memory = self._memory
            memory.used += buffered
            if memory.used > memory.peak:
                memory.peak = memory.used
            if memory.used > memory.limit:
                message = f"the server holds {memory.limit} bytes of request bodies already; try again"
                self._fail(request, errors.HTTPServiceUnavailable(message, retry_after=1))
        self.deadline += size * self._per_byte
        return self.buffered > self.buffer_limit

    def _fail(self, request: Request, error: HTTPError) -> None:
        request.end_body(error)
        request.keep_alive = False
        raise StopParsing

    def count_wire(self, size: int, data: int) -> HTTPError | None:
        """A read of ``size`` bytes wholly inside a chunked body, ``data`` of them body data: the
        error that ends the body (413), or None. Size lines, extensions and CRLFs count against
        ``max_body_size`` with the data, and extensions against ``MAX_CHUNK_EXTENSIONS``.

        Only reads wholly inside the body are counted (reader.py feeds at most 16 KiB at a
        time): the count is short by the read where the body begins and the one where it ends,
        never over.
        """
        if not self._chunked:
            return None
        self._framing += size - data
        limit = self.limit
        if self.received + self._framing > limit:
            return errors.HTTPPayloadTooLarge(f"request body exceeds the limit of {limit} bytes with its chunk framing")
        if self._framing - _CHUNK_FRAMING * self.chunks > MAX_CHUNK_EXTENSIONS:
            return errors.HTTPPayloadTooLarge(f"request chunk extensions exceed {MAX_CHUNK_EXTENSIONS} bytes")
        return None

    def on_chunk_header(self) -> None:
        """llhttp's callback, called here directly (see H1Connection): a chunk of the body begins."""
        self.chunks += 1

    def complete(self, error: BaseException | None = None) -> Request | None:
        """The body ended (with ``error``, if it failed): the request it belonged to, if any."""
        request = self.receiving
        if request is not None:
            request.end_body(error)
            self.receiving = None
        self.deadline = self._paused_at = 0.0
        self.buffer_limit = self._limits.body_buffer
        return request

    def whole(self) -> bool:
        """Buffer the body arriving whole, up to ``max_body_size``: ``body_buffer`` no longer stops reading.

        False, and nothing changes, for a body its route lets grow past what the server
        buffers whole (an upload): it is read as it arrives."""
        if self.receiving is not None:
            if self.limit > self._whole_limit:
                return False
            self.buffer_limit = self.limit
        return True

    def release(self, size: int) -> None:
        """``size`` buffered bytes are gone: read by a handler, or dropped with an answered request."""
        self.buffered -= size
        self._memory.used -= size

    def lost(self) -> None:
        """The connection is gone: its requests' buffers go with them."""
        self.release(self.buffered)

    def paused(self) -> None:
        """The server stopped reading (a full pipeline or buffer): the deadline stands still."""
        if self.deadline and not self._paused_at:
            self._paused_at = self._clock.now

    def resumed(self) -> None:
        if self._paused_at:
            self.deadline += self._clock.now - self._paused_at
            self._paused_at = 0.0

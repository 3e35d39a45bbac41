"""A request's body as it arrives: what the connection feeds, and the waits of whoever reads it.

The connection that parsed the request feeds its chunks, ends it (or fails it),
and drops what is left once the request is answered; the request's readers
(``Request.stream``, ``read``, ``buffer_body``) take the chunks out and wait for
more here. A request without a body to come has none of this (``Request._incoming``
is None): the server's common request costs nothing for it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import TYPE_CHECKING

from .exceptions import ClientDisconnected

if TYPE_CHECKING:
    from collections.abc import Callable

    from .interfaces import BodySource

    SourceOf = Callable[[], BodySource | None]  # the request's source now: None once the connection is gone

__all__ = ["IncomingBody"]


class IncomingBody:
    """The body still to come: chunks buffered and not yet read, its end or error, the reader's wait."""

    __slots__ = ("buffered", "chunks", "discard", "done", "error", "expect_continue", "waiter")

    def __init__(self, expect_continue: bool = False) -> None:
        self.chunks: deque[bytes] | None = None
        self.buffered = 0
        self.done = False
        self.error: BaseException | None = None
        self.waiter: asyncio.Future[None] | None = None
        #: the client sent ``Expect: 100-continue``: asked for when someone first waits for the body
        self.expect_continue = expect_continue
        self.discard = False  # answered: what still comes is dropped

    @property
    def waits_for_continue(self) -> bool:
        return self.expect_continue and not self.done

    # -- read by the request ------------------------------------------------------

    async def next_chunk(self, current: SourceOf) -> bytes | None:
        """The next chunk, None at the end; waits for it through ``current()``, the request's source
        (asked again after each wait: the connection may go meanwhile, and then raises ClientDisconnected)."""
        source = current()
        while True:
            if self.chunks:
                chunk = self.chunks.popleft()
                self.buffered -= len(chunk)
                if source is not None:
                    source.body_consumed(len(chunk))
                return chunk
            if self.error is not None:
                raise self.error
            if self.done:
                return None
            if source is None:
                raise ClientDisconnected("the request body is no longer available")
            try:
                await self._more(source)
            finally:
                self.waiter = None
            source = current()

    async def read_all(self, current: SourceOf) -> bytes:
        """Every chunk still to come, joined."""
        parts = []
        while (chunk := await self.next_chunk(current)) is not None:
            parts.append(chunk)
        return b"".join(parts)

    async def buffer(self, current: SourceOf) -> bool:
        """Wait, taking nothing out of it, until the whole body is in the server's memory (see
        ``Request.buffer_body``); raise its error if it fails. False, at once, for a body that
        may grow past what the server buffers whole (its route's own ``max_body_size``)."""
        source = current()
        if not self.done and source is not None and not source.buffer_whole_body():
            return False
        while not self.done and source is not None:
            try:
                await self._more(source)
            finally:
                self.waiter = None
            source = current()
        if self.error is not None:
            raise self.error
        return True

    def _more(self, source: BodySource) -> asyncio.Future[None]:
        """What wakes when more of the body arrives (its end, an error); asks for it if the client waits for 100."""
        if self.expect_continue:
            self.expect_continue = False
            source.send_continue()
        waiter = self.waiter = asyncio.get_running_loop().create_future()
        return waiter

    # -- fed by the connection ----------------------------------------------------

    def feed(self, chunk: bytes) -> int:
        """Add ``chunk``; returns how many bytes it buffered (0 once the body is dropped)."""
        if self.discard:
            return 0
        if self.chunks is None:
            self.chunks = deque()
        self.chunks.append(chunk)
        self.buffered += len(chunk)
        self._wake()
        return len(chunk)

    def end(self, error: BaseException | None = None) -> None:
        """Complete, or failed with ``error`` (raised to whoever reads it)."""
        if error is not None and self.error is None and not self.done:
            self.error = error
        self.done = True
        self._wake()

    def drop(self) -> int:
        """Free the buffered chunks and discard what is still to come; returns the bytes freed."""
        freed = 0
        if self.chunks is not None:
            freed = self.buffered
            self.chunks = None
        if not self.done:
            self.discard = True
        return freed

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

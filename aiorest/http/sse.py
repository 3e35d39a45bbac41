"""Server-Sent Events: a response whose body is a stream of events (HTML Living Standard, "Server-sent events").

    async def ticks(request):
        async def events():
            for n in itertools.count():
                yield ServerSentEvent(data={"n": n}, event="tick", id=str(n))
                await asyncio.sleep(1)
        return EventSourceResponse(events())

The events are framed here (sans I/O); the server sends the frames as a chunked body
(server/writing.py), and tells the stream when to end: the client went away
(:meth:`Request.disconnected`) or the server stops. ``EventStreamParser`` reads the
same format back, for the test client and anyone else.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterable, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .._support.contexts import NO_CONTEXT
from .exceptions import ClientDisconnected
from .jsoncodec import JSONCodec
from .response import StreamResponse

__all__ = ["ServerSentEvent", "EventSourceResponse", "EventStreamParser"]

HEARTBEAT = b": ping\n\n"
_LINES = re.compile(r"\r\n|\r|\n")
_LINE_ENDS = re.compile(rb"\r\n|\r|\n")


@dataclass(frozen=True, slots=True)
class ServerSentEvent:
    """One event: ``data`` (a str, sent as is, one ``data:`` line per line; anything else JSON-encoded with
    the app's codec; None: no data), ``event`` (its type: ``addEventListener(event, ...)`` in a browser;
    none means ``message``), ``id`` (what the client sends back as ``Last-Event-ID`` when it reconnects),
    ``retry`` (milliseconds the client waits before reconnecting) and ``comment`` (ignored by clients).

    ``event`` and ``id`` cannot hold a line break (nor ``id`` a NUL, which makes clients ignore it):
    refused with ValueError when the event is made. A browser dispatches no event whose data is empty.
    """

    data: Any = None
    event: str | None = None
    id: str | None = None
    retry: int | None = None
    comment: str | None = None

    def __post_init__(self) -> None:
        if self.event is None and self.id is None and self.retry is None:
            return  # data and a comment: nothing to check
        for name in ("event", "id"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or "\r" in value or "\n" in value):
                raise ValueError(f"a ServerSentEvent's {name} must be a str without CR or LF, got {value!r}")
        if self.id is not None and "\0" in self.id:
            raise ValueError(f"a ServerSentEvent's id cannot hold a NUL (clients ignore it), got {self.id!r}")
        if self.retry is not None and (type(self.retry) is not int or self.retry < 0):
            raise ValueError(f"a ServerSentEvent's retry is milliseconds, an int >= 0, got {self.retry!r}")

    def encode(self, codec: JSONCodec) -> bytes:
        """The event as the stream sends it, ending with its blank line."""
        data = self.data
        if (
            self.comment is None
            and self.event is None
            and self.id is None
            and self.retry is None
            and type(data) is str
            and "\n" not in data
            and "\r" not in data
        ):
            return b"data: %s\n\n" % data.encode()  # the common event: one line of data
        lines: list[str] = []
        if self.comment is not None:
            lines.extend(": " + line for line in _LINES.split(self.comment))
        if self.event is not None:
            lines.append("event: " + self.event)
        if self.id is not None:
            lines.append("id: " + self.id)
        if self.retry is not None:
            lines.append(f"retry: {self.retry}")
        if data is not None:
            if not isinstance(data, str):
                data = codec.dumps(data).decode()
            lines.extend("data: " + line for line in _LINES.split(data))
        lines.append("\n")
        return "\n".join(lines).encode()


def encode_event(item: ServerSentEvent | str | Any, codec: JSONCodec) -> bytes:
    """What an event stream's iterator yielded, as bytes: a str or any data becomes an event's ``data``."""
    if isinstance(item, ServerSentEvent):
        return item.encode(codec)
    if type(item) is str and "\n" not in item and "\r" not in item:
        return b"data: %s\n\n" % item.encode()  # one line of data: no event to make
    return ServerSentEvent(data=item).encode(codec)


class EventSourceResponse(StreamResponse):
    """A ``text/event-stream`` response: the events ``content`` yields, as they come.

    ``content`` is an async iterable (an async generator, say) of :class:`ServerSentEvent`, or of plain
    data (a str, or what the app's JSON codec encodes: each an event's ``data``). While it yields
    nothing, a comment (``: ping``) goes every ``heartbeat`` seconds (None: never), which keeps
    proxies from timing the connection out and finds a client that went away. ``retry`` (milliseconds)
    is sent first, telling the client how long to wait before reconnecting.

    The iterator ends the stream by ending. The stream also ends, the iterator closed (``aclose()``:
    an async generator's ``finally`` runs, no task is left running it), when the client goes away and
    when the server stops (within its graceful timeout: the client reconnects, to another worker,
    with ``Last-Event-ID``: :attr:`Request.last_event_id`).

    Sent with ``Cache-Control: no-cache`` and ``X-Accel-Buffering: no`` (nginx passes each event on at
    once), never compressed (:class:`~aiorest.middleware.Compression` leaves it alone).
    """

    __slots__ = ("heartbeat", "retry")

    def __init__(
        self,
        content: AsyncIterable[Any],
        *,
        status: int = 200,
        headers: Mapping[str, str] | None = None,
        heartbeat: float | None = 15.0,
        retry: int | None = None,
    ) -> None:
        super().__init__(content, status, headers, "text/event-stream")
        if heartbeat is not None and not heartbeat > 0:
            raise ValueError(f"heartbeat must be seconds > 0, or None for none, got {heartbeat!r}")
        ServerSentEvent(retry=retry)  # checked
        self.heartbeat = heartbeat
        self.retry = retry
        own = self.headers
        own.setdefault("Cache-Control", "no-cache")
        own.setdefault("X-Accel-Buffering", "no")

    async def send(
        self,
        write: Callable[[bytes], None],
        drain: Callable[[], Awaitable[None]],
        codec: JSONCodec,
        ending: Iterable[asyncio.Future[Any]],
    ) -> bool:
        """Send the stream with ``write`` (a whole frame each time; ``drain`` waits while the client does not
        read) until the iterator ends or one of ``ending`` is done (the client went away, the server stops).
        The server calls it; the iterator's error, if it raised one, is raised here. False when a write
        found the client gone.

        The iterator runs in the caller's Task, from its first step to its ``aclose()`` (what it sets around
        a ``yield``, a transaction's context variable say, is still set at its next step), and each event is
        written the moment it comes. When one of ``ending`` is done, that Task is cancelled where it waits
        (for the iterator, or for the client to read) and the cancel taken back here: no Task of its own, no
        future to wait on, which is what an idle stream costs (about a kilobyte each, and fewer objects for
        the garbage collector to walk at 10,000 streams). A heartbeat goes when ``heartbeat`` seconds went
        by without a frame.
        """
        loop = asyncio.get_running_loop()
        task = asyncio.current_task(loop)
        if task is None:
            raise RuntimeError("an event stream must be sent from inside a Task")
        stream = _Stream(loop, write, task)
        ending = tuple(ending)
        for future in ending:  # no context copied for each: the callback only cancels
            future.add_done_callback(stream, context=NO_CONTEXT)
        beat = _Heartbeat(stream, self.heartbeat) if self.heartbeat is not None else None
        iterator = aiter(self.content)
        try:
            if self.retry is not None:
                stream.frame(b"retry: %d\n\n" % self.retry)
            while not stream.ended:
                try:
                    item = await anext(iterator)
                except StopAsyncIteration:
                    break
                stream.frame(encode_event(item, codec))
                stream.behind = True
                await drain()
                stream.behind = False
        except ClientDisconnected:
            return False  # the stream ends: the server sees the connection gone
        except asyncio.CancelledError:
            if not stream.ended or task.cancelling() > 1:
                raise  # not (only) ours: the Task itself is cancelled
        finally:
            stream.over = True  # no cancel from here on: the iterator closes in peace
            for future in ending:
                future.remove_done_callback(stream)
            if beat is not None:
                beat.stop()
            if stream.ended:
                task.uncancel()  # ours, delivered or not (the iterator may have swallowed it)
            aclose = getattr(iterator, "aclose", None)
            if aclose is not None:
                await aclose()  # an async generator's finally, in this Task too
        return True


class _Stream:
    """A stream's writes (when the last frame went; whether the client is behind, a drain waiting), and
    the callback of its ``ending`` futures: the first done cancels the Task sending it, once."""

    __slots__ = ("loop", "_write", "last", "behind", "_task", "ended", "over")

    def __init__(
        self, loop: asyncio.AbstractEventLoop, write: Callable[[bytes], None], task: asyncio.Task[Any]
    ) -> None:
        self.loop = loop
        self._write = write
        self.last = loop.time()
        self.behind = False
        self._task = task
        self.ended = False  # one of the ending futures is done: the Task was cancelled
        self.over = False  # the stream is closing its iterator: nothing to cancel

    def frame(self, data: bytes) -> None:
        self._write(data)
        self.last = self.loop.time()

    def __call__(self, _: asyncio.Future[Any]) -> None:
        if not self.ended and not self.over:
            self.ended = True
            self._task.cancel()


class _Heartbeat:
    """Writes a comment when ``interval`` seconds went by since the last frame; one timer at a time.

    None while the client is behind (an event waits for it to read): a heartbeat would only add to what
    it has not read, every ``interval``, for as long as it stalls."""

    __slots__ = ("_stream", "_interval", "_timer")

    def __init__(self, stream: _Stream, interval: float) -> None:
        self._stream = stream
        self._interval = interval
        self._timer = stream.loop.call_at(stream.last + interval, self._due)

    def _due(self) -> None:
        stream = self._stream
        due = stream.loop.time() - stream.last >= self._interval * 0.999  # (a timer may fire a hair early)
        if due and not stream.behind:
            try:
                stream.frame(HEARTBEAT)
            except ClientDisconnected:
                return  # no more: the stream is ending
        self._timer = stream.loop.call_at(max(stream.last, stream.loop.time()) + self._interval, self._due)

    def stop(self) -> None:
        self._timer.cancel()


class EventStreamParser:
    """Reads an event stream as a client does (the Living Standard's "interpreting an event stream").

    ``feed(bytes)`` returns the events completed so far, each a :class:`ServerSentEvent` whose ``data``
    is a str (``event`` defaults to ``"message"``, ``id`` is the last id seen, as a browser's
    ``lastEventId``). Comments are counted in ``comments``; a ``retry`` sets ``retry``. A line longer
    than ``max_line`` bytes raises ValueError (nothing unbounded).
    """

    def __init__(self, *, max_line: int = 1024 * 1024) -> None:
        self._buffer = b""
        self._max_line = max_line
        self._data: list[str] = []
        self._event = ""
        self.last_event_id = ""
        self.retry: int | None = None
        self.comments = 0

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        events: list[ServerSentEvent] = []
        buffer = self._buffer + chunk
        start = 0
        while True:
            match = _LINE_ENDS.search(buffer, start)
            # A lone CR at the end may be the first half of CRLF: wait for the next byte.
            if match is None or (match.group() == b"\r" and match.end() == len(buffer)):
                break
            event = self._line(buffer[start : match.start()].decode("utf-8", "replace"))
            if event is not None:
                events.append(event)
            start = match.end()
        self._buffer = buffer[start:]
        if len(self._buffer) > self._max_line:
            raise ValueError(f"an event stream line is longer than {self._max_line} bytes")
        return events

    def _line(self, line: str) -> ServerSentEvent | None:
        if not line:
            data, event = self._data, self._event
            self._data, self._event = [], ""
            if not data:
                return None
            return ServerSentEvent(data="\n".join(data), event=event or "message", id=self.last_event_id)
        if line.startswith(":"):
            self.comments += 1
            return None
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self.last_event_id = value
        elif name == "retry" and value.isascii() and value.isdigit():
            self.retry = int(value)
        return None

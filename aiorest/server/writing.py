"""Response writing: the head, a body by its framing, and the answer to a broken request.

The connection decides *whether* a response may keep the connection open and
hands this module the ``Connection`` line to send; this module turns a
Response into bytes on a transport, the way h11's writers do: a head, then a
body framed by ``Content-Length``, by chunked encoding, or (a streamed HTTP/1.0
body) by the end of the connection. Every value in a head was checked when the
handler set it (see Response and Headers); nothing is validated here.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, Awaitable, Callable
from typing import Any

from ..http import requestid
from ..http.exceptions import ClientDisconnected, HTTPError
from ..http.jsoncodec import JSONCodec
from ..http.request import Request
from ..http.response import SERVER_WRITTEN, JSONResponse, Response, StreamResponse, error_response
from ..http.sse import EventSourceResponse
from .shared import ServerState
from .wire import CONTENT_TYPE_LINES, STATUS_BYTES, STATUS_LINES, content_type_line

__all__ = ["CLOSE", "KEEP_ALIVE", "short_answer", "response_head", "write_response", "begin_stream", "write_error"]

CLOSE = "Connection: close\r\n"
KEEP_ALIVE = "Connection: keep-alive\r\n"  # for an HTTP/1.0 client that asked to keep alive
_NO_BODY_STATUSES = frozenset({204, 304})
_LARGE_BODY = 16 * 1024  # above this, head and body go to the socket as two buffers
# The two short answers' formats, for an id given by a proxy (bytes) and for one made here
# (a number, shown after the process's prefix). The prefix is part of the format, made again
# in a forked child: one value fewer to format a request (about 300 instructions of 42,000).
_JSON_GIVEN = b"%sX-Request-ID: %s\r\nContent-Length: %d\r\n\r\n%s"
_PLAIN_GIVEN = b"%s%s%sX-Request-ID: %s\r\nContent-Length: %d\r\n\r\n%s"
_JSON_MADE = _PLAIN_MADE = b""


def _make_formats() -> None:
    global _JSON_MADE, _PLAIN_MADE
    made = b"X-Request-ID: " + requestid.prefix + b"%x\r\nContent-Length: %d\r\n\r\n%s"
    _JSON_MADE = b"%s" + made
    _PLAIN_MADE = b"%s%s%s" + made


requestid.on_new_prefix(_make_formats)


def short_answer(
    result: Any, state: ServerState, dumps: Callable[[Any], bytes], request_id: requestid.RequestId
) -> bytes | None:
    """The whole message for a common answer on a kept-alive HTTP/1.1 connection, else None.

    A dict or a list (JSON, 200), a JSONResponse that can be sent alike (``plain_answer``: a dict
    under middleware, with the fields it added), or a plain Response with a small bytes body and
    no headers of its own: one formatted write, no list of lines. Anything else,
    and a result the codec cannot encode, goes the general way (``write_response``).
    """
    result_type = type(result)
    if result_type is dict or result_type is list:
        prefix = state.json_prefix
    elif result_type is Response:
        if result._headers is None:
            # The slots behind the properties: what the setters let through is safe to send.
            content = result.body
            media_type = result._media_type
            content_type = CONTENT_TYPE_LINES.get(media_type) or content_type_line(media_type)
            status_line = STATUS_BYTES.get(result._status)
            if type(content) is bytes and len(content) <= _LARGE_BODY and content_type is not None and status_line:
                return (_PLAIN_MADE if type(request_id) is int else _PLAIN_GIVEN) % (
                    status_line,
                    state.header_bytes,
                    content_type,
                    request_id,
                    len(content),
                    content,
                )
        return None
    elif result_type is JSONResponse:  # a handler's dict under middleware, which may have added fields
        plain = result.plain_answer()
        if plain is None:
            return None
        result, fields = plain
        prefix = state.json_prefix + fields
    else:
        return None
    try:
        payload = dumps(result)
    except Exception:
        return None  # the general path logs it and answers 500
    if type(request_id) is int:
        return _JSON_MADE % (prefix, request_id, len(payload), payload)
    return _JSON_GIVEN % (prefix, request_id, len(payload), payload)


def response_head(
    response: Response,
    length: int | None,
    chunked: bool,
    header_lines: str,
    connection: str,
    request_id: requestid.RequestId | None,
) -> bytes:
    """The head of ``response``: ``length`` None means a streamed body, chunked if ``chunked``.

    ``header_lines`` are the server's own (Server, Date); ``connection`` is the
    Connection line, or "". ``request_id`` (checked when it was made) replaces an
    ``X-Request-ID`` the handler set; None sends none. Every value was checked to
    be Latin-1 when it was set.
    """
    status = response._status
    content_type = response._media_type
    extra = ""
    headers = response._headers
    if headers is not None:
        content_type = headers.get("content-type", content_type)
        extra = headers.field_lines(SERVER_WRITTEN)
    head = STATUS_LINES.get(status) or f"HTTP/1.1 {status} Unknown\r\n"
    head += header_lines
    if status not in _NO_BODY_STATUSES and status >= 200:
        head += f"Content-Type: {content_type}\r\n"
        if length is not None:
            head += f"Content-Length: {length}\r\n"
        elif chunked:
            head += "Transfer-Encoding: chunked\r\n"
    if request_id is not None:
        head += f"X-Request-ID: {requestid.format_request_id(request_id)}\r\n"
    return f"{head}{extra}{connection}\r\n".encode("latin-1")


def write_response(
    transport: asyncio.WriteTransport,
    response: Response,
    body: bytes | bytearray | memoryview,
    *,
    head_request: bool,
    header_lines: str,
    connection: str,
    request_id: requestid.RequestId | None,
) -> int:
    """Write a response whose body is in memory: a head with its Content-Length, then the body.

    Returns the number of body bytes sent.
    """
    head = response_head(response, len(body), False, header_lines, connection, request_id)
    if head_request or response._status in _NO_BODY_STATUSES:
        transport.write(head)
        return 0
    if len(body) > _LARGE_BODY:
        transport.write(head)  # not writelines(): see _write_chunk
        transport.write(body)
    else:
        transport.write(head + body)
    return len(body)


def write_error(
    transport: asyncio.WriteTransport, error: HTTPError, codec: JSONCodec, *, head_request: bool, header_lines: str
) -> None:
    """Answer ``error`` to a request that cannot be served, before the connection closes."""
    response = error_response(error)
    write_response(
        transport,
        response,
        response.render(codec),
        head_request=head_request,
        header_lines=header_lines,
        connection=CLOSE,
        request_id=None,
    )


def _write_chunk(transport: asyncio.WriteTransport, chunk: bytes, chunked: bool) -> None:
    """One piece of a streamed body, framed as a chunk when ``chunked``."""
    if not chunked:
        transport.write(chunk)
    elif len(chunk) <= _LARGE_BODY:
        transport.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
    else:
        # Not writelines(): on Python 3.12.0-3.12.8 and 3.13.0-3.13.1
        # the selector transport's writelines never pauses the
        # protocol (CPython gh-127655), so drain() would never wait
        # and a slow client's buffer would grow without bound.
        transport.write(b"%x\r\n" % len(chunk))
        transport.write(chunk)
        transport.write(b"\r\n")


class BodyWriter:
    """Writes the pieces of a streamed body, each whole, framed as a chunk when ``chunked``; counts them."""

    __slots__ = ("_transport", "_chunked", "_events", "sent")

    def __init__(self, transport: asyncio.WriteTransport, chunked: bool, events: bool = False) -> None:
        self._transport = transport
        self._chunked = chunked
        self._events = events  # an event stream's: it ends when the client goes, a body cut short
        self.sent = 0  # body bytes, framing not counted

    def write(self, piece: bytes) -> None:
        """A chunk of the body (an event, a heartbeat); ClientDisconnected once the client is gone."""
        if self._transport.is_closing():
            raise ClientDisconnected("the client closed the connection")
        self.sent += len(piece)
        _write_chunk(self._transport, piece, self._chunked)

    async def pipe(self, content: AsyncIterable[bytes | str], drain: Callable[[], Awaitable[None]]) -> bool:
        """Write each chunk of ``content`` once ``drain`` says the socket took the last, then ``aclose()`` it;
        False when the client went away first."""
        try:
            async for chunk in content:
                if isinstance(chunk, str):
                    chunk = chunk.encode()
                if chunk:
                    self.write(chunk)
                    await drain()
            return True
        except ClientDisconnected:
            return False
        finally:
            await _closed(content)

    def end(self, whole: bool) -> int | None:
        """The body is over (``whole``: not cut short by the client): the last chunk goes, if the connection
        is still open. The body bytes sent, or None when the client went away: the connection must close
        (a whole body the client closed on at its end counts as sent; an event stream's end does not)."""
        if not whole:
            return None
        if self._transport.is_closing():
            return None if self._events else self.sent
        if self._chunked:
            self._transport.write(b"0\r\n\r\n")
        return self.sent


async def _closed(content: AsyncIterable[Any]) -> bool:
    """``content`` closed unread (the answer to a HEAD request)."""
    aclose = getattr(content, "aclose", None)
    if aclose is not None:
        await aclose()
    return True


def begin_stream(
    transport: asyncio.WriteTransport,
    request: Request,
    response: StreamResponse,
    drain: Callable[[], Awaitable[None]],
    *,
    chunked: bool,
    state: ServerState,
    connection: str,
) -> tuple[BodyWriter, Awaitable[bool]]:
    """Send a StreamResponse to ``request``: its head now; then, awaited, each chunk once ``drain`` says the
    socket took the last. Returns the writer (its :meth:`BodyWriter.end` ends the body once the awaitable is
    done) and the awaitable, true unless the client went away first.

    An exception from the content propagates, the body cut short: abort the transport, so that the client
    sees it incomplete. Without ``chunked`` the body ends with the connection. An event stream (sse.py)
    also ends when the client goes away or the server stops, its iterator closed; it is awaited straight
    from the caller (no frame of ours between): a frame is what each of 10,000 idle streams keeps.
    """
    head = request.method == "HEAD"
    # first: if making the head fails, none of the content has run
    transport.write(response_head(response, None, chunked, state.header_lines, connection, request.raw_id))
    writer = BodyWriter(transport, chunked and not head, not head and isinstance(response, EventSourceResponse))
    if head:
        return writer, _closed(response.content)
    if isinstance(response, EventSourceResponse):
        return writer, response.send(writer.write, drain, request.app.json, (request.disconnected(), state.stopping()))
    return writer, writer.pipe(response.content, drain)

"""The HTTP/1.1 connection: llhttp (httptools) parser callbacks to responses.

One HttpProtocol per connection. It parses with httptools, queues requests in
arrival order (pipelining) and answers them one at a time in that order, every
handler inside the connection's Task (see the note above ``_new_runner``). All
I/O goes through ``self.transport``; feeding bytes to ``data_received`` with a
stand-in transport exercises the whole state machine.

Deadlines are timestamps, checked once a second by ServerState, never timers
per request. What a connection is doing decides which one applies:

    a head is arriving, nothing in flight  -> head_timeout from its first byte
                                              (or from accept): 408 or close
    a handler waits for body bytes         -> body_timeout without progress: 408
    kept alive, nothing in flight          -> keepalive_timeout: close
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import socket
import types
from asyncio import current_task
from asyncio.tasks import _enter_task, _leave_task  # Python 3.11-3.14: see HttpProtocol._new_runner
from collections import deque
from collections.abc import Awaitable, Coroutine, Generator
from contextvars import copy_context
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import unquote

import httptools

from .exceptions import (
    ClientDisconnected,
    HTTPBadRequest,
    HTTPError,
    HTTPNotImplemented,
    HTTPPayloadTooLarge,
    HTTPRequestHeaderFieldsTooLarge,
    HTTPRequestTimeout,
    HTTPServiceUnavailable,
    HTTPURITooLong,
    HTTPVersionNotSupported,
)
from .limits import Limits
from .request import Request
from .response import Response, StreamResponse, error_response, to_response
from .serverstate import ServerState
from .wire import CONTENT_TYPE_LINES, STATUS_BYTES, STATUS_LINES, content_type_line, origin_form

if TYPE_CHECKING:
    from .app import App

__all__ = ["HttpProtocol", "ServerState"]  # ServerState is re-exported for the server

logger = logging.getLogger("aiorest.error")

_METHODS = {m.encode(): m for m in ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")}
_NO_BODY_STATUSES = frozenset({204, 304})
_LARGE_BODY = 16 * 1024  # above this, head and body go to the socket as two buffers
_FRAMING_SIZES = frozenset({len(b"content-length"), len(b"connection"), len(b"expect"), len(b"transfer-encoding")})
_PERCENT = ord("%")  # `int in bytes` tests one byte; `bytes in bytes` first tries an int, at a cost
_DONE = object()  # what next() gives for a coroutine that has finished
_new_object = object.__new__
_FEED_SLICE = 16 * 1024  # bytes parsed at a time, so a paused connection stops promptly


class _ParseAbort(Exception):
    """Raised in a parser callback: answer ``error`` and close."""

    def __init__(self, error: HTTPError) -> None:
        self.error = error


class _StopParsing(Exception):
    """Raised in a parser callback: the request is queued; read nothing more."""


class HttpProtocol(asyncio.Protocol):
    """One client connection."""

    def __init__(self, app: App, state: ServerState, limits: Limits, loop: asyncio.AbstractEventLoop) -> None:
        self._app = app
        self._codec = app.json
        self._dumps = app.json.dumps
        self._state = state
        self._limits = limits
        self._loop = loop
        self._parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.peername: Any = None
        # head being parsed
        self._url = b""
        self._raw_headers: list[tuple[bytes, bytes]] = []
        self._head_bytes = 0
        self._in_head = True
        self._content_length: int | None = None
        self._expect_continue = False
        self._connection_header = False
        self._has_host = False
        self._transfer_encoding: bytes | None = None
        self._framing = False  # one of the four above was sent: on_headers_complete's general path
        # Limits read for every request, kept here (one attribute lookup, not two).
        self._max_request_line = limits.max_request_line
        self._max_headers = limits.max_headers
        self._max_header_size = limits.max_header_size
        self._max_pipeline = limits.max_pipeline
        # requests received, in order; the first is the one being answered
        self._queue: deque[Request] = deque()
        self._receiving: Request | None = None
        self._body_received = 0
        self._current: Request | None = None
        self._parsing_stopped = False
        self._pending_data: memoryview | None = None
        self._closed = False
        self._close_after_queue = False
        # flow control
        self._buffered_body = 0
        self._reading_paused = False
        self._writing_paused = False
        self._drain_waiter: asyncio.Future[None] | None = None
        # the connection's Task (see the note above _new_runner), what wakes it, the handler it is to carry on
        self._runner: asyncio.Task[None] | None = None
        self._wake: asyncio.Future[None] | None = None
        self._suspended: tuple[contextvars.Context, Generator[Any, Any, None], Any] | None = None
        self._serving = False  # _serve is running _process: its Task is the current one
        self._refusal: HTTPError | None = None  # set past max_connections
        # deadlines: when the head began, the connection went idle, a body wait began
        self._head_since = state.now
        self._idle_since = state.now
        self._body_since = 0.0
        self._header_bytes = 0

    # -- asyncio.Protocol ------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)
        self.peername = transport.get_extra_info("peername")
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        self._state.connections.add(self)
        # The context the connection's callbacks start from, never a request's.
        self._context = copy_context()
        # Started now, it waits for work by the time a request arrives: a cancel
        # that reached it before its first step would end it without a word.
        self._new_runner()
        if len(self._state.connections) > self._limits.max_connections:
            # Answer the first request with 503, after reading it: closing with the
            # request unread would reset the connection before the client sees the answer.
            self._refusal = HTTPServiceUnavailable("too many connections", retry_after=1)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._closed = True
        self._state.connections.discard(self)
        gone = ClientDisconnected("the client closed the connection")
        for request in self._queue:
            request._protocol = None
            request._finish_body(gone)
        if self._current is None:
            self._queue.clear()
        waiter = self._drain_waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(gone)
            waiter.exception()  # retrieved: nobody may be left to await it
        wake = self._wake
        if wake is not None and not wake.done():
            wake.set_result(None)  # _serve ends

    def data_received(self, data: bytes) -> None:
        if self._parsing_stopped or self._closed:
            return
        size = len(data)
        if self._in_head:
            self._head_bytes += size
        elif self._receiving is not None:
            if self._body_since:  # a handler waits for these body bytes
                self._body_since = self._state.now
        else:
            # Between requests: these bytes begin the next head (its clock starts
            # here, not in an on_message_begin callback, which would cost a call
            # a request), or go on with one that began in the read that ended the
            # previous request (_url is set): that one is timed from the previous
            # answer, here as in check_deadline, or its clock would start again.
            self._in_head = True
            self._head_bytes = size
            if self._url and self._current is None and not self._queue:
                self._head_since = self._idle_since
            else:
                self._head_since = self._state.now
        if size > _FEED_SLICE:
            self._feed_slices(memoryview(data))
        else:
            try:
                self._parser.feed_data(data)
            except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
                self._parse_error(exc)
        if self._in_head and self._head_bytes > self._max_header_size and not self._parsing_stopped:
            self._abort_parsing(HTTPRequestHeaderFieldsTooLarge("request head too large"))
        self._process()

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        waiter = self._drain_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        elif self._current is None and self._queue:
            self._process()  # pipelined requests waited for the client to read

    def eof_received(self) -> bool | None:
        # The client half-closed: answer what was received, then close.
        self._close_after_queue = True
        receiving = self._receiving
        if receiving is not None:
            receiving._finish_body(ClientDisconnected("the client closed its side before the body ended"))
        if self._current is None and not self._queue:
            return False
        return True

    # -- parsing ----------------------------------------------------------------------

    def _feed_slices(self, data: memoryview) -> None:
        for start in range(0, len(data), _FEED_SLICE):
            if self._parsing_stopped:
                return
            if self._reading_paused:
                self._pending_data = data[start:]
                return
            self._feed(data[start : start + _FEED_SLICE])

    def _feed(self, data: bytes | memoryview) -> None:
        try:
            self._parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            self._parse_error(exc)

    def _parse_error(self, exc: Exception) -> None:
        if isinstance(exc, httptools.HttpParserCallbackError):
            cause = exc.__context__
            if isinstance(cause, _StopParsing):
                self._stop_parsing()
            elif isinstance(cause, _ParseAbort):
                self._abort_parsing(cause.error)
            else:
                logger.error("parser callback failed", exc_info=cause)
                self._abort_parsing(HTTPBadRequest("malformed request"))
        elif isinstance(exc, httptools.HttpParserUpgrade):
            # We speak no other protocol: answer the request, then close.
            if self._queue:
                self._queue[-1].keep_alive = False
            self._stop_parsing()
        else:
            # Before its method is complete, the parser still reports the previous request's.
            method_known = not isinstance(exc, httptools.HttpParserInvalidMethodError)
            self._abort_parsing(HTTPBadRequest(f"malformed request: {exc}"), method_known)

    def on_url(self, url: bytes) -> None:
        self._url += url
        if len(self._url) > self._max_request_line:
            raise _ParseAbort(HTTPURITooLong(f"request target longer than {self._max_request_line} bytes"))

    def on_header(self, name: bytes, value: bytes) -> None:
        headers = self._raw_headers
        headers.append((name, value))
        size = len(name)
        self._header_bytes += size + len(value)
        if len(headers) > self._max_headers or self._header_bytes > self._max_header_size:
            raise _ParseAbort(HTTPRequestHeaderFieldsTooLarge("request headers too large or too many"))
        # Cheap length tests first: most headers are none of these.
        if size == 4:
            if name == b"Host" or name.lower() == b"host":  # as most clients spell it: no lower()
                self._has_host = True
        elif size in _FRAMING_SIZES:
            self._framing_header(name.lower(), value)

    def _framing_header(self, name: bytes, value: bytes) -> None:
        """A header that changes how the request is framed or answered."""
        if name == b"content-length":
            self._content_length = int(value)  # llhttp accepts digits only
        elif name == b"connection":
            self._connection_header = True
        elif name == b"expect":
            if value.lower() != b"100-continue":
                return
            self._expect_continue = True
        elif name == b"transfer-encoding":
            # Repeated lines make one list (RFC 9110, 5.3): "gzip" then "chunked" is "gzip, chunked".
            previous = self._transfer_encoding
            self._transfer_encoding = value if previous is None else previous + b"," + value
        else:
            return
        self._framing = True

    def on_headers_complete(self) -> None:
        self._in_head = False
        parser = self._parser
        target = self._url
        # The common request first: HTTP/1.1 kept alive, a Host, no body framing,
        # Expect or Connection header, a plain origin-form target, a known method.
        if (
            self._has_host
            and not self._framing
            and self._refusal is None
            and parser.should_keep_alive()
            and target[:1] == b"/"
            and _PERCENT not in target  # an int: b"%" would raise and catch a TypeError inside
        ):
            method = _METHODS.get(parser.get_method())
            if method is not None:
                raw_path, _, query = target.partition(b"?")
                # Request.__init__'s eight attributes, set here: calling a class with a
                # Python __init__ costs CPython 3.11 about 900 instructions more
                # (test_protocol checks that both ways make the same request).
                request = _new_object(Request)
                request.method = method
                request.path = raw_path.decode("latin-1")
                request.raw_path = raw_path
                request.query_string = query.decode("latin-1")
                request.http_version = "1.1"
                request.app = self._app
                request._raw_headers = self._raw_headers
                request._protocol = self
                # Without Content-Length or Transfer-Encoding a request has no body
                # (RFC 9112, 6.3): it is complete now, and on_message_complete has nothing to do.
                request._body_done = True
                if method != "HEAD":
                    request._plain = True
                queue = self._queue
                queue.append(request)
                # Ready for the next head (_next_head, without the call; no framing header was sent).
                self._url = b""
                self._raw_headers = []
                self._header_bytes = 0
                self._has_host = False
                if len(queue) >= self._max_pipeline:
                    self._pause_reading()
                return
        self._head_complete(parser, target)
        self._next_head()

    def _next_head(self) -> None:
        """Forget the head just parsed: the parser may go on with the next one."""
        self._url = b""
        self._raw_headers = []
        self._header_bytes = 0
        self._has_host = False
        if self._framing:
            self._framing = False
            self._content_length = None
            self._expect_continue = False
            self._connection_header = False
            self._transfer_encoding = None

    def _head_complete(self, parser: httptools.HttpRequestParser, target: bytes) -> None:
        """on_headers_complete for every other request (all those with a body among them)."""
        self._body_received = 0
        method = parser.get_method()
        keep_alive = parser.should_keep_alive()
        # Formatting the version costs 0.2 µs; without a Connection header, only
        # HTTP/1.1 is kept alive, so the common case needs no formatting.
        http_version = "1.1" if keep_alive and not self._connection_header else parser.get_http_version()
        head_error: HTTPError | None = None
        if not target.startswith(b"/"):
            target = origin_form(target)
        if b"?" in target:
            raw_path, _, query_bytes = target.partition(b"?")
            query = query_bytes.decode("latin-1")
        else:
            raw_path, query = target, ""
        path = raw_path.decode("latin-1")
        if "%" in path:
            try:
                path = unquote(path, errors="strict")
            except UnicodeDecodeError:
                head_error = HTTPBadRequest("request path is not valid UTF-8 after percent-decoding")
        request = Request(
            _METHODS.get(method) or method.decode("ascii"),
            path,
            raw_path,
            query,
            http_version,
            self._raw_headers,
            self._app,
            self,
        )
        if not keep_alive:
            request.keep_alive = False
        elif http_version == "1.1" and not self._expect_continue and method != b"HEAD":
            request._plain = True  # may take the fast path in _respond
        if self._expect_continue and http_version == "1.1":
            request._expect_continue = True
        self._queue.append(request)
        self._receiving = request
        if self._content_length is not None and self._content_length > self._limits.max_body_size:
            request._head_error = HTTPPayloadTooLarge(
                f"request body of {self._content_length} bytes exceeds the limit of {self._limits.max_body_size}"
            )
            request.keep_alive = False
            raise _StopParsing
        if http_version == "1.1" and not self._has_host:
            head_error = HTTPBadRequest("an HTTP/1.1 request needs a Host header")  # RFC 9112, 3.2
            request.keep_alive = False
        if self._transfer_encoding is not None:
            codings = [coding.strip().lower() for coding in self._transfer_encoding.split(b",")]
            if codings[-1] != b"chunked":
                # RFC 9112, 6.3: the body's length cannot be known; 400, and read no more.
                request._head_error = HTTPBadRequest(
                    "the last transfer coding of a request must be chunked; its body length cannot be known"
                )
                request.keep_alive = False
                raise _StopParsing
            if len(codings) > 1:
                # llhttp accepts "gzip, chunked"; we would hand the handler a still-encoded body.
                head_error = HTTPNotImplemented("only the chunked transfer coding is supported")
                request.keep_alive = False
            elif http_version == "1.0":
                request.keep_alive = False  # RFC 9112, 6.1: its framing is suspect; close after it
        if http_version != "1.1" and http_version != "1.0":  # llhttp also takes 0.9 and 2.0
            head_error = HTTPVersionNotSupported(f"HTTP/{http_version} is not supported; this server speaks HTTP/1.1")
            request.keep_alive = False
        if self._refusal is not None:
            head_error = self._refusal
            request.keep_alive = False
        if head_error is not None:
            request._head_error = head_error
        if len(self._queue) >= self._max_pipeline:
            self._pause_reading()

    def on_body(self, body: bytes) -> None:
        request = self._receiving
        assert request is not None
        self._body_received += len(body)
        if self._body_received > self._limits.max_body_size:
            request._finish_body(
                HTTPPayloadTooLarge(f"request body exceeds the limit of {self._limits.max_body_size} bytes")
            )
            request.keep_alive = False
            raise _StopParsing
        if request._discard:
            return
        request._feed(body)
        self._buffered_body += len(body)
        if self._buffered_body > self._limits.body_buffer:
            self._pause_reading()

    def on_message_complete(self) -> None:
        request = self._receiving
        if request is None:
            return  # a request without a body, completed by on_headers_complete
        if request._chunks is None and request._waiter is None:
            request._body_done = True  # no body, nobody waiting: skip the call
        else:
            request._finish_body()
        self._receiving = None
        self._body_since = 0.0

    def _stop_parsing(self) -> None:
        """Read nothing more: answer what is queued, then close."""
        self._parsing_stopped = True
        self._close_after_queue = True
        self._pending_data = None
        self._pause_reading()

    def _abort_parsing(self, error: HTTPError, method_known: bool = True) -> None:
        """The bytes on the wire are broken: answer ``error`` after what is queued, then close."""
        self._stop_parsing()
        receiving = self._receiving
        if receiving is not None:
            # A handler reading this body gets the error; one that already
            # answered has nothing more to send, and the connection closes.
            receiving._finish_body(error)
            self._receiving = None
            return
        request = self._broken_request(method_known)
        request._head_error = error
        request._finish_body()
        self._queue.append(request)

    # -- answering, in order ---------------------------------------------------------------

    def _process(self) -> None:
        """Answer queued requests in order while none is in progress."""
        queue = self._queue
        # While the client does not read, answer nothing more: responses would
        # pile up in the transport's buffer without bound.
        # The loop's test is also how it ends, usually on an empty queue: that first.
        while queue and self._current is None and not self._closed and not self._writing_paused:
            request = self._current = queue[0]
            if request._head_error is not None:
                self._respond(request, error_response(request._head_error))
                continue
            try:
                # Most requests are for a route without parameters: App._begin's
                # first step, two dict lookups, done here instead of in a call.
                methods = self._app._static_endpoints.get(request.path)
                endpoint = methods.get(request.method) if methods is not None else None
                coro = endpoint(request) if endpoint is not None else self._app._begin(request)
            except Exception as exc:
                coro = self._app._handle_exception(request, exc)
            # The handler's first step, run now as the connection's Task (see the note above _new_runner).
            handling = self._handle(request, coro)
            runner = self._runner
            if runner is None:
                runner = self._new_runner()
            context = copy_context()
            if self._serving:  # called from _serve, after a handler that waited
                awaited = context.run(next, handling, _DONE)
            else:
                loop = self._loop
                try:
                    _enter_task(loop, runner)
                except RuntimeError:  # bytes fed from inside another task (the unit tests do)
                    awaited = self._step_inside_another_task(runner, context, handling)
                else:
                    try:
                        awaited = context.run(next, handling, _DONE)
                    finally:
                        _leave_task(loop, runner)
            if awaited is not _DONE:
                self._suspend(context, handling, awaited)
                return  # it waits: _serve goes on with the queue when it is done
            if runner.cancelling():
                self._forget_cancels()
        if self._close_after_queue and self._current is None and not queue:
            self._close()

    # Every handler runs inside a Task from its first line (asyncio.timeout,
    # TaskGroups and client libraries built on them need current_task() before
    # the first await), but not in a new Task per request: creating one and
    # waiting for the loop to step it cost about 1.5 µs a request on Python 3.11.
    # The connection keeps one Task, _serve. _process runs the first step of each
    # request at once, in a copy of the context, with that Task entered as the
    # current one (next() with a default, not send(): a step that ends raises no
    # StopIteration); a handler that answers without waiting is done there. A
    # handler that waits is handed to _serve, which drives it from then on.

    def _new_runner(self) -> asyncio.Task[None]:
        runner = self._runner = self._loop.create_task(self._serve())
        runner.add_done_callback(self._runner_done)
        return runner

    def _step_inside_another_task(
        self, runner: asyncio.Task[None], context: contextvars.Context, handling: Generator[Any, Any, None]
    ) -> Any:
        """The first step when bytes are fed from inside another Task (the unit tests do)."""
        loop = self._loop
        current = current_task(loop)
        assert current is not None
        _leave_task(loop, current)
        _enter_task(loop, runner)
        try:
            return context.run(next, handling, _DONE)
        finally:
            _leave_task(loop, runner)
            _enter_task(loop, current)

    def _suspend(self, context: contextvars.Context, handling: Generator[Any, Any, None], awaited: Any) -> None:
        """A handler waits for ``awaited``: _serve carries it on."""
        self._suspended = (context, handling, awaited)
        wake = self._wake
        if wake is not None and not wake.done():
            wake.set_result(None)

    async def _serve(self) -> None:
        """The connection's Task: carries on each handler whose first step waited."""
        loop = self._loop
        try:
            while True:
                suspended = self._suspended
                if suspended is None:
                    if self._closed:
                        return
                    wake = self._wake = loop.create_future()
                    try:
                        await wake
                    except asyncio.CancelledError:
                        if not self._runner.cancelling():  # type: ignore[union-attr]
                            continue  # a cancel _process found moot and took back
                        suspended, self._suspended = self._suspended, None
                        if suspended is None:  # cancelled between requests (the loop ends, say):
                            raise  # end; the next request starts a new Task
                        # Cancelled before this Task took the handler over: cancel what it
                        # waits for and raise CancelledError in it, as Task.cancel() would.
                        context, handling, awaited = suspended
                        if isinstance(awaited, asyncio.Future):
                            awaited.cancel()
                        await _resume(context, handling, None, asyncio.CancelledError())
                        self._forget_cancels()
                        self._process_serving()
                    continue
                self._suspended = None
                await _resume(*suspended)
                self._forget_cancels()
                self._process_serving()
        finally:
            self._runner = None  # at once: the next request must not step a finished Task

    def _forget_cancels(self) -> None:
        """A handler has finished with cancels on its Task still counted: with a Task
        of its own they would have ended with it; they must not reach the next
        request on this connection (its ``cancelling()`` starts at 0)."""
        runner = self._runner
        while runner is not None and runner.uncancel():
            pass

    def _process_serving(self) -> None:
        self._serving = True
        try:
            self._process()
        finally:
            self._serving = False

    def _runner_done(self, runner: asyncio.Task[None]) -> None:
        if self._runner is runner:  # cancelled before its first step: _serve's finally never ran
            self._runner = None
        # _serve returns only once the connection is closed; anything else is a bug
        # of ours, or a cancellation that reached the Task before its first step.
        if not self._closed and (self._current is not None or self._suspended is not None):
            if not runner.cancelled() and runner.exception() is not None:
                logger.error("the connection's task failed", exc_info=runner.exception())
            self._suspended = None
            self._current = None
            self._close()

    # A generator-based coroutine, not an async def: _process steps it with
    # next() as it is, where a native coroutine needs its __await__() wrapper
    # first (an object and a call a request: about 800 instructions).
    @types.coroutine
    def _handle(self, request: Request, coro: Awaitable[Any]) -> Generator[Any, Any, None]:
        """Run the handler and answer; a dict or a small plain Response is written here."""
        try:
            try:
                # A coroutine: endpoints are async functions, and App._chain makes
                # one of a middleware that is not (yield from takes no other awaitable).
                result = yield from coro  # type: ignore[misc]
            except Exception as exc:
                result = yield from self._app._handle_exception(request, exc)
            result_type = type(result)
            if request._plain and request.keep_alive and not self._close_after_queue and not self._closed:
                # The common cases on a kept-alive HTTP/1.1 connection: a dict, or a
                # plain Response with a small body. One formatted write, no list of lines.
                message = None
                if result_type is dict or result_type is list:
                    try:
                        payload = self._dumps(result)
                    except Exception:
                        pass  # the general path below logs it and answers 500
                    else:
                        message = b"%sContent-Length: %d\r\n\r\n%s" % (self._state.json_prefix, len(payload), payload)
                elif result_type is Response and result._headers is None:
                    content = result.body
                    content_type = CONTENT_TYPE_LINES.get(result.media_type) or content_type_line(result.media_type)
                    status_line = STATUS_BYTES.get(result.status)
                    if (
                        type(content) is bytes
                        and len(content) <= _LARGE_BODY
                        and content_type is not None
                        and status_line is not None
                    ):
                        message = b"%s%s%sContent-Length: %d\r\n\r\n%s" % (
                            status_line,
                            self._state.header_bytes,
                            content_type,
                            len(content),
                            content,
                        )
                if message is not None:
                    self.transport.write(message)  # type: ignore[union-attr]
                    # _finish, for a connection that stays open
                    self._current = None
                    self._queue.popleft()
                    if request._chunks is not None or not request._body_done:
                        self._drop_body(request)
                    self._idle_since = self._state.now
                    self._body_since = 0.0
                    if self._reading_paused:
                        self._update_reading()
                    return
            stream = self._respond(request, result)
            if stream is not None:
                yield from stream
        except asyncio.CancelledError:
            # The handler was cancelled (by itself or by code it gave its Task to):
            # there is no answer to give; the connection closes, the Task goes on
            # (the cancel is taken back with the others, see _forget_cancels).
            self._abandon(request)
        except Exception:  # a bug of ours: never leave the connection hanging
            logger.exception("answering %s %s failed", request.method, request.path)
            self._abandon(request)

    def _abandon(self, request: Request) -> None:
        request.keep_alive = False
        self._current = None
        self._queue.clear()
        self._close()

    def _respond(self, request: Request, result: Any) -> Coroutine[Any, Any, None] | None:
        """Write the response; a StreamResponse gives back the coroutine that streams it.

        The common answers take the short path in ``_handle`` and never come here.
        """
        if request._expect_continue and not request._body_done:
            request.keep_alive = False  # the client waits for 100 Continue; its body may never come
        try:
            response = to_response(result)
            if isinstance(response, StreamResponse):
                if not self._closed:
                    return self._stream(request, response)
                body: bytes | bytearray | memoryview = b""
            else:
                body = response.render(self._codec)
        except Exception as exc:
            logger.error("cannot send the response to %s %s", request.method, request.path, exc_info=exc)
            response = error_response(HTTPError())
            body = response.render(self._codec)
        if not self._closed:
            self._write(request, response, body)
        self._finish(request)
        return None

    def _head(self, request: Request, response: Response, length: int | None, chunked: bool = False) -> bytes:
        """The response head; ``length`` None means a streamed body (chunked if ``chunked``)."""
        status = response.status
        content_type = response.media_type
        extra = []
        if response._headers is not None:
            for name, value in response._headers.items():
                lname = name.lower()
                if lname == "content-type":
                    content_type = value
                elif lname not in ("content-length", "transfer-encoding"):  # the server frames the body
                    extra.append(f"{name}: {value}\r\n")
        lines = [STATUS_LINES.get(status) or f"HTTP/1.1 {status} Unknown\r\n", self._state.header_lines]
        if status not in _NO_BODY_STATUSES and status >= 200:
            lines.append(f"Content-Type: {content_type}\r\n")
            if length is not None:
                lines.append(f"Content-Length: {length}\r\n")
            elif chunked:
                lines.append("Transfer-Encoding: chunked\r\n")
        lines.extend(extra)
        if not request.keep_alive or (self._close_after_queue and len(self._queue) <= 1):
            request.keep_alive = False
            lines.append("Connection: close\r\n")
        elif request.http_version == "1.0":
            lines.append("Connection: keep-alive\r\n")
        lines.append("\r\n")
        return "".join(lines).encode("latin-1")

    def _write(self, request: Request, response: Response, body: bytes | bytearray | memoryview) -> None:
        transport = self.transport
        assert transport is not None
        try:
            head = self._head(request, response, len(body))
        except UnicodeEncodeError as exc:
            logger.error("response header is not latin-1: %s", exc)
            response = error_response(HTTPError())
            body = response.render(self._codec)
            head = self._head(request, response, len(body))
        if request.method == "HEAD" or response.status in _NO_BODY_STATUSES:
            transport.write(head)
        elif len(body) > _LARGE_BODY:
            transport.write(head)  # not writelines(): see _stream
            transport.write(body)
        else:
            transport.write(head + body)

    async def _stream(self, request: Request, response: StreamResponse) -> None:
        transport = self.transport
        assert transport is not None
        chunked = request.http_version != "1.0"
        if not chunked:
            request.keep_alive = False  # the end of the body is the end of the connection
        content = response.content
        try:
            transport.write(self._head(request, response, None, chunked))
            if request.method != "HEAD":
                async for chunk in content:
                    if isinstance(chunk, str):
                        chunk = chunk.encode()
                    if not chunk:
                        continue
                    if self._closed:
                        raise ClientDisconnected("the client closed the connection")
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
                    await self.drain()
                if chunked and not self._closed:
                    transport.write(b"0\r\n\r\n")
        except ClientDisconnected:
            request.keep_alive = False
        except Exception:
            logger.exception("streaming the response to %s %s failed", request.method, request.path)
            request.keep_alive = False
            transport.abort()  # an unterminated chunked body tells the client it is incomplete
        finally:
            aclose = getattr(content, "aclose", None)
            if aclose is not None:
                await aclose()
        self._finish(request)

    async def drain(self) -> None:
        """Wait until the transport's write buffer is below its high-water mark."""
        if self._closed:
            raise ClientDisconnected("the client closed the connection")
        if not self._writing_paused:
            return
        waiter = self._loop.create_future()
        self._drain_waiter = waiter
        try:
            await waiter
        finally:
            self._drain_waiter = None

    def _finish(self, request: Request) -> None:
        self._current = None
        if self._closed:
            self._queue.clear()
            return
        self._queue.popleft()
        if request._chunks is not None or not request._body_done:
            self._drop_body(request)
        if not request.keep_alive:
            self._close()
            return
        self._idle_since = self._state.now
        self._body_since = 0.0
        if self._reading_paused:
            self._update_reading()

    def _drop_body(self, request: Request) -> None:
        """The request is answered: free its buffered body, discard what is still to come."""
        if request._chunks is not None:
            self._buffered_body -= request._buffered
            request._chunks = None
        if not request._body_done:
            request._discard = True

    # -- flow control and deadlines ---------------------------------------------------------

    def body_consumed(self, size: int) -> None:
        """A handler took ``size`` body bytes out of the buffer."""
        self._buffered_body -= size
        self._update_reading()

    def body_wait(self) -> None:
        """A handler waits for body bytes: the body deadline runs."""
        self._body_since = self._state.now

    def send_continue(self) -> None:
        """Tell a client that sent ``Expect: 100-continue`` to send its body."""
        if self.transport is not None and not self._closed:
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def _pause_reading(self) -> None:
        if not self._reading_paused and self.transport is not None and not self._closed:
            self._reading_paused = True
            self.transport.pause_reading()

    def _update_reading(self) -> None:
        if (
            self._reading_paused
            and not self._parsing_stopped
            and len(self._queue) < self._limits.max_pipeline
            and self._buffered_body <= self._limits.body_buffer
        ):
            self._reading_paused = False
            if self._pending_data is not None:
                # Parse what is left of the last read before reading more; not
                # from here, which may be inside a handler reading its body.
                self._loop.call_soon(self._feed_pending, context=self._context)
            else:
                assert self.transport is not None
                self.transport.resume_reading()

    def _feed_pending(self) -> None:
        data, self._pending_data = self._pending_data, None
        if data is None or self._closed or self._parsing_stopped:
            return
        self._feed_slices(data)
        if self._pending_data is None and not self._reading_paused and self.transport is not None:
            self.transport.resume_reading()
        self._process()

    def check_deadline(self, now: float) -> None:
        """Called once a second: close or time out a connection past its deadline."""
        if self._closed or (self.transport is not None and self.transport.is_closing()):
            return
        limits = self._limits
        if self._current is None and not self._queue:
            if self._in_head or self._url:
                # _url alone: a head that began in the bytes that ended the previous
                # request (data_received did not see it begin); timed from that answer.
                since = self._head_since if self._in_head else self._idle_since
                if now - since > limits.head_timeout:
                    if self._head_bytes or self._url:
                        self._write_error_and_close(HTTPRequestTimeout("request head not received in time"))
                    else:
                        self._close()
            elif now - self._idle_since > limits.keepalive_timeout:
                self._close()
        elif self._body_since and now - self._body_since > limits.body_timeout:
            self._body_since = 0.0
            receiving = self._receiving
            if receiving is not None:
                receiving._finish_body(HTTPRequestTimeout("request body not received in time"))
                receiving.keep_alive = False
            self._stop_parsing()

    def _write_error_and_close(self, error: HTTPError) -> None:
        response = error_response(error)
        request = self._broken_request(method_known=bool(self._url))
        body = response.render(self._codec)
        self._write(request, response, body)
        self._close()

    def _broken_request(self, method_known: bool) -> Request:
        """A stand-in for a request whose head could not be parsed, to answer an error and close.

        A HEAD keeps its method when the parser got that far, so that its answer has
        no body: the client would read the body as the start of the next response.
        """
        method = "HEAD" if method_known and self._parser.get_method() == b"HEAD" else "GET"
        request = Request(method, "", b"", "", "1.1", [], self._app, self)
        request.keep_alive = False
        return request

    def _close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    def shutdown(self) -> None:
        """Server shutdown: close now if idle, else after the response in flight."""
        self._close_after_queue = True
        if self._current is None and not self._queue:
            self._close()

    @property
    def idle(self) -> bool:
        return self._current is None and not self._queue


@types.coroutine
def _resume(
    context: contextvars.Context,
    handling: Generator[Any, Any, None],
    awaited: Any,
    throw: BaseException | None = None,
) -> Generator[Any, Any, None]:
    """Drive ``handling`` to its end inside ``context``; its last step yielded ``awaited``.

    What the coroutine yields goes up to the Task, what the Task sends or throws
    comes down into the coroutine, each step run in the request's context: a
    coroutine can change Tasks this way without noticing, as ``yield from`` would,
    but with a context of its own.
    """
    while True:
        if throw is None:
            try:
                value = yield awaited
            except GeneratorExit:
                handling.close()
                raise
            except BaseException as exc:  # noqa: BLE001  # handed on to the coroutine
                throw = exc
                continue
            step: Any = handling.send
            argument: Any = value
        else:
            step, argument, throw = handling.throw, throw, None
        try:
            awaited = context.run(step, argument)
        except StopIteration:
            return

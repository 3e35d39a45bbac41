"""Driving handlers: each queued request's handler, in order, inside the connection's Task.

``HandlerDriver`` takes requests from the head of its connection's queue
(the H1Connection, _h1/), finds their endpoint through the small interface the
app gives (``ServedApp``), runs the handler and hands what it returns to the
writers (writing.py). The common answers (a dict, a small plain Response) are
written and finished in ``_handle`` itself; the rest go through ``_respond``.

It is an object of its own beside the asyncio protocol (protocol.py), which it
sees through ``TransportSide`` (interfaces.py): whether the transport is closed
or paused, and the flow-control calls. The protocol state (the queue, the close decision,
flow-control decisions) is the H1Connection's, reached through its methods.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
import types
from collections.abc import Awaitable, Coroutine, Generator
from contextvars import copy_context
from typing import TYPE_CHECKING, Any

from .._support.contexts import NO_CONTEXT
from ..http.conditional import answered_as_sent
from ..http.exceptions import HTTPError
from ..http.files import FileResponse
from ..http.request import Request
from ..http.requestid import request_id_var, request_numbers, valid_request_id
from ..http.response import StreamResponse, error_response, to_response
from ._h1 import ANSWERING, IDLE, H1Connection
from .filewriting import write_file
from .interfaces import ServedApp, TransportSide
from .shared import ServerState
from .stepping import DONE, INLINE, forget_cancels, resume, run_task, step, stepping
from .writing import begin_stream, short_answer, write_response

if TYPE_CHECKING:
    from ..http.forwarded import TrustedProxies

__all__ = ["HandlerDriver"]

logger = logging.getLogger("aiorest.error")

_monotonic = time.monotonic
# Called by name, not as request_id_var.set(...): about 480 instructions a request fewer
# (measured with bench.instructions on Python 3.11).
_set_request_id = request_id_var.set


class HandlerDriver:
    """Runs the handlers of a connection's requests, one at a time, in arrival order."""

    __slots__ = (
        "_app", "_static_endpoints", "_codec", "_dumps", "_state", "_access_log", "_loop", "_conn", "_queue",
        "_side", "_transport", "_trusted_proxies", "current", "_started", "_runner", "_wake", "_suspended",
        "_serving", "_inline", "grace", "_background", "_waiting",
    )  # fmt: skip

    def __init__(
        self,
        app: ServedApp,
        state: ServerState,
        conn: H1Connection,
        side: TransportSide,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._app = app
        self._static_endpoints = state.static_endpoints  # the server's, kept here: one lookup fewer
        self._codec = app.json
        self._dumps = app.json.dumps
        self._state = state
        self._access_log = state.access_log  # the server's, when it writes one
        # the app's background tasks, and its requests whose tasks wait for their response (empty, mostly)
        self._background = app.background
        self._waiting = app.background.waiting
        self._loop = loop
        self._conn = conn
        self._queue = conn.queue  # the connection's, kept here: one lookup fewer a request
        self._side = side  # the asyncio side of the connection
        self._transport: asyncio.Transport | None = None
        # The server's trusted proxies when the peer is one of them (decided once, in connection_made).
        self._trusted_proxies: TrustedProxies | None = None
        self.current: Request | None = None  # the request being answered: the queue's first
        self._started = 0.0  # when its handler began (monotonic), for the access log
        # the connection's Task (see the note above _new_runner), what wakes it, the handler it is to carry on
        self._runner: asyncio.Task[None] | None = None
        self._wake: asyncio.Future[None] | None = None
        self._suspended: tuple[contextvars.Context, Generator[Any, Any, None], Any] | None = None
        self._serving = False  # _serve is running process(): its Task is the current one
        self._inline = stepping() == INLINE  # how handlers are stepped: see stepping.py
        # A shutdown's idle grace runs (HttpProtocol.shutdown): an idle connection waits for its next
        # request, answered with Connection: close, instead of closing when nothing is left to answer.
        self.grace = False

    def connection_made(self, transport: asyncio.Transport, trusted_proxies: TrustedProxies | None) -> None:
        self._transport = transport
        self._trusted_proxies = trusted_proxies
        # Started now, it waits for work when a request arrives: a cancel before its first step would end it unseen.
        if self._inline:
            self._new_runner()

    def connection_lost(self, cancel: bool) -> None:
        """The transport is gone: the connection's Task ends; with ``cancel``, the handler is cancelled."""
        wake = self._wake
        if wake is not None and not wake.done():
            wake.set_result(None)  # _serve ends
        if cancel and self.current is not None:
            runner = self._runner
            if runner is not None and not runner.done():
                runner.cancel()  # _serve throws it into the handler; the requests queued behind are dropped

    def process(self) -> None:
        """Answer queued requests in order while none is in progress."""
        queue = self._queue
        conn = self._conn
        side = self._side
        if not conn.want_read and not side.reading_paused:
            side.pause_reading()  # the connection's flow decision: a full pipeline or body buffer
        # While the client does not read, answer nothing more: responses would
        # pile up in the transport's buffer without bound.
        # The loop's test is also how it ends, usually on an empty queue: that first.
        while queue and self.current is None and not side.closed and not side.writing_paused:
            request = self.current = queue[0]
            # Its id: the one a trusted proxy sent, if it is a good one, else a new number
            # (formatted only where it is shown: see requestid.py).
            request.raw_id = (self._trusted_proxies is not None and valid_request_id(request.raw_headers)) or next(
                request_numbers
            )
            if self._access_log is not None:
                self._started = _monotonic()
            if conn.head_errors:
                error = conn.take_head_error(request)
                if error is not None:
                    self._respond(request, error_response(error))
                    continue
            try:
                # Most requests are for a route without parameters: App.begin's first step, here.
                methods = self._static_endpoints.get(request.path)
                endpoint = methods.get(request.method) if methods is not None else None
                coro = endpoint(request) if endpoint is not None else self._app.begin(request)
            except Exception as exc:
                coro = self._app.handle_exception(request, exc)
            handling = self._handle(request, coro)
            context = copy_context()
            if not self._inline:
                self._start_task(request, handling, context)
                return  # its done-callback goes on with the queue
            # The handler's first step, run now as the connection's Task (see the note above _new_runner).
            runner = self._runner
            if runner is None:
                runner = self._new_runner()
            if self._serving:  # called from _serve, after a handler that waited
                awaited = context.run(next, handling, DONE)
            else:
                awaited = step(self._loop, runner, context, handling)
            if awaited is not DONE:
                self._suspend(context, handling, awaited)
                return  # it waits: _serve goes on with the queue when it is done
            if runner.cancelling():
                forget_cancels(runner)
        # Usually IDLE here, the first test: the connection stays open.
        send_state = conn.send_state
        if send_state is not IDLE and send_state is not ANSWERING and self.current is None and not queue:
            if not self.grace or conn.stopped:
                side.close()

    # Every handler runs inside a Task from its first line (stepping.py). On the inline path the connection
    # keeps one Task, _serve: _process runs the first step of each request at once (stepping.step), a
    # handler that waits is handed to _serve. On the task path each request gets a Task (_start_task).

    def _start_task(self, request: Request, handling: Generator[Any, Any, None], context: contextvars.Context) -> None:
        task = self._runner = self._loop.create_task(run_task(handling), context=context)
        task.add_done_callback(lambda task: self._task_done(task, request))

    def _task_done(self, task: asyncio.Task[None], request: Request) -> None:
        if self._runner is task:
            self._runner = None
        if self.current is request:
            # Cancelled before its first step (the loop closing, say): nothing answered it.
            self.current = None
            self._conn.abandon()
            self._side.close()
            return
        self.process()

    def _new_runner(self) -> asyncio.Task[None]:
        runner = self._runner = self._loop.create_task(self._serve())
        runner.add_done_callback(self._runner_done, context=NO_CONTEXT)
        return runner

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
                    if self._side.closed:
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
                        await resume(context, handling, None, asyncio.CancelledError())
                        forget_cancels(self._runner)
                        self._process_serving()
                    continue
                self._suspended = None
                carrying_on, suspended = resume(*suspended), None  # not kept: it holds the first future waited for
                await carrying_on
                forget_cancels(self._runner)
                self._process_serving()
        finally:
            self._runner = None  # at once: the next request must not step a finished Task

    def _process_serving(self) -> None:
        self._serving = True
        try:
            self.process()
        finally:
            self._serving = False

    def _runner_done(self, runner: asyncio.Task[None]) -> None:
        if self._runner is runner:  # cancelled before its first step: _serve's finally never ran
            self._runner = None
        # _serve returns only once the connection is closed; anything else is a bug
        # of ours, or a cancellation that reached the Task before its first step.
        if not self._side.closed and (self.current is not None or self._suspended is not None):
            if not runner.cancelled() and runner.exception() is not None:
                logger.error("the connection's task failed", exc_info=runner.exception())
            if self.current is not None:
                self._background.discard(self.current)
            self._suspended = None
            self.current = None
            self._side.close()

    # A generator-based coroutine, not an async def: _process steps it with
    # next() as it is, where a native coroutine needs its __await__() wrapper
    # first (an object and a call a request: about 800 instructions).
    @types.coroutine
    def _handle(self, request: Request, coro: Awaitable[Any]) -> Generator[Any, Any, None]:
        """Run the handler and answer; a dict or a small plain Response is written here."""
        _set_request_id(request.raw_id)  # in the request's own context: see process
        try:
            try:
                # A coroutine: endpoints are async functions, and App._chain makes
                # one of a middleware that is not (yield from takes no other awaitable).
                result = yield from coro  # type: ignore[misc]
            except Exception as exc:
                result = yield from self._app.handle_exception(request, exc)
            conn = self._conn
            # _plain: set when the request was made (see Request's class values).
            if request._plain and request.keep_alive and conn.send_state is ANSWERING:
                # The common answers on a kept-alive HTTP/1.1 connection, in one write.
                message = short_answer(result, self._state, self._dumps, request.raw_id)
                if message is not None:
                    self._transport.write(message)  # type: ignore[union-attr]
                    if self._access_log is not None:
                        self._access_log.log_message(request, message, self._started)
                    # _finish, for a connection that stays open
                    self.current = None
                    if conn.finish_kept(request) and self._side.reading_paused:
                        self._side.resume_reading()
                    if self._waiting:
                        self._background.start(request)  # the response is out: its background tasks start
                    return
            stream = self._respond(request, result)
            if stream is not None:
                yield from stream
            if self._waiting:
                self._background.start(request)
        except asyncio.CancelledError:
            # The handler was cancelled (by itself or by code it gave its Task to):
            # there is no answer to give; the connection closes, the Task goes on
            # (the cancel is taken back with the others, see _forget_cancels).
            self._abandon(request)
        except Exception:  # a bug of ours: never leave the connection hanging
            logger.exception("answering %s %s failed", request.method, request.path)
            self._abandon(request)

    #: The code whose frame answers its local ``request``: the blocked-loop detector finds the request there.
    handler_code = _handle.__code__

    def log_switch(self, request: Request) -> None:
        """``request``'s connection changed protocol (a WebSocket accepted): its access log line, status 101,
        as the 101 goes out (the handler goes on with the WebSocket)."""
        if self._access_log is not None:
            self._access_log.log(request, 101, 0, self._started)

    def _abandon(self, request: Request) -> None:
        self._background.discard(request)
        request.keep_alive = False
        request.answered()
        self.current = None
        self._conn.abandon()
        self._side.close()

    def _finish(self, request: Request) -> None:
        request.answered()  # (a request with a form never takes the short path: see Request.form)
        self.current = None
        if not self._conn.finish(request):
            self._side.close()
        elif self._side.reading_paused and self._conn.want_read:
            self._side.resume_reading()

    def _respond(self, request: Request, result: Any) -> Coroutine[Any, Any, None] | None:
        """Write the response; a StreamResponse gives back the coroutine that streams it.

        The common answers take the short path in ``_handle`` and never come here.
        """
        try:
            response = answered_as_sent(request, to_response(result))  # a 304 to a client whose copy is current
            if isinstance(response, (StreamResponse, FileResponse)):
                if not self._side.closed:
                    return self._stream(request, response)
                body: bytes | bytearray | memoryview = b""
            else:
                body = response.render(self._codec)
        except Exception as exc:
            logger.error("cannot send the response to %s %s", request.method, request.path, exc_info=exc)
            response = error_response(HTTPError())
            body = response.render(self._codec)
        if not self._side.closed:
            assert self._transport is not None
            sent = write_response(
                self._transport,
                response,
                body,
                head_request=request.method == "HEAD",
                header_lines=self._state.header_lines,
                connection=self._conn.connection_line(request),
                request_id=request.raw_id,
            )
            if self._access_log is not None:
                self._access_log.log(request, response.status, sent, self._started)
        self._finish(request)
        return None

    async def _stream(self, request: Request, response: StreamResponse | FileResponse) -> None:
        transport = self._transport
        assert transport is not None
        status = response.status
        try:
            if isinstance(response, FileResponse):  # a Content-Length: HTTP/1.0 keeps alive too
                done = await write_file(
                    transport,
                    self._loop,
                    request,
                    response,
                    self._side.drain,
                    self._codec,
                    header_lines=self._state.header_lines,
                    connection=self._conn.connection_line(request),
                    request_id=request.raw_id,
                )
                status, sent = done if done is not None else (response.status, None)
            else:
                chunked = request.http_version != "1.0"
                if not chunked:
                    request.keep_alive = False  # the end of the body is the end of the connection
                writer, sending = begin_stream(
                    transport,
                    request,
                    response,
                    self._side.drain,
                    chunked=chunked,
                    state=self._state,
                    connection=self._conn.connection_line(request),
                )
                sent = writer.end(await sending)
        except Exception:
            logger.exception("streaming the response to %s %s failed", request.method, request.path)
            self._background.discard(request)  # the response failed as if the handler had raised
            transport.abort()  # an unterminated chunked body tells the client it is incomplete
            sent = None
        if sent is None:
            request.keep_alive = False
        if self._access_log is not None:
            self._access_log.log(request, status, sent or 0, self._started)
        self._finish(request)

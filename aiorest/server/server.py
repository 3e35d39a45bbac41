"""Serving an App: bind, accept, shut down gracefully."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from .._support.errors import one_line
from ..http.forwarded import TrustedProxies
from ..http.limits import Limits
from ..ops.accesslog import AccessLog
from ..ops.admission import Admission
from ..ops.blocking import BlockedLoopDetector
from ..ops.health import HealthProbes
from ..ops.lag import LoopLagMonitor
from ..ops.logformat import LOG_FORMAT, configure_logging
from .config import DEFAULT_QUEUE_TIMEOUT, ServerConfig, tracing_of, with_keywords
from .driving import HandlerDriver
from .listeners import bind_unix, remove_unix_socket
from .protocol import HttpProtocol, ServerState

if TYPE_CHECKING:
    from ..app.application import App, EndpointLayer
    from ..ops.metrics import Metrics
    from ..routing.route import Route

__all__ = ["Server", "ServerConfig", "Limits", "run", "new_event_loop", "DEFAULT_QUEUE_TIMEOUT"]

logger = logging.getLogger("aiorest.server")

_LAG_INTERVAL = 0.05  # the event-loop lag metric's timer

# How long a stopping server keeps its idle kept-alive connections open: a client
# (or a proxy) that sends its next request on one in that time is answered, with
# ``Connection: close``, instead of finding the connection closed under it.
IDLE_GRACE = 2.0


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A uvloop event loop when uvloop is installed, else asyncio's default."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class Server:
    """Runs an App's startup, serves it on a socket, and shuts it down gracefully.

    Its options are a :class:`~aiorest.server.ServerConfig`: give ``config=``, or its
    fields as keywords (which replace those of ``config`` when both are given).
    Give ``host`` and ``port`` (port 0 picks a free one; read ``port`` after
    ``start``), or ``unix`` (a socket path, created with ``unix_mode``), or an
    already bound ``sock`` (which ``url`` then describes, and which the server
    closes at ``stop``; it may be shared with other processes, see :ref:`workers`).
    The production options are in docs/deployment.rst.
    """

    def __init__(self, app: App, config: ServerConfig | None = None, **options: Any) -> None:
        self.config = config = ServerConfig.of(config, options, what="Server()")
        self.app = app
        # Before the app's startup: a Database shares its max_total out between the workers.
        app.state.worker_processes = config.workers
        self.graceful_timeout = config.graceful_timeout
        self.loop_lag_report = config.loop_lag_report
        self._lag = LoopLagMonitor() if config.loop_lag_report else None
        self.host = config.host
        self.port = config.port
        self.unix = config.unix
        self.unix_mode = config.unix_mode
        self.backlog = config.backlog
        self.reuse_port = config.reuse_port
        self.limits = config.limits_over(app.limits or Limits())
        self._sock = sock = config.sock
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            self.host, self.port = sock.getsockname()[:2]
        self._sock_path = sock.getsockname() if sock is not None and sock.family == socket.AF_UNIX else None
        self._unix_bound: os.stat_result | None = None  # the socket file start() made, removed at stop()
        self._state = ServerState(config.server_header)
        self._server: asyncio.Server | None = None
        self._factory: Callable[[], HttpProtocol] | None = None
        self._started = False
        # admission control, cancellation, health and metrics
        self.admission = (
            Admission(config.max_concurrency, max_queue=config.max_queue, queue_timeout=config.queue_timeout)
            if config.max_concurrency
            else None
        )
        self._state.cancel_on_disconnect = config.cancel_on_disconnect
        self.health = (
            HealthProbes(lambda: self._state.draining, app.database, app.readiness.checks) if config.health else None
        )
        self.blocked_loop = BlockedLoopDetector.of(config.blocked_loop_threshold, HandlerDriver.handler_code)
        self.metrics: Metrics | None = None
        if config.metrics:
            from ..ops.metrics import Metrics  # imports prometheus_client: only when asked for

            self.metrics = Metrics(app, self.admission, app.database, websockets=lambda: len(self._state.websockets))
            self.metrics.blocked_loop = self.blocked_loop
            if self._lag is None:
                self._lag = LoopLagMonitor(interval=_LAG_INTERVAL, max_samples=1)
            self._lag.on_sample = self.metrics.observe_lag
        # request ids, trusted proxies, access log
        proxies = TrustedProxies(config.forwarded_allow_ips or [])
        self._state.proxies = proxies or None
        self.access_log = AccessLog(config.access_log, config.access_log_format) if config.access_log else None
        self._state.access_log = self.access_log
        self.tracing = tracing_of(config.tracing)  # OpenTelemetry (docs/tracing.rst), imported only when on

    @property
    def draining(self) -> bool:
        """True once :meth:`stop` has begun: ``/readyz`` answers 503."""
        return self._state.draining

    def _layers_and_routes(self) -> tuple[list[EndpointLayer], list[Route]]:
        """What the options add to the app for this run: endpoint layers (outermost first), routes."""
        layers: list[EndpointLayer] = [] if self.tracing is None else self.tracing.start(self.app)  # outermost
        routes: list[Route] = []
        if self.metrics is not None:
            layers.append(self.metrics.layer)  # outside the gate: its 503s are counted
            routes += self.metrics.routes()
        if self.admission is not None:
            layers.append(self.admission.layer)
        if self.health is not None:
            routes += self.health.routes()
        return layers, routes

    async def start(self) -> None:
        """Run the app's startup, then listen.

        If either fails, what had started is undone (the app's startup by the app,
        a failure to listen by a full :meth:`stop`) before the exception propagates.
        """
        loop = asyncio.get_running_loop()
        layers, routes = self._layers_and_routes()
        self.app.background.reopen(self.limits.max_background_tasks)
        await self.app.startup(layers=layers, routes=routes)
        self._state.static_endpoints = self.app.static_endpoints()
        self._started = True
        self._state.draining = False
        try:
            if self.metrics is not None:
                self.metrics.start(loop)
            self._state.start(loop)
            if self._lag is not None:
                self._lag.start(loop)
            if self.blocked_loop is not None:
                self.blocked_loop.start(loop)
            if self.access_log is not None:
                self.access_log.start()

            def factory() -> HttpProtocol:
                return HttpProtocol(self.app, self._state, self.limits, loop)

            self._factory = factory
            if self._sock is not None:
                self._server = await loop.create_server(factory, sock=self._sock, backlog=self.backlog)
            elif self.unix is not None:
                sock = bind_unix(self.unix, self.unix_mode, self.backlog)
                self._unix_bound = os.stat(self.unix)
                self._server = await loop.create_unix_server(factory, sock=sock, backlog=self.backlog)
            else:
                self._server = await loop.create_server(
                    factory, self.host, self.port, backlog=self.backlog, reuse_port=self.reuse_port or None
                )
                self.port = self._server.sockets[0].getsockname()[1]
        except BaseException:
            await self.stop()
            raise

    @property
    def url(self) -> str:
        """Where the server listens, as a URL (``http://host:port`` or ``unix:path``)."""
        if self.unix is not None or self._sock_path is not None:
            return f"unix:{self.unix or self._sock_path}"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def stop(self, timeout: float | None = None, *, idle_grace: float = 0.0) -> None:
        """Stop accepting, let requests in flight finish (up to ``timeout``, default
        ``graceful_timeout``), then the background tasks (within the same deadline: those
        left are cancelled, each logged), close, shut down the app.

        Connections the kernel had accepted but the server had not yet taken
        (its listen backlog) are taken and served too. An idle kept-alive
        connection is closed at once, or, with ``idle_grace`` seconds (at most
        ``timeout``), kept that long so that a request sent on it meanwhile is
        answered, with ``Connection: close``.
        """
        if timeout is None:
            timeout = self.graceful_timeout
        self._state.draining = True
        loop = asyncio.get_running_loop()
        connections = list(self._state.connections)
        if self._server is not None:
            await self._take_backlog(loop)  # those taken answer with Connection: close already
        for connection in connections:
            connection.shutdown(close_idle=idle_grace <= 0)
        self._state.end_streams()  # event streams end now, each with its chunked body's end
        now = loop.time()
        deadline = now + timeout
        idle_deadline: float | None = now + min(idle_grace, timeout)
        while self._state.connections and loop.time() < deadline:
            await asyncio.sleep(0.05)  # first, so that those taken read what their clients had sent
            if idle_deadline is not None and loop.time() >= idle_deadline:
                idle_deadline = None
                for connection in list(self._state.connections):
                    connection.shutdown()  # those still idle now
        for connection in list(self._state.connections):
            if connection.transport is not None:
                connection.transport.abort()
        self.app.uploads.close_all()  # the temporary files of uploads cut short
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
        await self.app.background.drain(deadline - loop.time())
        self._state.stop()
        if self._lag is not None:
            self._lag.stop()
            if self.loop_lag_report:
                self._lag.write(self.loop_lag_report)
        if self.health is not None:
            await self.health.close()
        if self.blocked_loop is not None:
            self.blocked_loop.stop()  # before the metrics' last flush
        if self.metrics is not None:
            self.metrics.stop()
        if self.access_log is not None:
            self.access_log.stop()
        if self.unix is not None and self._unix_bound is not None:
            remove_unix_socket(self.unix, self._unix_bound)
            self._unix_bound = None
        if self._started:
            self._started = False
            await self.app.shutdown()
        if self.tracing is not None:
            self.tracing.stop()

    async def _take_backlog(self, loop: asyncio.AbstractEventLoop) -> None:
        """Close the listening sockets, first taking the connections waiting in their backlog.

        Closing a listening socket resets the connections in its backlog, whose
        clients have sent their requests already. Taken here, they are answered.
        (A socket shared with other processes stays open in them: nothing waiting
        in it is lost, and what is taken here is taken from them.)
        """
        assert self._server is not None
        copies = [socket.socket(fileno=os.dup(listening.fileno())) for listening in self._server.sockets]
        self._server.close()
        taken: list[socket.socket] = []
        for copy in copies:
            with copy:
                copy.setblocking(False)
                while len(taken) < self.backlog:
                    try:
                        taken.append(copy.accept()[0])
                    except OSError:  # BlockingIOError: none left
                        break
        factory = self._factory
        assert factory is not None

        def closing() -> HttpProtocol:  # its first answer says Connection: close, however fast it comes
            protocol = factory()
            protocol.shutdown(close_idle=False)
            return protocol

        for connection in taken:
            await loop.connect_accepted_socket(closing, connection)

    async def serve_forever(
        self, stop: asyncio.Event | None = None, *, ready: Callable[[], object] | None = None
    ) -> None:
        """Start, serve until ``stop`` is set (or SIGINT/SIGTERM arrive), then stop.

        ``ready`` is called once the server listens. A stop asked for during the
        startup cancels it: the app undoes what it had started, and this returns.
        A startup that fails raises, once undone.
        """
        stop = stop or asyncio.Event()
        with _signals_set(stop):
            if not await self._start_unless(stop):
                logger.info("aiorest stopped during startup")
                return
            logger.info("aiorest serving on %s", self.url)
            if ready is not None:
                ready()
            try:
                await stop.wait()
            finally:
                logger.info("aiorest shutting down")
                await self.stop(idle_grace=IDLE_GRACE)

    async def _start_unless(self, stop: asyncio.Event) -> bool:
        """Start, unless ``stop`` is set first: then the startup is cancelled. True if started."""
        starting = asyncio.ensure_future(self.start())
        stopping = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait((starting, stopping), return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
            starting.cancel()  # nothing once it is done
            await asyncio.wait((starting, stopping))  # the startup undone, whatever happened here
        if starting.cancelled():
            return False
        starting.result()  # raises what the startup raised
        return True


def run(
    app: App,
    config: ServerConfig | None = None,
    *,
    ready: Callable[[], object] | None = None,
    startup_failed: Callable[[str], object] | None = None,
    **options: Any,
) -> None:
    """Serve ``app`` until SIGINT or SIGTERM, on uvloop when it is installed.

    The options are a :class:`~aiorest.server.ServerConfig`, given as ``config=`` or as keywords, as for
    :class:`Server`; its ``log_level`` configures logging. ``ready`` is called once the server listens. A startup
    that fails is undone, logged in one line (its traceback at debug level), and ends the process: ``SystemExit(1)``;
    given ``startup_failed``, that line is passed to it instead of being logged (a worker hands it to its parent
    this way). ``reload=True``: a parent restarts the app in a worker when its code changes (:ref:`reload`).
    """
    if options.pop("reload", False):  # a parent that restarts a worker on a change (process/running.py)
        from .process.running import run_app_reloading

        return run_app_reloading(app, config, options)
    config = ServerConfig.of(config, options, what="run()")
    configure_logging(config.log_level, config.log_format, LOG_FORMAT)
    server = Server(app, config)
    listening = False

    def serving() -> None:
        nonlocal listening
        listening = True
        if ready is not None:
            ready()

    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        try:
            runner.run(server.serve_forever(ready=serving))
            return
        except Exception as exc:
            if listening:
                raise
            if startup_failed is not None:
                startup_failed(one_line(exc))
            else:
                logger.error("startup failed: %s", one_line(exc))
            logger.debug("the startup failure's traceback", exc_info=exc)
    raise SystemExit(1)


with_keywords(Server.__init__, after="config")
with_keywords(run, after="config")


@contextlib.contextmanager
def _signals_set(stop: asyncio.Event) -> Iterator[None]:
    """While inside, SIGINT and SIGTERM set ``stop``; after, they get back the handlers they had."""
    loop = asyncio.get_running_loop()
    previous = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        handler = signal.getsignal(signum)
        try:
            loop.add_signal_handler(signum, stop.set)
        except (NotImplementedError, RuntimeError):  # not Unix, or not the main thread
            continue
        previous[signum] = handler
    try:
        yield
    finally:
        for signum, handler in previous.items():
            loop.remove_signal_handler(signum)
            if handler is not None:  # None: a handler not set from Python, which we cannot put back
                signal.signal(signum, handler)

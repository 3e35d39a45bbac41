"""Serving an App: bind, accept, shut down gracefully."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import stat
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from .accesslog import AccessLog
from .lag import LoopLagMonitor
from .limits import Limits
from .protocol import HttpProtocol, ServerState
from .proxies import TrustedProxies

if TYPE_CHECKING:
    from .app import App

__all__ = ["Server", "Limits", "run", "new_event_loop"]

logger = logging.getLogger("aiorest.server")

# What run() logs with: the request id is "-" outside a request (see requestid.py).
LOG_FORMAT = "%(asctime)s [%(request_id)s] %(levelname)s %(name)s: %(message)s"


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A uvloop event loop when uvloop is installed, else asyncio's default."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class Server:
    """Runs an App's startup, serves it on a socket, and shuts it down gracefully.

    Give ``host`` and ``port`` (port 0 picks a free one; read ``port`` after
    ``start``), or ``unix`` (a socket path, created with ``unix_mode``), or an
    already bound ``sock``.

    ``forwarded_allow_ips``: the proxies whose forwarding headers are believed
    (addresses, CIDR ranges, ``unix``, ``*``; a list or a comma-separated string;
    default none). ``access_log``: where to write a line per request (a path, or
    ``-`` for stdout; default none), in ``access_log_format`` (``combined`` or ``json``).
    See docs/deployment.rst.
    """

    def __init__(
        self,
        app: App,
        *,
        host: str = "127.0.0.1",
        port: int = 8080,
        unix: str | None = None,
        unix_mode: int = 0o666,
        sock: socket.socket | None = None,
        backlog: int = 2048,
        limits: Limits | None = None,
        server_header: str | None = "aiorest",
        reuse_port: bool = False,
        graceful_timeout: float = 30.0,
        loop_lag_report: str | None = None,
        # request ids, trusted proxies, access log
        forwarded_allow_ips: str | list[str] | None = None,
        access_log: str | None = None,
        access_log_format: str = "combined",
    ) -> None:
        self.app = app
        self.graceful_timeout = graceful_timeout
        self.loop_lag_report = loop_lag_report
        self._lag = LoopLagMonitor() if loop_lag_report else None
        self.host = host
        self.port = port
        self.unix = unix
        self.unix_mode = unix_mode
        self.backlog = backlog
        self.reuse_port = reuse_port
        self.limits = limits or app.limits or Limits()
        self._sock = sock
        self._state = ServerState(server_header)
        self._server: asyncio.AbstractServer | None = None
        self._started = False
        proxies = TrustedProxies(forwarded_allow_ips or [])
        self._state.proxies = proxies or None
        self.access_log = AccessLog(access_log, access_log_format) if access_log else None
        self._state.access_log = self.access_log

    async def start(self) -> None:
        """Run the app's startup, then listen.

        If either fails, what had started is undone (the app's startup by the app,
        a failure to listen by a full :meth:`stop`) before the exception propagates.
        """
        loop = asyncio.get_running_loop()
        await self.app.startup()
        self._started = True
        try:
            self._state.start(loop)
            if self._lag is not None:
                self._lag.start(loop)
            if self.access_log is not None:
                self.access_log.start()

            def factory() -> HttpProtocol:
                return HttpProtocol(self.app, self._state, self.limits, loop)

            if self._sock is not None:
                self._server = await loop.create_server(factory, sock=self._sock, backlog=self.backlog)
            elif self.unix is not None:
                with contextlib.suppress(FileNotFoundError):
                    if stat.S_ISSOCK(os.stat(self.unix).st_mode):
                        os.unlink(self.unix)
                self._server = await loop.create_unix_server(factory, self.unix, backlog=self.backlog)
                os.chmod(self.unix, self.unix_mode)
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
        if self.unix is not None:
            return f"unix:{self.unix}"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def stop(self, timeout: float | None = None) -> None:
        """Stop accepting, let requests in flight finish (up to ``timeout``, default
        ``graceful_timeout``), close, shut down the app."""
        if timeout is None:
            timeout = self.graceful_timeout
        if self._server is not None:
            self._server.close()
        connections = list(self._state.connections)
        for connection in connections:
            connection.shutdown()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self._state.connections and loop.time() < deadline:
            await asyncio.sleep(0.05)
        for connection in list(self._state.connections):
            if connection.transport is not None:
                connection.transport.abort()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
        self._state.stop()
        if self._lag is not None and self.loop_lag_report:
            self._lag.stop()
            self._lag.write(self.loop_lag_report)
        if self.access_log is not None:
            self.access_log.stop()
        if self.unix is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.unix)
        if self._started:
            self._started = False
            await self.app.shutdown()

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
                await self.stop()

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
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    unix: str | None = None,
    limits: Limits | None = None,
    log_level: str = "info",
    server_header: str | None = "aiorest",
    reuse_port: bool = False,
    unix_mode: int = 0o666,
    backlog: int = 2048,
    graceful_timeout: float = 30.0,
    loop_lag_report: str | None = None,
    ready: Callable[[], object] | None = None,
    # request ids, trusted proxies, access log
    forwarded_allow_ips: str | list[str] | None = None,
    access_log: str | None = None,
    access_log_format: str = "combined",
) -> None:
    """Serve ``app`` until SIGINT or SIGTERM, on uvloop when it is installed.

    The options are those of :class:`Server`; ``log_level`` configures logging;
    ``ready`` is called once the server listens. A startup that fails is undone,
    logged in one line (its traceback at debug level), and ends the process:
    ``SystemExit(1)``.
    """
    logging.basicConfig(level=log_level.upper(), format=LOG_FORMAT)
    server = Server(
        app,
        host=host,
        port=port,
        unix=unix,
        unix_mode=unix_mode,
        backlog=backlog,
        limits=limits,
        server_header=server_header,
        reuse_port=reuse_port,
        graceful_timeout=graceful_timeout,
        loop_lag_report=loop_lag_report,
        forwarded_allow_ips=forwarded_allow_ips,
        access_log=access_log,
        access_log_format=access_log_format,
    )
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
            logger.error("startup failed: %s", _one_line(exc))
            logger.debug("the startup failure's traceback", exc_info=exc)
    raise SystemExit(1)


def _one_line(exc: BaseException) -> str:
    """``Type: first line of the message (notes)``: an error to log in one line."""
    lines = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    notes = getattr(exc, "__notes__", None)
    return f"{text} ({'; '.join(notes)})" if notes else text


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

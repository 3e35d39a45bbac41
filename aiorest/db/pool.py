"""The pool under Database: first come first served, sized per host, and what to do when connections are lost.

Why a pool of our own and not aiopg's: ours hands a released connection to the
oldest waiter (aiopg.Pool's Condition wake-ups are not first-come first-served,
which gave second-long tails under load), keeps one cursor per connection,
prepares each statement once per connection, and awaits a query without
``asyncio.wait_for`` (a ``call_later`` handle is the statement timeout). These
four measured 2x the throughput of the usual aiopg.Pool code (../shared/PERF.md).

Sizing (``max_size`` per worker process, or ``max_total`` shared out between
the host's workers, and the check at open that the host's pools fit in
PostgreSQL) is sizing.py's.
Connections lost with their server are dropped quietly and replaced; one log
line per burst counts them, and so do requests turned away because the pool
was exhausted or PostgreSQL refused a connection.
"""

from __future__ import annotations

import asyncio
import os
from collections import deque
from typing import Literal

from .._support.errors import first_line
from .driver import ConnectOptions, DatabaseConnection, Driver, driver_named
from .errors import DISCONNECTS, DatabaseUnavailable, PoolTimeout
from .reports import PoolReports, logger
from .sizing import check_capacity, initial_max_size, share_out

__all__ = ["Pool"]


_CONNECT_ERRORS = (*DISCONNECTS, OSError, TimeoutError)
# Seconds a cancelled task's statement may take to end (server-side cancel,
# then ROLLBACK) before its connection is closed instead of reused.
_RECOVER_TIMEOUT = 5.0
# A pool below min_size (or with requests waiting) reconnects in the background,
# this long after a failed attempt, doubling up to _RECONNECT_MAX_DELAY.
_RECONNECT_DELAY = 0.05
_RECONNECT_MAX_DELAY = 1.0


class Pool:
    """A bounded FIFO pool of connections: what a Database holds (``db.pool``), which documents the options.

    ``acquire`` gives a connection, ``release`` takes it back; the Database pairs them.
    """

    def __init__(
        self,
        dsn: str | None = None,
        *,
        min_size: int = 2,
        max_size: int | None = None,
        acquire_timeout: float = 5.0,
        statement_timeout: float = 30.0,
        connect_timeout: float = 5.0,
        prepare: bool | None = None,
        application_name: str = "aiorest",
        max_total: int | None = None,
        pooler: Literal["transaction", "session"] | None = None,
        workers: int | None = None,
        driver: Literal["psycopg2", "aiopg"] | Driver = "psycopg2",
    ) -> None:
        self.driver = driver_named(driver) if isinstance(driver, str) else driver
        # Until open() shares max_total out between the workers (known by then, not
        # necessarily when the app is made): the whole of it, for one worker.
        self.max_size = initial_max_size(min_size, max_size, max_total)
        if workers is not None and workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        if pooler not in (None, "transaction", "session"):
            raise ValueError(f"pooler must be 'transaction', 'session' or None, got {pooler!r}")
        if prepare and not self.driver.prepares:
            raise ValueError(f"the {self.driver.name} driver does not prepare statements: prepare=True cannot work")
        if pooler == "transaction" and prepare:
            raise ValueError(
                "prepare=True cannot work behind a pooler in transaction mode: the next transaction"
                " may run on a server connection that never saw the PREPARE"
            )
        self.dsn = dsn
        self.max_total = max_total
        self.pooler = pooler
        self._min_wanted = min_size
        self.min_size = min_size
        self._workers_given = workers
        self.workers = workers or 1  # until the server says, at startup (see setup)
        self.acquire_timeout = acquire_timeout
        self.statement_timeout = statement_timeout
        self.connect_timeout = connect_timeout
        self.prepare = self.driver.prepares and pooler != "transaction" if prepare is None else prepare
        self.application_name = application_name
        self._options: ConnectOptions | None = None  # open() makes them
        self._idle: deque[DatabaseConnection] = deque()
        self._waiters: deque[asyncio.Future[DatabaseConnection]] = deque()
        self._given_up = 0  # waiters that timed out or were cancelled since the last sweep
        self._waits = 0  # acquisitions that had to wait for a connection, ever
        self._size = 0  # open connections plus those being opened
        self._closed = True
        self._reconnecting: asyncio.Task[None] | None = None
        self._recovering: set[asyncio.Task[None]] = set()
        self.reports = PoolReports(self)

    def adopt_workers(self, workers: int) -> None:
        """The server's count of worker processes, told before startup: kept unless ``workers`` was given."""
        if self._workers_given is None:
            self.workers = workers

    async def open(self) -> None:
        """Connect ``min_size`` connections, and check the host's pools fit in the server (else raise).

        Raises if PostgreSQL cannot be reached, or (unless ``pooler`` is set, or
        ``min_size`` is 0) if ``max_size`` × ``workers`` exceeds its
        ``max_connections`` less its reserved connections.
        """
        if self.dsn is None and self.driver.owns_connections:
            self.dsn = os.environ.get("DATABASE_URL")
        if not self.dsn and self.driver.owns_connections:
            raise RuntimeError("no database: pass Database(dsn) or set DATABASE_URL")
        if self.max_total is not None:  # the workers are known now: the app may have been made before they were
            self.max_size, self.min_size = share_out(self.max_total, self.workers, self._min_wanted)
        self.driver.opening()
        # The same for every connection: made once here, not at each connect (on a borrowed
        # aiopg pool, each statement's).
        self._options = ConnectOptions(
            dsn=self.dsn,
            application_name=self.application_name,
            prepare=self.prepare,
            statement_timeout=self.statement_timeout,
            # Behind a pooler in transaction mode a session's SET lands on
            # whichever server connection runs it, and stays there for others.
            cancel_at_timeout=self.pooler == "transaction",
            lost=self._lost,
        )
        self._closed = False
        try:
            for _ in range(self.min_size):
                self._size += 1
                self._idle.append(await self._connect())
            if self.pooler is None and self._idle:
                await check_capacity(self._idle[0], self.max_size, self.workers)
            elif self.pooler is None and not self.driver.owns_connections:
                # A borrowed pool keeps no connection: one is borrowed for the check.
                self._size += 1
                connection = await self._connect()
                try:
                    await check_capacity(connection, self.max_size, self.workers)
                finally:
                    self._discard(connection)
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        """Close every idle connection; connections in use close when released."""
        self._closed = True
        self._fail_waiters("the database pool is closed")
        while self._idle:
            self._discard(self._idle.popleft())
        for recovering in self._recovering:
            recovering.cancel()  # its connection is closed on the way out
        if self._recovering:
            await asyncio.wait(self._recovering)
        self.reports.flush()
        if self._reconnecting is not None:
            self._reconnecting.cancel()
            await asyncio.wait([self._reconnecting])
            self._reconnecting = None  # _reopen's finally never ran if it was cancelled before its first step

    @property
    def closed(self) -> bool:
        """Not open, or closed: acquiring raises DatabaseUnavailable."""
        return self._closed

    @property
    def size(self) -> int:
        """Connections open or being opened."""
        return self._size

    @property
    def idle(self) -> int:
        """Connections open and free."""
        return len(self._idle)

    @property
    def in_use(self) -> int:
        """Connections held by requests (or being opened for one)."""
        return self._size - len(self._idle)

    @property
    def waiting(self) -> int:
        """Requests waiting for a connection now."""
        return sum(1 for waiter in self._waiters if not waiter.done())

    @property
    def waits(self) -> int:
        """Acquisitions that had to wait for a connection since the pool was made (a counter)."""
        return self._waits

    async def _connect(self) -> DatabaseConnection:
        """A new connection, which the caller has counted in ``_size`` (uncounted on failure)."""
        options = self._options
        assert options is not None, "open() first"
        try:
            async with asyncio.timeout(self.connect_timeout):
                connection = await self.driver.connect(options)
                # A borrowed connection's session is the app's: left as found.
                if self.pooler != "transaction" and self.driver.owns_connections:
                    try:
                        timeout = int(self.statement_timeout * 1000)
                        await connection.execute(f"SET statement_timeout = {timeout}", prepare=False)
                    except BaseException:
                        connection.close()
                        raise
        except BaseException:
            self._size -= 1
            self._reconnect()
            raise
        return connection

    # -- acquire and release ---------------------------------------------------------

    async def acquire(self, fresh: bool = False) -> DatabaseConnection:
        """An idle connection, else a new one, else the next one released.

        ``fresh``: a new connection if the pool has room, not an idle one.
        """
        if self._closed:
            raise DatabaseUnavailable("the database pool is closed")
        while self._idle and not fresh:
            connection = self._idle.popleft()
            if connection.reusable:
                return connection
            self._discard(connection)
        if self._size < self.max_size:
            self._size += 1
            try:
                return await self._connect()
            except _CONNECT_ERRORS as exc:
                self.reports.refused(exc)
                raise DatabaseUnavailable() from exc
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[DatabaseConnection] = loop.create_future()
        self._waiters.append(waiter)
        self._waits += 1
        timer = loop.call_later(self.acquire_timeout, _expire, waiter)
        try:
            return await waiter
        except PoolTimeout:
            self.reports.timeouts.note("")
            raise
        except asyncio.CancelledError:
            if _handed(waiter):
                self.release(waiter.result())  # handed a connection just as we were cancelled
            raise
        finally:
            timer.cancel()
            if not waiter.done():
                waiter.cancel()
            if not _handed(waiter):  # release took a handed waiter off the queue
                self._gave_up()

    def _gave_up(self) -> None:
        """A waiter timed out, was cancelled or failed; release and _short skip it.

        Taking it out of the queue at once would scan it, O(n) a request with
        thousands waiting. Instead the queue is swept once the waiters that gave
        up since the last sweep could be half of it: O(1) each, amortised. (The
        count is an upper bound — release and _short also pop such waiters —
        which only makes a sweep come earlier.)
        """
        self._given_up += 1
        if self._given_up > 64 and self._given_up * 2 > len(self._waiters):
            self._waiters = deque(waiter for waiter in self._waiters if not waiter.done())
            self._given_up = 0

    def release(self, connection: DatabaseConnection) -> None:
        if connection.interrupted and not connection.broken and not self._closed:
            task = asyncio.get_running_loop().create_task(self._recover(connection))
            self._recovering.add(task)
            task.add_done_callback(self._recovering.discard)
            return
        if self._closed or not connection.reusable:
            self._discard(connection)
            return
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(connection)
                return
        if self.driver.owns_connections:
            self._idle.append(connection)
        else:
            self._discard(connection)  # borrowed: back to the app's pool, for its own code too

    async def _recover(self, connection: DatabaseConnection) -> None:
        """End the statement a cancelled task left on ``connection``, then pool it again (or close it)."""
        try:
            async with asyncio.timeout(_RECOVER_TIMEOUT):
                await connection.recover()
        except Exception as exc:
            logger.debug("closing a connection whose cancelled statement did not end cleanly: %r", exc)
        finally:
            if not connection.reusable:  # failed, timed out, or cancelled by close(): not pooled again
                connection.broken = True
            self.release(connection)

    def _discard(self, connection: DatabaseConnection) -> None:
        self._size -= 1
        connection.close()
        self._reconnect()

    def _fail_waiters(self, message: str, cause: BaseException | None = None) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                error = DatabaseUnavailable(message)
                error.__cause__ = cause
                waiter.set_exception(error)
        self._given_up = 0

    # -- lost connections ---------------------------------------------------------------

    def _lost(self, connection: DatabaseConnection, exc: BaseException) -> None:
        """``connection`` died with its backend (closed already): drop it if idle, log it, reconnect."""
        if self._closed:
            return
        if connection in self._idle:
            self._idle.remove(connection)
            self._size -= 1
        self.reports.losses.note(first_line(exc))
        self._reconnect()

    def _reconnect(self) -> None:
        """Reopen connections in the background while the pool is short (see _short)."""
        reconnecting = self._reconnecting
        if (reconnecting is None or reconnecting.done()) and not self._closed and self._short():
            self._reconnecting = asyncio.get_running_loop().create_task(self._reopen())

    def _short(self) -> bool:
        """Below min_size, or below max_size with requests waiting."""
        while self._waiters and self._waiters[0].done():
            self._waiters.popleft()
        return self._size < self.min_size or (bool(self._waiters) and self._size < self.max_size)

    async def _reopen(self) -> None:
        delay = _RECONNECT_DELAY
        try:
            while not self._closed and self._short():
                self._size += 1
                try:
                    connection = await self._connect()
                except Exception as exc:
                    # Still unreachable: the waiters hear it now rather than at their timeout.
                    if self._waiters:
                        self.reports.refused(exc)
                    self._fail_waiters("database unavailable", exc)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, _RECONNECT_MAX_DELAY)
                    continue
                delay = _RECONNECT_DELAY
                self.release(connection)
        finally:
            self._reconnecting = None


def _handed(waiter: asyncio.Future[DatabaseConnection]) -> bool:
    """Whether ``waiter`` was given a connection (not timed out, failed or cancelled)."""
    return waiter.done() and not waiter.cancelled() and waiter.exception() is None


def _expire(waiter: asyncio.Future[DatabaseConnection]) -> None:
    if not waiter.done():
        waiter.set_exception(PoolTimeout())

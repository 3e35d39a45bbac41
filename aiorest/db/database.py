"""PostgreSQL for aiorest: a first-come first-served pool of psycopg2 asynchronous connections.

    db = Database(max_size=32)            # DSN from DATABASE_URL, or Database(dsn)
    db.setup(app)                         # opened at startup, closed at shutdown

    @app.get("/notes/{id:int}")
    async def get_note(request):
        row = await db.fetchone("SELECT * FROM notes WHERE id = %s", (request.path_params["id"],))
        ...

Why a pool of our own and not aiopg's: ours hands a released connection to the
oldest waiter (aiopg.Pool's Condition wake-ups are not first-come first-served,
which gave second-long tails under load), keeps one cursor per connection,
prepares each statement once per connection, and awaits a query without
``asyncio.wait_for`` (a ``call_later`` handle is the statement timeout). These
four measured 2x the throughput of the usual aiopg.Pool code (../shared/PERF.md).
The connections are our own too, one ``_Connection`` each (pgconnection.py says why).

Failures are HTTP answers (the exceptions exported here are HTTPErrors, defined
in dberrors.py with the mapping from psycopg2's): pool exhausted past the
acquire timeout and database unreachable or restarting → 503 with
``Retry-After``; unique violation → 409; check, foreign-key or not-null
violation, or a value PostgreSQL refuses → 422; statement timeout → 503. Connections lost with their server
are dropped quietly and replaced; one log line per burst counts them, and so
do requests turned away because the pool was exhausted or PostgreSQL refused
a connection.

Sizing: ``max_size`` is per worker process; ``max_total`` is the host's, shared
out between the host's workers (``aiorest run --workers N``: the server tells
the app at startup, see ``setup``). At open, the host's total is checked against what PostgreSQL can give
(``max_connections`` less its reserved connections): a pool that cannot fit
refuses to open, since under load it would turn requests into 503s and lock
out every other client of that server.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Literal

import psycopg2
import psycopg2.errors

from .._support.bursts import BurstLog
from .connection import _connect_raw, _Connection
from .errors import (
    DISCONNECTS,
    ConstraintViolation,
    DatabaseError,
    DatabaseUnavailable,
    InvalidValue,
    NulCharacter,
    Params,
    PoolTimeout,
    StatementTimeout,
    UniqueViolation,
    first_line,
    locate_nul,
    translate,
)

if TYPE_CHECKING:
    from ..app.application import App

__all__ = [
    "Database",
    "Transaction",
    "DatabaseError",
    "DatabaseUnavailable",
    "PoolTimeout",
    "StatementTimeout",
    "UniqueViolation",
    "ConstraintViolation",
    "InvalidValue",
    "NulCharacter",
]

logger = logging.getLogger("aiorest.db")

_CONNECT_ERRORS = (*DISCONNECTS, OSError, TimeoutError)
# Lost connections, and requests turned away, are logged as one line per burst:
# a restart ends every connection within milliseconds, so the line waits
# _REPORT_DELAY to count the burst; and at most one line per _REPORT_GAP, so a
# flapping server or a lasting overload cannot flood the log (each line counts
# every event since the previous one).
_REPORT_DELAY = 0.5
_REPORT_GAP = 10.0
# Seconds a cancelled task's statement may take to end (server-side cancel,
# then ROLLBACK) before its connection is closed instead of reused.
_RECOVER_TIMEOUT = 5.0
# A pool below min_size (or with requests waiting) reconnects in the background,
# this long after a failed attempt, doubling up to _RECONNECT_MAX_DELAY.
_RECONNECT_DELAY = 0.05
_RECONNECT_MAX_DELAY = 1.0


def _burst_log(message: Callable[[int, str], str]) -> BurstLog:
    return BurstLog(logger, message, every=_REPORT_GAP, delay=_REPORT_DELAY)


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


class _Queries:
    """The row helpers, shared by Database (a connection per call) and Transaction."""

    async def _execute(self, sql: str, params: Params) -> Any:
        raise NotImplementedError

    async def fetchall(self, sql: str, params: Params = None) -> list[dict[str, Any]]:
        """Every row, as dicts keyed by column name."""
        cursor = await self._execute(sql, params)
        names = [column.name for column in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    async def fetchrows(self, sql: str, params: Params = None) -> list[tuple[Any, ...]]:
        """Every row, as tuples in column order: for many rows, cheaper than dicts."""
        cursor = await self._execute(sql, params)
        rows: list[tuple[Any, ...]] = cursor.fetchall()
        return rows

    async def fetchone(self, sql: str, params: Params = None) -> dict[str, Any] | None:
        """The first row as a dict, or None."""
        cursor = await self._execute(sql, params)
        row = cursor.fetchone()
        if row is None:
            return None
        return {column.name: value for column, value in zip(cursor.description, row, strict=True)}

    async def fetchval(self, sql: str, params: Params = None) -> Any:
        """The first column of the first row, or None."""
        cursor = await self._execute(sql, params)
        row = cursor.fetchone()
        return None if row is None else row[0]

    async def execute(self, sql: str, params: Params = None) -> int:
        """Run a statement; returns the number of rows it affected."""
        cursor = await self._execute(sql, params)
        return int(cursor.rowcount)


class Transaction(_Queries):
    """One held connection: a transaction (depth 1, savepoints deeper), or autocommit (depth 0)."""

    def __init__(self, connection: _Connection, depth: int) -> None:
        self._connection = connection
        self._depth = depth

    async def _execute(self, sql: str, params: Params, prepare: bool = True) -> Any:
        try:
            return await self._connection.execute(sql, params, prepare=prepare)
        except psycopg2.Error as exc:
            raise translate(exc, sql) from exc

    async def execute_script(self, sql: str) -> None:
        """Run SQL text as is: several statements, never prepared, no parameters."""
        await self._execute(sql, None, prepare=False)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Transaction]:
        """BEGIN on an autocommit connection, else a savepoint; rolled back on an exception."""
        if self._depth == 0:
            begin, commit, rollback = "BEGIN", "COMMIT", "ROLLBACK"
        else:
            name = f"aiorest_sp_{self._depth}"
            begin, commit, rollback = f"SAVEPOINT {name}", f"RELEASE SAVEPOINT {name}", f"ROLLBACK TO SAVEPOINT {name}"
        await self._execute(begin, None, prepare=False)
        try:
            yield Transaction(self._connection, self._depth + 1)
        except BaseException:
            # A statement cancelled with its task still runs: the pool ends it
            # and rolls the whole transaction back when the connection returns.
            if not self._connection.broken and not self._connection.interrupted:
                await self._execute(rollback, None, prepare=False)
            raise
        await self._execute(commit, None, prepare=False)


_current: contextvars.ContextVar[Transaction | None] = contextvars.ContextVar("aiorest_db_tx", default=None)


class Database(_Queries):
    """A bounded pool of PostgreSQL connections, first come first served.

    ``dsn``: a libpq URL or key=value string; default ``$DATABASE_URL``.
    ``min_size`` connections open at startup, up to ``max_size`` per worker
    process (default 16), or up to ``max_total`` for the whole host, shared out
    between its ``workers`` (give one of the two). ``workers``: the worker processes
    of this host; by default, those of the server the app runs on (see
    :class:`~aiorest.server.ServerConfig`), else 1. At open, the
    host's total (per worker × workers) must fit in PostgreSQL's
    ``max_connections`` less its reserved connections, or open raises.
    ``acquire_timeout``: seconds a request may wait for a free connection (then
    503). ``statement_timeout``: seconds a statement may run (then 503).
    ``prepare``: prepare each statement once per connection (default: on,
    unless ``pooler="transaction"``). ``pooler``: ``"transaction"`` or
    ``"session"`` when the DSN names a pooler such as PgBouncer in that mode:
    the capacity check is skipped (the pooler holds the server connections),
    and in transaction mode statements are not prepared and the statement
    timeout is enforced by cancelling from the client, not by a session SET.
    ``application_name`` names the connections in ``pg_stat_activity``.

    Inside ``async with db.transaction():`` the helpers of ``db`` use the
    transaction's connection, so code that takes ``db`` works in and out of one.
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
    ) -> None:
        # Until open() shares max_total out between the workers (known by then, not
        # necessarily when the app is made): the whole of it, for one worker.
        self.max_size: int
        if max_total is None:
            self.max_size = 16 if max_size is None else max_size
            if not 0 <= min_size <= self.max_size or self.max_size < 1:
                raise ValueError(f"need 0 <= min_size <= max_size and max_size >= 1, got {min_size}, {max_size}")
        elif max_size is not None:
            raise ValueError("give max_size (per worker process) or max_total (for the host's workers), not both")
        elif max_total < 1 or min_size < 0:
            raise ValueError(f"need max_total >= 1 and min_size >= 0, got {max_total}, {min_size}")
        else:
            self.max_size = max_total
        if workers is not None and workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        if pooler not in (None, "transaction", "session"):
            raise ValueError(f"pooler must be 'transaction', 'session' or None, got {pooler!r}")
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
        self.prepare = pooler != "transaction" if prepare is None else prepare
        self.application_name = application_name
        self._idle: deque[_Connection] = deque()
        self._waiters: deque[asyncio.Future[_Connection]] = deque()
        self._given_up = 0  # waiters that timed out or were cancelled since the last sweep
        self._waits = 0  # acquisitions that had to wait for a connection, ever
        self._size = 0  # open connections plus those being opened
        self._closed = True
        self._reconnecting: asyncio.Task[None] | None = None
        self._recovering: set[asyncio.Task[None]] = set()
        self._losses = _burst_log(
            lambda count, reason: (
                f"lost {_plural(count, 'connection')} to PostgreSQL: {reason}"
                + ("" if self._closed else "; reconnecting")
            )
        )
        self._timeouts = _burst_log(
            lambda count, reason: (
                f"database pool exhausted: {_plural(count, 'request')} got 503 after waiting"
                f" {self.acquire_timeout:g} s for a connection (pool max {self.max_size} per worker ×"
                f" {_plural(self.workers, 'worker')}); raise the pool size if PostgreSQL has room, or acquire_timeout"
            )
        )
        self._refusals = _burst_log(
            lambda count, reason: (
                f"PostgreSQL refused {_plural(count, 'new connection')}, requests got 503: {reason}; the pools of every"
                f" worker and host, with its other clients, need more than its max_connections"
            )
        )

    def _share_out(self) -> None:
        """Set ``max_size`` (and cap ``min_size``) from ``max_total`` and ``workers``."""
        if self.max_total is None:
            return
        share = self.max_total // self.workers
        if share < 1:
            raise RuntimeError(
                f"max_total {self.max_total} cannot be shared between {self.workers} workers:"
                " each needs at least one connection"
            )
        self.max_size = share
        self.min_size = min(self._min_wanted, share)

    # -- lifecycle ---------------------------------------------------------------

    def setup(self, app: App) -> None:
        """Open the pool at the app's startup and close it at shutdown; ``app.state.db`` is this.

        The pool is one of the app's contexts: it is open before the startup hooks
        run and closed after the shutdown hooks, and closed again if a later step
        of the startup fails. It also adds the app's handler for NulCharacter, which
        names the request's input that holds the NUL (an app's own handler for it,
        added after this, replaces it).
        """
        app.state.db = self
        app.exception_handler(NulCharacter)(locate_nul)

        @asynccontextmanager
        async def pool(app: App) -> AsyncIterator[None]:
            if self._workers_given is None and "worker_processes" in app.state:  # the server's, set before startup
                self.workers = app.state.worker_processes
            await self.open()
            try:
                yield
            finally:
                await self.close()

        app.contexts.append(pool)

    async def open(self) -> None:
        """Connect ``min_size`` connections, and check the host's pools fit in the server (else raise).

        Raises if PostgreSQL cannot be reached, or (unless ``pooler`` is set, or
        ``min_size`` is 0) if ``max_size`` × ``workers`` exceeds its
        ``max_connections`` less its reserved connections.
        """
        if self.dsn is None:
            self.dsn = os.environ.get("DATABASE_URL")
        if not self.dsn:
            raise RuntimeError("no database: pass Database(dsn) or set DATABASE_URL")
        self._share_out()  # the workers are known now: the app may have been made before they were
        self._closed = False
        try:
            for _ in range(self.min_size):
                self._size += 1
                self._idle.append(await self._connect())
            if self._idle and self.pooler is None:
                await self._check_capacity(self._idle[0])
        except BaseException:
            await self.close()
            raise

    async def _check_capacity(self, connection: _Connection) -> None:
        """Raise if this host's pools could ask PostgreSQL for more connections than it gives."""
        cursor = await connection.execute(
            "SELECT current_setting('max_connections')::int, current_setting('superuser_reserved_connections')::int,"
            " coalesce(current_setting('reserved_connections', true), '0')::int",  # PostgreSQL 16+
            prepare=False,
        )
        max_connections, superuser_reserved, reserved = cursor.fetchone()
        available = max_connections - superuser_reserved - reserved
        total = self.max_size * self.workers
        if total > available:
            raise RuntimeError(
                f"database pool too large: pool max {self.max_size} × {_plural(self.workers, 'worker')}"
                f" = {total} connections exceeds PostgreSQL's max_connections {max_connections}"
                f" − {superuser_reserved + reserved} reserved = {available}; set Database(max_total=...) for this"
                f" host to at most {available} less what other clients and hosts need, raise max_connections,"
                " or put PgBouncer in front"
            )

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
        for tally in (self._losses, self._timeouts, self._refusals):
            tally.flush()
        if self._reconnecting is not None:
            self._reconnecting.cancel()
            await asyncio.wait([self._reconnecting])
            self._reconnecting = None  # _reopen's finally never ran if it was cancelled before its first step

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

    async def _connect(self) -> _Connection:
        """A new connection, which the caller has counted in ``_size`` (uncounted on failure)."""
        assert self.dsn is not None
        try:
            async with asyncio.timeout(self.connect_timeout):
                connection = _Connection(
                    await _connect_raw(self.dsn, self.application_name),
                    prepare=self.prepare,
                    statement_timeout=self.statement_timeout,
                    # Behind a pooler in transaction mode a session's SET lands on
                    # whichever server connection runs it, and stays there for others.
                    cancel_at_timeout=self.pooler == "transaction",
                    lost=self._lost,
                )
                if self.pooler != "transaction":
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

    async def _acquire(self, fresh: bool = False) -> _Connection:
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
                self._note_refusal(exc)
                raise DatabaseUnavailable() from exc
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[_Connection] = loop.create_future()
        self._waiters.append(waiter)
        self._waits += 1
        timer = loop.call_later(self.acquire_timeout, _expire, waiter)
        try:
            return await waiter
        except PoolTimeout:
            self._timeouts.note("")
            raise
        except asyncio.CancelledError:
            if _handed(waiter):
                self._release(waiter.result())  # handed a connection just as we were cancelled
            raise
        finally:
            timer.cancel()
            if not waiter.done():
                waiter.cancel()
            if not _handed(waiter):  # _release took a handed waiter off the queue
                self._gave_up()

    def _gave_up(self) -> None:
        """A waiter timed out, was cancelled or failed; _release and _short skip it.

        Taking it out of the queue at once would scan it, O(n) a request with
        thousands waiting. Instead the queue is swept once the waiters that gave
        up since the last sweep could be half of it: O(1) each, amortised. (The
        count is an upper bound — _release and _short also pop such waiters —
        which only makes a sweep come earlier.)
        """
        self._given_up += 1
        if self._given_up > 64 and self._given_up * 2 > len(self._waiters):
            self._waiters = deque(waiter for waiter in self._waiters if not waiter.done())
            self._given_up = 0

    def _release(self, connection: _Connection) -> None:
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
        self._idle.append(connection)

    def _note_refusal(self, exc: BaseException) -> None:
        """Count a connection PostgreSQL refused for lack of slots: max_connections, or a role's or database's limit.

        (Refusals while it restarts are the lost connections' line's story.)
        """
        reason = first_line(exc)
        if any(sign in reason for sign in ("too many clients", "too many connections", "slots are reserved")):
            self._refusals.note(reason)

    async def _recover(self, connection: _Connection) -> None:
        """End the statement a cancelled task left on ``connection``, then pool it again (or close it)."""
        try:
            async with asyncio.timeout(_RECOVER_TIMEOUT):
                await connection.recover()
        except Exception as exc:
            logger.debug("closing a connection whose cancelled statement did not end cleanly: %r", exc)
        finally:
            if not connection.reusable:  # failed, timed out, or cancelled by close(): not pooled again
                connection.broken = True
            self._release(connection)

    def _discard(self, connection: _Connection) -> None:
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

    def _lost(self, connection: _Connection, exc: BaseException) -> None:
        """``connection`` died with its backend (closed already): drop it if idle, log it, reconnect."""
        if self._closed:
            return
        if connection in self._idle:
            self._idle.remove(connection)
            self._size -= 1
        self._losses.note(first_line(exc))
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
                        self._note_refusal(exc)
                    self._fail_waiters("database unavailable", exc)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, _RECONNECT_MAX_DELAY)
                    continue
                delay = _RECONNECT_DELAY
                self._release(connection)
        finally:
            self._reconnecting = None

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[Transaction]:
        """Hold one connection (autocommit) for several statements."""
        connection = await self._acquire()
        try:
            yield Transaction(connection, 0)
        finally:
            self._release(connection)

    # -- queries -----------------------------------------------------------------------

    async def _execute(self, sql: str, params: Params) -> Any:
        current = _current.get()
        if current is not None:
            return await current._execute(sql, params)
        for attempt in (1, 2):
            connection = await self._acquire(fresh=attempt == 2)
            try:
                return await connection.execute(sql, params)
            except psycopg2.Error as exc:
                # A connection whose backend died while idle (restart,
                # pg_terminate_backend) can be taken before the loop hears of it:
                # found dead before the statement was sent, a read is tried once
                # more, on a new connection. Once sent it may have run (a nextval
                # would advance twice), so it is not.
                if attempt == 1 and connection.broken and not connection.sent and _is_read(sql):
                    continue
                raise translate(exc, sql) from exc
            finally:
                self._release(connection)
        raise AssertionError("unreachable")

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Transaction]:
        """``BEGIN`` … ``COMMIT``, or ``ROLLBACK`` on an exception; nested calls are savepoints."""
        current = _current.get()
        if current is not None:
            async with current.transaction() as nested:
                token = _current.set(nested)
                try:
                    yield nested
                finally:
                    _current.reset(token)
            return
        connection = await self._acquire()
        try:
            async with Transaction(connection, 0).transaction() as transaction:
                token = _current.set(transaction)
                try:
                    yield transaction
                finally:
                    _current.reset(token)
        finally:
            self._release(connection)


def _is_read(sql: str) -> bool:
    return sql.lstrip()[:6].lower() == "select"


def _handed(waiter: asyncio.Future[_Connection]) -> bool:
    """Whether ``waiter`` was given a connection (not timed out, failed or cancelled)."""
    return waiter.done() and not waiter.cancelled() and waiter.exception() is None


def _expire(waiter: asyncio.Future[_Connection]) -> None:
    if not waiter.done():
        waiter.set_exception(PoolTimeout())

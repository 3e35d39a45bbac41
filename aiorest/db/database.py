"""PostgreSQL for aiorest: a first-come first-served pool of psycopg2 asynchronous connections.

    db = Database(max_size=32)            # DSN from DATABASE_URL, or Database(dsn)
    db.setup(app)                         # opened at startup, closed at shutdown

    @app.get("/notes/{id:int}")
    async def get_note(request):
        row = await db.fetchone("SELECT * FROM notes WHERE id = %s", (request.path_params["id"],))
        ...

The pool itself (first come first served, sizing across the host's workers,
lost connections) is pool.py's; one connection is connection.py's.

Failures are HTTP answers (the exceptions exported here are HTTPErrors, defined
in errors.py with the mapping from psycopg2's): pool exhausted past the
acquire timeout and database unreachable or restarting → 503 with
``Retry-After``; unique violation → 409; check, foreign-key or not-null
violation, or a value PostgreSQL refuses → 422; statement timeout → 503. Connections lost with their server
are dropped quietly and replaced; one log line per burst counts them, and so
do requests turned away because the pool was exhausted or PostgreSQL refused
a connection.

Sizing: ``max_size`` is per worker process; ``max_total`` is the host's, shared
out between the host's workers (``aiorest run --workers N``: the server tells
the app at startup, see ``setup``), and checked at open against what PostgreSQL
can give (pool.py).
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Literal, Protocol

import psycopg2
import psycopg2.errors

from .driver import Connection
from .errors import (
    ConstraintViolation,
    DatabaseError,
    DatabaseUnavailable,
    InvalidValue,
    NulCharacter,
    Params,
    PoolTimeout,
    StatementTimeout,
    UniqueViolation,
    locate_nul,
    translate,
)
from .pool import Pool


class SupportsContexts(Protocol):
    """What :meth:`Database.setup` needs of an app (an :class:`aiorest.App` has it)."""

    state: Any
    database: Any
    contexts: list[Callable[[Any], AbstractAsyncContextManager[None]]]

    def exception_handler(self, exc_class: type[BaseException]) -> Callable[[Any], Any]: ...


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

    def __init__(self, connection: Connection, depth: int) -> None:
        self._connection = connection
        self._depth = depth

    async def run(self, sql: str, params: Params, prepare: bool = True) -> Any:
        """Run ``sql`` on this transaction's connection: its cursor (Database's queries inside one come here)."""
        try:
            return await self._connection.execute(sql, params, prepare=prepare)
        except psycopg2.Error as exc:
            raise translate(exc, sql) from exc

    _execute = run

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


class Database(Pool, _Queries):
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
    ``driver``: ``"psycopg2"`` (the default: aiorest's own connections over
    psycopg2's asynchronous mode, with prepared statements) or ``"aiopg"``
    (aiopg's connections, never prepared; ``pip install ".[aiopg]"`` in aiorest's checkout).
    To run on an ``aiopg.Pool`` the app already has, see :meth:`from_aiopg`.

    Inside ``async with db.transaction():`` the helpers of ``db`` use the
    transaction's connection, so code that takes ``db`` works in and out of one.
    """

    _pinging: asyncio.Future[Any] | None = None  # the ping under way (see ping)

    # -- lifecycle ---------------------------------------------------------------

    @classmethod
    def from_aiopg(
        cls,
        pool: Any,
        *,
        max_size: int | None = None,
        acquire_timeout: float = 5.0,
        statement_timeout: float = 30.0,
        pooler: Literal["transaction", "session"] | None = None,
        workers: int | None = None,
    ) -> Database:
        """A Database on the app's open ``aiopg.Pool``: same helpers, errors, probes and metrics.

        Each statement (or transaction, or ``connection()`` block) borrows a
        connection from ``pool`` and gives it back at once, so the app's own
        ``pool.acquire()`` code shares it. ``pool`` may also be a function
        returning the pool, called when the Database opens: for a pool the app
        makes in one of its contexts (added before ``setup``). ``max_size``
        (default: the pool's ``maxsize``, or aiopg's default of 10) bounds how
        many it borrows at a time; past that requests queue first come first
        served, up to ``acquire_timeout``. The
        connections' sessions are left as the app set them: the statement
        timeout is enforced by aiopg's timeout (the connection is closed), a
        second past ``statement_timeout``. ``pool`` stays the app's: closing
        the Database gives back what it borrowed and leaves the pool open.
        At open, ``max_size`` × ``workers`` is checked against PostgreSQL as
        for any Database (unless ``pooler`` is set).
        """
        from .aiopg_driver import AiopgPoolDriver

        return cls(
            None,
            min_size=0,
            max_size=max_size or getattr(pool, "maxsize", None) or 10,
            acquire_timeout=acquire_timeout,
            statement_timeout=statement_timeout,
            pooler=pooler,
            workers=workers,
            driver=AiopgPoolDriver(pool),
        )

    def setup(self, app: SupportsContexts) -> None:
        """Open the pool at the app's startup and close it at shutdown; ``app.database`` and ``app.state.db`` are this.

        The pool is one of the app's contexts: it is open before the startup hooks
        run and closed after the shutdown hooks, and closed again if a later step
        of the startup fails. It also adds the app's handler for NulCharacter, which
        names the request's input that holds the NUL (an app's own handler for it,
        added after this, replaces it).
        """
        app.database = self  # what the server hands to the health probes and the metrics
        app.state.db = self
        app.exception_handler(NulCharacter)(locate_nul)

        @asynccontextmanager
        async def pool(app: Any) -> AsyncIterator[None]:
            if self._workers_given is None and "worker_processes" in app.state:  # the server's, set before startup
                self.workers = app.state.worker_processes
            await self.open()
            try:
                yield
            finally:
                await self.close()

        app.contexts.append(pool)

    async def ping(self) -> None:
        """Return when PostgreSQL answers ``SELECT 1``, raise when it cannot (readiness, ``/readyz``).

        When every connection of the pool is open and busy, return at once: they
        are answering requests, so the database is reachable, and a ping queued
        behind them would fail under load in every worker at once (a balancer
        would then take the whole service out). Pings at once share one query.
        """
        pinging = self._pinging
        if pinging is None or pinging.done():
            # Checked before a ping starts, not while one connects: that one would count as busy.
            if self.size >= self.max_size and self.idle == 0:
                return
            pinging = self._pinging = asyncio.ensure_future(self.fetchval("SELECT 1"))
            pinging.add_done_callback(lambda done: done.cancelled() or done.exception())  # retrieved
        # One ping at a time, shared (the stores of one database ask together); shielded: a caller
        # that gives up does not cancel the others'.
        if await asyncio.shield(pinging) != 1:
            raise RuntimeError("SELECT 1 did not answer 1")

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
            return await current.run(sql, params)
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

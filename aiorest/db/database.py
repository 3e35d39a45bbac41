"""PostgreSQL for aiorest: a first-come first-served pool of psycopg2 asynchronous connections.

    db = Database(max_size=32)            # DSN from DATABASE_URL, or Database(dsn)
    db.setup(app)                         # opened at startup, closed at shutdown

    @app.get("/notes/{id:int}")
    async def get_note(request):
        row = await db.fetchone("SELECT * FROM notes WHERE id = %s", (request.path_params["id"],))
        ...

The pool itself (first come first served, sizing across the host's workers,
lost connections) is pool.py's, which a Database holds; one connection is its driver's
(driver.py: psycopg2_driver.py or aiopg_driver.py).

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

from .driver import Driver
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
from .listening import Listener, Subscription, listen_driver
from .pool import Pool
from .transaction import Queries, Transaction


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


_current: contextvars.ContextVar[Transaction | None] = contextvars.ContextVar("aiorest_db_tx", default=None)


class Database(Queries):
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

    A Database has a pool (``db.pool``, pool.py): the connections, their sizing
    and their recovery are the pool's; the statements, transactions and error
    mapping are the Database's. ``size``, ``idle``, ``in_use``, ``waiting`` and
    ``waits`` (what the metrics read) and ``max_size``, ``min_size`` and
    ``workers`` (what the pool came to) are the pool's, read through.
    """

    _pinging: asyncio.Future[Any] | None = None  # the ping under way (see ping)

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
        listen_dsn: str | None = None,
    ) -> None:
        #: Where :meth:`listen` connects (default: the pool's DSN); behind PgBouncer in transaction mode, PostgreSQL's.
        self.listen_dsn = listen_dsn
        self._listener = Listener(
            self._listen_source,
            application_name=f"{application_name}-listen",
            statement_timeout=statement_timeout,
            connect_timeout=connect_timeout,
        )
        self.pool = Pool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            acquire_timeout=acquire_timeout,
            statement_timeout=statement_timeout,
            connect_timeout=connect_timeout,
            prepare=prepare,
            application_name=application_name,
            max_total=max_total,
            pooler=pooler,
            workers=workers,
            driver=driver,
        )

    # -- lifecycle ---------------------------------------------------------------

    async def open(self) -> None:
        """Open the pool (``setup`` does it at the app's startup).

        Raises if PostgreSQL cannot be reached, or (unless ``pooler`` is set, or
        ``min_size`` is 0) if ``max_size`` × ``workers`` exceeds its
        ``max_connections`` less its reserved connections.
        """
        await self.pool.open()
        self._listener.open()

    async def close(self) -> None:
        """Close the pool: idle connections now, those in use when released; the subscriptions end."""
        await self._listener.close()
        await self.pool.close()

    def listen(self, channel: str, *, queue_size: int = 256) -> Subscription:
        """Subscribe to ``channel``'s NOTIFY (see :doc:`database`, "LISTEN/NOTIFY"):
        ``async with db.listen("notes") as subscription: async for item in subscription: ...``.

        Every subscription of the process shares one connection of its own (not the pool's), opened
        at the first, with ``listen_dsn`` (a LISTEN needs a session: behind PgBouncer in transaction
        mode, give PostgreSQL's own address). ``queue_size`` notifications may wait for the subscriber;
        past that it is dropped (:exc:`SubscriberTooSlow`). After the connection is lost it listens
        again and each subscriber receives a :class:`NotificationGap`. Entering the block raises
        :exc:`DatabaseUnavailable` when PostgreSQL cannot be reached.
        """
        return self._listener.subscribe(channel, queue_size)

    def _listen_source(self) -> tuple[Driver, str]:
        return listen_driver(self.pool.driver, self.listen_dsn or self.pool.dsn)

    @property
    def dsn(self) -> str | None:
        """The database it connects to (``$DATABASE_URL`` once open, when none was given)."""
        return self.pool.dsn

    @property
    def size(self) -> int:
        """Connections open or being opened."""
        return self.pool.size

    @property
    def idle(self) -> int:
        """Connections open and free."""
        return self.pool.idle

    @property
    def in_use(self) -> int:
        """Connections held by requests (or being opened for one)."""
        return self.pool.in_use

    @property
    def waiting(self) -> int:
        """Requests waiting for a connection now."""
        return self.pool.waiting

    @property
    def waits(self) -> int:
        """Acquisitions that had to wait for a connection since the pool was made (a counter)."""
        return self.pool.waits

    @property
    def max_size(self) -> int:
        """Connections this worker's pool may hold (its share of ``max_total`` once open)."""
        return self.pool.max_size

    @property
    def min_size(self) -> int:
        return self.pool.min_size

    @property
    def workers(self) -> int:
        """The worker processes of this host the pool is sized for."""
        return self.pool.workers

    @property
    def prepare(self) -> bool:
        """Whether statements are prepared (``prepare=``; off by default behind ``pooler="transaction"``)."""
        return self.pool.prepare

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
        listen_dsn: str | None = None,
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
            listen_dsn=listen_dsn,
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
            if "worker_processes" in app.state:  # the server's, set before startup
                self.pool.adopt_workers(app.state.worker_processes)
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
            if self.pool.size >= self.pool.max_size and self.pool.idle == 0:
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
        connection = await self.pool.acquire()
        try:
            yield Transaction(connection, 0)
        finally:
            self.pool.release(connection)

    # -- queries -----------------------------------------------------------------------

    async def _execute(self, sql: str, params: Params) -> Any:
        current = _current.get()
        if current is not None:
            return await current.run(sql, params)
        for attempt in (1, 2):
            connection = await self.pool.acquire(fresh=attempt == 2)
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
                self.pool.release(connection)
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
        connection = await self.pool.acquire()
        try:
            async with Transaction(connection, 0).transaction() as transaction:
                token = _current.set(transaction)
                try:
                    yield transaction
                finally:
                    _current.reset(token)
        finally:
            self.pool.release(connection)


def _is_read(sql: str) -> bool:
    return sql.lstrip()[:6].lower() == "select"

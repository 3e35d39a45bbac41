"""The aiopg driver: the pool's connections are aiopg's, opened by the pool or borrowed from an aiopg.Pool.

``Database(dsn, driver="aiopg")`` opens ``aiopg.Connection`` objects itself;
``Database.from_aiopg(pool)`` borrows them from an ``aiopg.Pool`` the app
already has, per statement or transaction, and gives them back at once, so the
app's own ``pool.acquire()`` code keeps working beside it. Either way aiopg's
connection drives each statement (its reader and writer callbacks), and the
pool, queries and error mapping above are aiorest's (driver.py).

aiopg 1.4's uvloop bug (https://github.com/aio-libs/aiopg/issues/909): when
libpq closes a connection's socket while aiopg waits to write on it (a
connection attempt PostgreSQL refuses, a restart), ``Connection._ready``
forgets the descriptor before it removes its writer; the writer stays on the
loop for a descriptor number the next socket gets, and under uvloop that socket
is poisoned (``RuntimeError: unable to perform operation on <UVPoll
closed=True>``, a hang or an abort). Importing this module replaces
``aiopg.Connection._ready`` (aiopg 1.4 only, whose code this was checked
against) by a wrapper that, when libpq has closed the socket, removes both
registrations in the same callback, before any other socket can take the
number. It mends every aiopg connection of the process, the app's own pool's
included.
"""

from __future__ import annotations

import asyncio
import os
import select
import weakref
from collections.abc import Callable
from contextlib import suppress
from typing import Any

import aiopg
import psycopg2
import psycopg2.extensions

from .driver import ConnectOptions, DatabaseConnection
from .errors import Params, StatementTimeout, nul_error
from .statements import PREPARED_MAX, PreparedStatements, Preparing

__all__ = ["AiopgConnection", "AiopgDriver", "AiopgPoolDriver"]

_IDLE = psycopg2.extensions.TRANSACTION_STATUS_IDLE
# What cursor.execute raises when it refuses a statement before sending it.
_REFUSED_BEFORE_SENDING = (ValueError, TypeError, LookupError, psycopg2.ProgrammingError)
# Past PostgreSQL's own statement_timeout, aiopg's timeout (which closes the connection) is the safety net.
_TIMEOUT_MARGIN = 1.0


def _descriptor_closed(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return True
    return False


_aiopg_ready = aiopg.Connection._ready


def _ready(weak_self: weakref.ref[Any]) -> None:
    """aiopg's ``Connection._ready``, then: if libpq closed the socket, unwatch its number now (aiopg#909)."""
    conn = weak_self()
    if conn is None:
        return
    fd, writing = conn._fileno, conn._writing
    try:
        _aiopg_ready(weak_self)
    finally:
        if fd is not None and _descriptor_closed(fd):
            conn._fileno = None
            conn._writing = False
            loop = asyncio.get_running_loop()
            # On a closed descriptor the removal itself may complain (asyncio OSError,
            # uvloop RuntimeError on a watch libuv ended): it has forgotten it either way.
            if writing:
                with suppress(OSError, RuntimeError, ValueError):
                    loop.remove_writer(fd)
            with suppress(OSError, RuntimeError, ValueError):
                loop.remove_reader(fd)
        lost = conn.__dict__.get("_aiorest_lost")
        if lost is not None and conn.closed:
            lost()


if aiopg.__version__.startswith("1.4.") and getattr(aiopg.Connection._ready, "__name__", "") != "_ready_mended":
    _ready.__name__ = "_ready_mended"
    aiopg.Connection._ready = staticmethod(_ready)  # type: ignore[method-assign]


class AiopgConnection(Preparing):
    """One aiopg connection and a psycopg2 cursor on it, as the pool's DatabaseConnection (driver.py).

    Its statements are prepared as the default driver's are (``Preparing``, statements.py) when it is
    the pool's own (``prepare``); a connection borrowed from the app's aiopg pool prepares nothing.

    A statement is sent as ``aiopg.Cursor.execute`` sends it (psycopg2's
    cursor, then aiopg's reader and writer callbacks drive the connection
    until it answers), but awaited here: without aiopg's ``wait_for`` per
    statement, and with PostgreSQL's statement timeout coming back as its
    QueryCanceled error (which ``aiopg.Cursor.execute`` turns into a
    CancelledError and an ERROR log line). Past ``timeout`` the connection is
    closed, as aiopg does. A task cancelled mid-statement closes it too (as
    aiopg does), so ``interrupted`` never holds.
    """

    interrupted = False
    _pump: asyncio.Task[None] | None = None  # a LISTEN connection's: see hand_on_notifies

    def __init__(self, conn: aiopg.Connection, *, timeout: float, give_back: Any = None, prepare: bool = False) -> None:
        self.conn = conn
        self.raw = conn.raw
        self._prepare = prepare  # an owned connection's statements are prepared (statements.py), a borrowed one's not
        self._statements = PreparedStatements(PREPARED_MAX)
        self._ref = weakref.ref(conn)
        self._cursor = conn.raw.cursor()
        self._timeout = timeout
        self._give_back = give_back  # borrowed: the aiopg pool's release
        self._idle_check = select.poll()
        self._idle_check.register(conn.raw.fileno(), select.POLLIN)
        self._timed_out = False
        self._closed = False
        self.broken = False
        self.sent = False

    @property
    def reusable(self) -> bool:
        conn = self.conn
        return not self.broken and not conn.closed and conn.raw.get_transaction_status() == _IDLE

    async def _run(self, sql: str, params: Params) -> Any:
        self.sent = False
        self._check_alive()
        conn = self.conn
        waiter = conn._create_waiter("cursor.execute")  # refuses a second statement at once, as aiopg does
        try:
            try:
                self._cursor.execute(sql, params)
            except _REFUSED_BEFORE_SENDING as exc:
                # Nothing was sent: the connection, and any transaction on it, is as it was.
                error = None if conn.closed else nul_error(exc, params)
                if error is not None:
                    raise error from exc
                self.broken = bool(conn.closed)
                raise
            except BaseException:
                self.broken = True
                raise
            self.sent = True
            self._timed_out = False
            timer = asyncio.get_running_loop().call_later(self._timeout, self._expire)
            try:
                _ready(self._ref)  # as aiopg's _poll begins
                await waiter
            except asyncio.CancelledError:
                self.broken = True
                conn.close()
                raise
            except psycopg2.Error:
                self.broken = bool(conn.closed)
                if self._timed_out:
                    raise StatementTimeout() from None
                raise
            finally:
                timer.cancel()
        finally:
            conn._waiter = None
        return self._cursor

    def _expire(self) -> None:
        """The statement outlived PostgreSQL's own timeout by a margin (a silent server): close the connection."""
        self._timed_out = True
        self.broken = True
        self.conn.close()

    def _check_alive(self) -> None:
        """Raise, nothing sent, if the server ended the connection while it was idle (as psycopg2_driver.py does)."""
        conn = self.conn
        if not conn.closed and self._idle_check.poll(0):
            _ready(self._ref)  # aiopg's reader, now: the end of the stream closes the connection
            notices = conn.raw.notices
            if not conn.closed and notices and notices[-1].startswith("FATAL:"):
                conn.close()  # the backend is ending: given back (closed) when the pool releases it
        if conn.closed:
            self.broken = True
            raise psycopg2.OperationalError("the server closed the connection")

    async def recover(self) -> None:
        raise psycopg2.OperationalError("aiopg closes a connection whose statement was cancelled")

    def hand_on_notifies(self, notified: Callable[[Any], None]) -> None:
        """A LISTEN connection: each NOTIFY aiopg queues is handed to ``notified`` as it comes (so that
        aiopg's own queue, unbounded, never holds more than the loop's current turn brought)."""
        self._pump = asyncio.get_running_loop().create_task(_hand_on(self.conn, notified))

    def close(self) -> None:
        """Close the connection, or give a borrowed one back (closed if it is not reusable): once."""
        if self._pump is not None:
            self._pump.cancel()
        # The cursor stays open: the statement that just ran is read after its connection is released.
        if self._closed:
            return  # a borrowed connection given back twice would be the app's pool's error
        if self._give_back is not None:
            if not self.conn.closed and not self.reusable:
                self.conn.close()  # not back into the app's pool in a transaction or broken
            self._give_back(self.conn)
        else:
            self.conn.close()
        self._closed = True


class AiopgDriver:
    """``Database(driver="aiopg")``: connections opened with ``aiopg.connect``."""

    name = "aiopg"
    owns_connections = True
    prepares = True

    def opening(self) -> None:
        pass

    async def connect(self, options: ConnectOptions) -> DatabaseConnection:
        conn = await aiopg.connect(
            options.dsn,
            timeout=options.statement_timeout + _TIMEOUT_MARGIN,
            enable_hstore=False,  # one query less per connection; aiopg's pool default keeps it
            application_name=options.application_name,
        )
        connection = AiopgConnection(conn, timeout=options.statement_timeout + _TIMEOUT_MARGIN, prepare=options.prepare)
        conn.__dict__["_aiorest_lost"] = lambda: _report_loss(connection, options)
        if options.notified is not None:
            connection.hand_on_notifies(options.notified)
        return connection


async def _hand_on(conn: aiopg.Connection, notified: Callable[[Any], None]) -> None:
    notifies = conn.notifies
    try:
        while True:
            notified(await notifies.get())
    except psycopg2.Error:
        pass  # the connection closed: its loss is reported by _report_loss


def _report_loss(connection: AiopgConnection, options: ConnectOptions) -> None:
    """aiopg closed an owned connection whose backend died: the pool hears of it once (and reconnects)."""
    if connection.broken:
        return
    connection.broken = True
    connection.conn.__dict__["_aiorest_lost"] = None
    notices = connection.conn.raw.notices
    reason = notices[-1].strip() if notices else "the server closed the connection"
    options.lost(connection, psycopg2.OperationalError(reason))


class AiopgPoolDriver:
    """``Database.from_aiopg(pool)``: connections borrowed from the app's ``aiopg.Pool``, given back on release."""

    name = "aiopg"
    owns_connections = False
    prepares = False

    def __init__(self, pool: aiopg.Pool | Callable[[], aiopg.Pool]) -> None:
        self._given = pool
        self.pool: aiopg.Pool | None = pool if isinstance(pool, aiopg.Pool) else None

    def opening(self) -> None:
        """A function given instead of the pool is called now, once an open: not for each statement."""
        given = self._given
        self.pool = given if isinstance(given, aiopg.Pool) else given()

    async def connect(self, options: ConnectOptions) -> DatabaseConnection:
        pool = self.pool
        assert pool is not None, "the Database opens first"
        try:
            conn = await pool.acquire()
        except AssertionError as exc:
            # aiopg 1.4's Pool._acquire asserts a connection it just filled is open:
            # a backend that died in that tick (a restart) fails it. The database is away: 503.
            raise psycopg2.OperationalError(f"aiopg's pool lost a connection as it was handed out: {exc!r}") from exc
        try:
            return AiopgConnection(conn, timeout=options.statement_timeout + _TIMEOUT_MARGIN, give_back=pool.release)
        except BaseException:
            pool.release(conn)
            raise

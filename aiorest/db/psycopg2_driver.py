"""The psycopg2 driver: aiorest's own asynchronous psycopg2 connections, on the event loop.

``_connect_raw`` connects without blocking the loop; a ``Psycopg2Connection`` then runs one
statement at a time through its one cursor, prepares each text once (the first 256; which
ones: statements.py), and ends a statement that outlives the statement timeout. It knows
nothing of a pool: its ConnectOptions say whether to prepare, the timeout, and whom to tell
when it dies with its backend. It raises StatementTimeout and NulCharacter itself.

Why connections of our own and not aiopg's: libpq closes a connection's socket
itself when the server goes away, and a reader or writer still registered on
the loop for that descriptor poisons its number for the next socket that gets
it (uvloop: ``RuntimeError: unable to perform operation on <UVPoll
closed=True>``, or an abort; asyncio: OSError). aiopg 1.4 leaves the writer
registered when a connection attempt fails while it waits to write, which a
PostgreSQL restart under load does hundreds of times. Here a socket is watched
only by its ``Psycopg2Connection`` (or by ``_connect_raw``, one wait at a time), and
unwatched in the same step that finds the connection closed.
"""

from __future__ import annotations

import asyncio
import select
from contextlib import suppress
from typing import TYPE_CHECKING, Any

import psycopg2
import psycopg2.extensions
import psycopg2.extras

from .errors import Params, StatementTimeout, nul_error
from .statements import PREPARED_MAX, PreparedStatements, Preparing

if TYPE_CHECKING:
    from .driver import ConnectOptions, DatabaseConnection

__all__ = ["Psycopg2Connection", "Psycopg2Driver"]

_IDLE = psycopg2.extensions.TRANSACTION_STATUS_IDLE
_POLL_OK = psycopg2.extensions.POLL_OK
_POLL_WRITE = psycopg2.extensions.POLL_WRITE
_POLL_EVERY = 0.25  # seconds: a statement in flight polls its connection this often, events or not
# What cursor.execute raises when it refuses a statement before sending it.
_REFUSED_BEFORE_SENDING = (ValueError, TypeError, LookupError, psycopg2.ProgrammingError)


class Psycopg2Connection(Preparing):
    """One psycopg2 asynchronous connection: its socket on the loop, its one cursor, its prepared statements.

    The socket's reader stays registered while the connection is open, so a
    connection that dies while idle in the pool (PostgreSQL restarted, backend
    terminated) is found at once, closed, and reported through ``lost``. Whatever
    finds the connection closed unwatches it in the same step: libpq has
    already closed the socket, and its number is free for the next one.

    ``options.prepare``: prepare each statement text once, up to PREPARED_MAX texts (``execute`` may still be told
    not to). ``statement_timeout``: seconds a statement may run; a second past
    it, the connection is closed and the statement raises StatementTimeout.
    PostgreSQL's own statement_timeout, which the caller sets, ends it first;
    with ``cancel_at_timeout`` (behind a pooler, where a session's SET cannot
    be kept) the connection asks the server to cancel it at the timeout.
    ``lost(connection, exc)``: called once, the connection closed already, when
    it died with its backend.

    A task cancelled while its statement runs leaves the statement running:
    the connection is then ``interrupted`` (not reusable) until ``recover()``
    has the server cancel it and rolls back what it was in.
    """

    def __init__(self, raw: psycopg2.extensions.connection, options: ConnectOptions) -> None:
        self.raw = raw
        self._cursor = raw.cursor()
        self._prepare = options.prepare
        self._statement_timeout = options.statement_timeout
        self._cancel_at_timeout = options.cancel_at_timeout
        self._lost = options.lost
        self._notified = options.notified
        self._loop = asyncio.get_running_loop()
        self._fd = raw.fileno()
        self._writing = False
        self._waiter: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._began = 0.0  # when the statement in flight was sent (the loop's clock)
        self._statements = PreparedStatements(PREPARED_MAX)
        self._timed_out = False
        self._cancelling: asyncio.Future[None] | None = None  # a cancel request sent at the timeout
        self.broken = False
        # Whether the last statement was handed to libpq to send: one that failed
        # before may be run again elsewhere, one sent may have run on the server.
        self.sent = False
        # A statement was left running by a cancelled task: nothing more may be
        # sent until recover() has ended it.
        self.interrupted = False
        self._idle_check = select.poll()
        self._idle_check.register(self._fd, select.POLLIN)
        self._loop.add_reader(self._fd, self._ready)

    @property
    def reusable(self) -> bool:
        return (
            not self.broken
            and not self.interrupted
            and not self.raw.closed
            and self.raw.get_transaction_status() == _IDLE
        )

    async def _run(self, sql: str, params: Params) -> Any:
        if self._waiter is not None:
            # psycopg2 would refuse it too, but only after this one had replaced
            # the running statement's waiter, which then never completes.
            raise RuntimeError(
                "one statement at a time on a connection: another is running on it; tasks that share"
                " a transaction or a db.connection() must await their statements in turn, not at once"
            )
        if self.interrupted:
            raise RuntimeError(
                "this connection's statement was cancelled with its task and still runs: a block that"
                " catches asyncio.CancelledError must re-raise it, not go on with the connection"
            )
        self.sent = False
        self._timed_out = False
        self._check_alive()
        try:
            self._cursor.execute(sql, params)
        except _REFUSED_BEFORE_SENDING as exc:
            # psycopg2 could not format the statement (a parameter it cannot adapt,
            # a NUL in a text, a placeholder miscount): nothing was sent, and the
            # connection, and any transaction on it, is as it was.
            if self.raw.closed:
                self._lose(exc)
                raise
            error = nul_error(exc, params)
            if error is not None:
                raise error from exc
            raise
        except BaseException as exc:
            self.broken = True
            if self.raw.closed:
                self._lose(exc)
            raise
        self.sent = True
        try:
            await self._wait()
        except asyncio.CancelledError:
            if not self.broken:
                self.interrupted = True
            raise
        except psycopg2.Error as exc:
            if self._timed_out:
                await self._cancelled()
                raise StatementTimeout() from exc
            raise
        await self._cancelled()  # the statement ended just as its cancel went out
        return self._cursor

    async def _cancelled(self) -> None:
        """Wait for a cancel request sent at the timeout to be delivered, so it cannot hit the next statement."""
        cancelling, self._cancelling = self._cancelling, None
        if cancelling is not None:
            await asyncio.wait([cancelling])

    async def _wait(self) -> None:
        """Until the statement sent ends (raises its error), polling it every _POLL_EVERY."""
        waiter = self._loop.create_future()
        self._waiter = waiter
        self._ready()
        self._began = self._loop.time()
        if self._timer is None:  # one timer a connection, not one a statement: it stops when nothing runs
            self._timer = self._loop.call_later(_POLL_EVERY, self._tick)
        try:
            await waiter
        finally:
            self._waiter = None

    async def recover(self) -> None:
        """End the statement a cancelled task left running, and any transaction it was in.

        The server is asked to cancel it (PQcancel, which opens a connection of
        its own and blocks: in a thread), then its end is awaited, then a
        ROLLBACK is sent if a transaction is open. Raises if the connection
        fails meanwhile; the caller bounds the time it may take.
        """
        cancel = self._cancel()
        try:
            await self._wait()
        except psycopg2.Error:
            pass  # canceled, as asked (or failed by itself): either way it is over
        await cancel
        if self.broken or self.raw.closed:
            raise psycopg2.OperationalError("the connection was lost while its statement was cancelled")
        self.interrupted = False
        if self.raw.get_transaction_status() != _IDLE:
            await self._run("ROLLBACK", None)

    def _check_alive(self) -> None:
        """Raise if the server ended the connection while it was idle, before a statement is sent to it.

        The socket's reader would find out, but not before the loop's next turn,
        and libpq sends a statement to a closed socket without complaint (it
        reports the failed write when it reads the answer): the statement
        would then fail as if it had been in flight. So anything on an idle
        connection's socket is read now (one poll syscall when there is
        nothing): the end of the stream, or the FATAL message of a backend
        ending (libpq files that among the notices, and the end of the stream
        may not have followed yet).
        """
        if not self._idle_check.poll(0):
            return
        raw = self.raw
        try:
            raw.poll()
            if raw.notices and raw.notices[-1].startswith("FATAL:"):
                raise psycopg2.OperationalError(raw.notices[-1].strip())
        except psycopg2.Error as exc:
            self.broken = True
            self._lose(exc)
            raise

    def _tick(self) -> None:
        """Every _POLL_EVERY while a statement runs: poll the connection anyway, and end a silent one.

        libuv (uvloop) stops watching a socket that the server reset with its
        last message, without a callback: a statement in flight on it would
        wait for nothing. And PostgreSQL's own statement_timeout fires first
        and keeps the connection; closing it a second later is the safety net
        for a silent server.
        """
        self._timer = None
        if self._waiter is None or self._fd < 0:
            return  # no statement runs: the next one arms it again
        elapsed = self._loop.time() - self._began
        if elapsed > self._statement_timeout + 1.0:
            self._on_timeout()
            return
        if self._cancel_at_timeout and elapsed > self._statement_timeout and not self._timed_out:
            self._timed_out = True
            self._cancelling = self._cancel()  # if it fails, the close a second later ends the statement
        self._ready()
        self._timer = self._loop.call_later(_POLL_EVERY, self._tick)

    def _ready(self) -> None:
        """The socket is readable, or writable while a statement is sent: let libpq go on."""
        raw = self.raw
        try:
            state = raw.poll()
        except psycopg2.Error as exc:
            waiter = self._waiter
            if waiter is not None and not waiter.done():
                waiter.set_exception(exc)
            if raw.closed:
                self._lose(exc)
            elif self._writing:
                self._stop_writing()
            return
        if raw.notifies:  # handed on by a LISTEN connection, else dropped: the list stays bounded
            if self._notified is not None:
                for notify in raw.notifies:
                    self._notified(notify)
            raw.notifies.clear()
        if state == _POLL_OK:
            if self._writing:
                self._stop_writing()
            waiter = self._waiter
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
        elif state == _POLL_WRITE:
            if not self._writing:
                self._loop.add_writer(self._fd, self._ready)
                self._writing = True
        elif self._writing:  # POLL_READ: the statement is sent
            self._stop_writing()

    def _cancel(self) -> asyncio.Future[None]:
        """Ask the server to cancel the statement running (PQcancel blocks: in a thread)."""
        cancel = self._loop.run_in_executor(None, self.raw.cancel)
        # Whoever does not await it must not leave its failure unretrieved.
        cancel.add_done_callback(lambda done: None if done.cancelled() else done.exception())
        return cancel

    def _stop_writing(self) -> None:
        self._writing = False
        self._loop.remove_writer(self._fd)

    def _lose(self, exc: BaseException) -> None:
        """The connection died with its backend: close it and tell whoever made it."""
        if self._fd < 0:
            return  # closed already
        self.broken = True
        self.close()
        self._lost(self, exc)

    def close(self) -> None:
        """Unwatch the socket and close the connection; a statement in flight fails."""
        fd, self._fd = self._fd, -1
        if fd >= 0:
            # Both registrations go in this one step: on a socket libpq closed,
            # one left behind would poison the descriptor for its next owner.
            # The first removal may raise, having forgotten the descriptor:
            # asyncio's selector loop OSError on a closed socket, uvloop
            # RuntimeError on a watch libuv ended itself (a reset socket).
            if self._writing:
                self._writing = False
                with suppress(OSError, RuntimeError):
                    self._loop.remove_writer(fd)
            with suppress(OSError, RuntimeError):
                self._loop.remove_reader(fd)
        self.raw.close()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(psycopg2.OperationalError("the connection was closed"))

    def _on_timeout(self) -> None:
        # A psycopg2 asynchronous connection cannot cancel cleanly mid-query: close it.
        self._timed_out = True
        self.broken = True
        self.close()


async def _connect_raw(dsn: str, application_name: str) -> psycopg2.extensions.connection:
    """A psycopg2 asynchronous connection, once libpq has finished connecting.

    Each wait watches the socket libpq names now, and stops watching before
    libpq runs again: libpq may close that socket and open another (the next
    address of a host name, a retry without SSL).
    """
    raw = psycopg2.connect(dsn, async_=True, application_name=application_name)
    try:
        loop = asyncio.get_running_loop()
        while (state := raw.poll()) != _POLL_OK:
            fd = raw.fileno()
            ready = loop.create_future()
            if state == _POLL_WRITE:
                watch, unwatch = loop.add_writer, loop.remove_writer
            else:
                watch, unwatch = loop.add_reader, loop.remove_reader
            watch(fd, _wake, ready)
            try:
                await ready
            finally:
                unwatch(fd)
    except BaseException:
        raw.close()
        raise
    # uuid columns as uuid.UUID, as aiopg did (JSON and JSONB are psycopg2's defaults)
    psycopg2.extras.register_uuid(conn_or_curs=raw)  # type: ignore[no-untyped-call]
    return raw


def _wake(ready: asyncio.Future[None]) -> None:
    if not ready.done():
        ready.set_result(None)


class Psycopg2Driver:
    """aiorest's own connections over psycopg2's asynchronous mode (the default)."""

    name = "psycopg2"
    owns_connections = True
    prepares = True

    def opening(self) -> None:
        pass

    async def connect(self, options: ConnectOptions) -> DatabaseConnection:
        assert options.dsn is not None
        return Psycopg2Connection(await _connect_raw(options.dsn, options.application_name), options)

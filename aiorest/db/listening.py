"""LISTEN/NOTIFY fan-out: one dedicated connection per process feeding any number of subscribers.

    async with db.listen("notes") as subscription:
        async for item in subscription:
            if isinstance(item, NotificationGap):
                ...  # the connection was lost and is back: notifications may have been missed, resync
            else:
                ...  # item.payload

The connection is the Database's own, not one of its pool's (a LISTEN holds a session for as long
as anyone listens), opened at the first subscription with the pool's driver. Each channel is
LISTENed once, whoever subscribes to it, and UNLISTENed when its last subscriber leaves. Each
subscriber has a bounded queue: one that does not keep up is dropped (its iteration raises
SubscriberTooSlow) rather than making memory grow. When the connection dies (PostgreSQL restarted,
the backend terminated), it is opened again with a growing delay, every channel LISTENed again,
and each subscriber then receives a NotificationGap.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import psycopg2

from .driver import ConnectOptions, DatabaseConnection, Driver
from .errors import DatabaseError, DatabaseUnavailable

__all__ = ["Listener", "Subscription", "Notification", "NotificationGap", "SubscriberTooSlow"]

logger = logging.getLogger("aiorest.db")

#: Seconds between two checks that the LISTEN connection is alive.
CHECK_EVERY = 10.0
_RETRY_FIRST = 0.05  # seconds before the first reconnection attempt; doubled each failure
_RETRY_MAX = 5.0
_MAX_CHANNEL_BYTES = 63  # PostgreSQL's NAMEDATALEN - 1: a longer name is truncated, and would not match


@dataclass(frozen=True, slots=True)
class Notification:
    """A NOTIFY received: its ``channel``, its ``payload`` (``''`` when none) and the ``pid`` of the backend
    that sent it."""

    channel: str
    payload: str
    pid: int


@dataclass(frozen=True, slots=True)
class NotificationGap:
    """The listening connection was lost and is back: notifications of ``channel`` sent meanwhile were
    missed. Resync (reload what the notifications stand for; an event stream's client, tell it so)."""

    channel: str
    reason: str


class SubscriberTooSlow(DatabaseError):
    """A subscriber let its queue fill: it was dropped, what it had not read discarded (503 if unhandled)."""

    status = 503

    def __init__(self, channel: str, queue_size: int) -> None:
        super().__init__(
            f"the subscriber of channel {channel!r} fell {queue_size} notifications behind and was dropped:"
            " read faster, or give db.listen() a larger queue_size"
        )


class Subscription:
    """One subscriber of one channel: an async context manager (it subscribes on entry, leaves on exit)
    and an async iterator of :class:`Notification` and :class:`NotificationGap`. It ends when the
    Database closes; it raises :exc:`SubscriberTooSlow` once dropped."""

    def __init__(self, listener: Listener, channel: str, queue_size: int) -> None:
        if queue_size < 1:
            raise ValueError(f"queue_size must be at least 1, got {queue_size}")
        self.channel = channel
        self.queue_size = queue_size
        self._listener = listener
        self._queue: deque[Notification | NotificationGap] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._error: BaseException | None = None
        self._ended = False
        self._entered = False

    async def __aenter__(self) -> Subscription:
        if self._entered:
            raise RuntimeError(f"this subscription to {self.channel!r} was entered already: call db.listen() again")
        self._entered = True
        await self._listener.add(self)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._listener.remove(self)

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Notification | NotificationGap:
        if not self._entered:
            raise RuntimeError("iterate a subscription inside its block: async with db.listen(channel) as subscription")
        while not self._queue:
            if self._error is not None:
                raise self._error
            if self._ended:
                raise StopAsyncIteration
            waiter = self._waiter = asyncio.get_running_loop().create_future()
            try:
                await waiter
            finally:
                self._waiter = None
        return self._queue.popleft()

    # -- fed by the Listener ----------------------------------------------------------------

    def offer(self, item: Notification | NotificationGap) -> bool:
        """Queue ``item``; False, nothing queued, when the queue is full."""
        if len(self._queue) >= self.queue_size:
            return False
        self._queue.append(item)
        self._wake()
        return True

    def drop(self, error: BaseException) -> None:
        """Dropped: what is queued is discarded, the next iteration raises ``error``."""
        self._queue.clear()
        self._error = error
        self._wake()

    def end(self) -> None:
        """The Database closed: the iteration ends once the queue is read."""
        self._ended = True
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class Listener:
    """The LISTEN connection of a Database in this process, and its subscribers (see the module's doc).

    ``connection_source()`` gives the driver and the DSN to open it with, when it is first needed.
    """

    def __init__(
        self,
        connection_source: Callable[[], tuple[Driver, str]],
        *,
        application_name: str,
        statement_timeout: float,
        connect_timeout: float,
        max_subscribers: int = 10_000,
    ) -> None:
        self._source = connection_source
        self._application_name = application_name
        self._statement_timeout = statement_timeout
        self._connect_timeout = connect_timeout
        self.max_subscribers = max_subscribers
        self._channels: dict[str, set[Subscription]] = {}
        self._count = 0
        self._connection: DatabaseConnection | None = None
        self._listening: set[str] = set()  # channels LISTENed on the connection open now
        self._lock = asyncio.Lock()  # one statement at a time on the connection, and one connect
        self._reconnecting: asyncio.Task[None] | None = None
        self._checking: asyncio.Task[None] | None = None  # the connection's liveness check (see _check)
        self._closed = False

    @property
    def subscribers(self) -> int:
        return self._count

    def subscribe(self, channel: str, queue_size: int) -> Subscription:
        _quoted(channel)  # checked here, where the caller names it
        return Subscription(self, channel, queue_size)

    async def add(self, subscription: Subscription) -> None:
        """Subscribe (``Subscription.__aenter__``): LISTEN first if the channel is new. DatabaseUnavailable
        if PostgreSQL cannot be reached (unless it was lost already: then the gap tells when it is back)."""
        if self._closed:
            raise DatabaseUnavailable("the database is closed: no LISTEN")
        if self._count >= self.max_subscribers:
            raise DatabaseUnavailable(f"{self._count} subscribers already listen in this process (max_subscribers)")
        self._channels.setdefault(subscription.channel, set()).add(subscription)
        self._count += 1
        if self._reconnecting is not None:
            return  # it LISTENs to every channel once back, then sends each subscriber a gap
        try:
            async with self._lock:
                if self._connection is None:
                    self._connection = await self._connect()
                if self._closed:  # closed while it connected
                    self._connection.close()
                    self._connection = None
                    raise DatabaseUnavailable("the database is closed: no LISTEN")
                await self._listen(subscription.channel)
        except BaseException as exc:
            self._forget(subscription)
            if isinstance(exc, psycopg2.Error):
                raise DatabaseUnavailable(f"cannot LISTEN to {subscription.channel!r}: {exc}".strip()) from exc
            raise

    async def remove(self, subscription: Subscription) -> None:
        """Leave (``Subscription.__aexit__``); UNLISTEN once the channel has no subscriber."""
        channel = subscription.channel
        if not self._forget(subscription) or channel in self._channels:
            return
        async with self._lock:
            connection = self._connection
            if channel in self._listening and channel not in self._channels and connection is not None:
                self._listening.discard(channel)
                try:
                    await connection.execute(f"UNLISTEN {_quoted(channel)}", prepare=False)
                except psycopg2.Error:
                    pass  # the connection is lost: its LISTENs are gone with it

    def _forget(self, subscription: Subscription) -> bool:
        subscribers = self._channels.get(subscription.channel)
        if subscribers is None or subscription not in subscribers:
            return False
        subscribers.discard(subscription)
        self._count -= 1
        if not subscribers:
            del self._channels[subscription.channel]
        return True

    def open(self) -> None:
        """The Database opens (again): subscriptions are taken."""
        self._closed = False

    async def close(self) -> None:
        """Close the connection; every subscription ends."""
        self._closed = True
        for task in (self._reconnecting, self._checking):
            if task is not None:
                task.cancel()
                await asyncio.wait((task,))
        self._reconnecting = self._checking = None
        for subscribers in self._channels.values():
            for subscription in subscribers:
                subscription.end()
        self._channels.clear()
        self._count = 0
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()
        self._listening.clear()

    # -- the connection ------------------------------------------------------------------------

    async def _connect(self) -> DatabaseConnection:
        driver, dsn = self._source()
        options = ConnectOptions(
            dsn=dsn,
            application_name=self._application_name,
            prepare=False,
            statement_timeout=self._statement_timeout,
            cancel_at_timeout=False,
            lost=self._lost,
            notified=self._notified,
        )
        async with asyncio.timeout(self._connect_timeout):
            connection = await driver.connect(options)
        if self._checking is None or self._checking.done():
            self._checking = asyncio.get_running_loop().create_task(self._check())
        return connection

    async def _check(self) -> None:
        """Every CHECK_EVERY seconds, ``SELECT 1`` on the connection: a reset that the loop missed (uvloop
        can stop watching a reset socket without a callback) or a silent network is found, and mended."""
        while self._connection is not None and not self._closed:
            await asyncio.sleep(CHECK_EVERY)
            connection = self._connection
            if connection is None:
                return
            try:
                async with self._lock:
                    await connection.execute("SELECT 1", prepare=False)
            except (psycopg2.Error, OSError) as exc:
                connection.close()
                self._lost(connection, exc)

    async def _listen(self, channel: str) -> None:
        if channel not in self._listening:
            assert self._connection is not None
            await self._connection.execute(f"LISTEN {_quoted(channel)}", prepare=False)
            self._listening.add(channel)

    def _notified(self, notify: Any) -> None:
        subscribers = self._channels.get(notify.channel)
        if subscribers:
            self._deliver(subscribers, Notification(notify.channel, notify.payload, notify.pid))

    def _deliver(self, subscribers: set[Subscription], item: Notification | NotificationGap) -> None:
        for subscription in list(subscribers):
            if not subscription.offer(item):
                self._forget(subscription)
                subscription.drop(SubscriberTooSlow(subscription.channel, subscription.queue_size))

    def _lost(self, connection: Any, exc: BaseException) -> None:
        if connection is not self._connection or self._closed:
            return
        self._connection = None
        self._listening.clear()
        if self._reconnecting is None and self._channels:  # (with no subscriber, the next one connects)
            logger.warning("the LISTEN connection was lost (%s): listening again once PostgreSQL answers", exc)
            self._reconnecting = asyncio.get_running_loop().create_task(self._reconnect(str(exc).strip()))

    async def _reconnect(self, reason: str) -> None:
        delay = _RETRY_FIRST
        try:
            while True:
                await asyncio.sleep(delay)
                try:
                    async with self._lock:
                        if self._connection is None:
                            self._connection = await self._connect()
                        for channel in list(self._channels):
                            await self._listen(channel)
                    break
                except (psycopg2.Error, OSError, TimeoutError) as exc:
                    connection, self._connection = self._connection, None
                    if connection is not None:
                        connection.close()
                    self._listening.clear()
                    logger.debug("LISTEN again failed: %s", exc)
                    delay = min(delay * 2, _RETRY_MAX)
        finally:
            self._reconnecting = None
        logger.warning("listening again on %d channels", len(self._channels))
        for channel, subscribers in list(self._channels.items()):
            self._deliver(subscribers, NotificationGap(channel, f"the LISTEN connection was lost: {reason}"))


def listen_driver(driver: Driver, dsn: str | None) -> tuple[Driver, str]:
    """The driver and DSN a LISTEN connection opens with: the pool's driver, unless it borrows from an
    aiopg pool the app lends (``Database.from_aiopg``): then a connection of aiopg's own."""
    if not driver.owns_connections:
        from .aiopg_driver import AiopgDriver

        driver = AiopgDriver()
    if not dsn:
        raise ValueError(
            "db.listen() needs listen_dsn= (Database.from_aiopg: an aiopg pool does not say where it connects),"
            " or the Database opened first (its DSN may be $DATABASE_URL's, read then)"
        )
    return driver, dsn


def _quoted(channel: str) -> str:
    """``channel`` as a quoted identifier (its case kept, as ``pg_notify(channel, ...)`` names it)."""
    if not isinstance(channel, str) or not channel or "\0" in channel:
        raise ValueError(f"a channel is a non-empty str without NUL, got {channel!r}")
    if len(channel.encode()) > _MAX_CHANNEL_BYTES:
        raise ValueError(f"a channel name is at most {_MAX_CHANNEL_BYTES} bytes (PostgreSQL's), got {channel!r}")
    return '"' + channel.replace('"', '""') + '"'

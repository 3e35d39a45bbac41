"""Rate limits by key (an account, a client address) in fixed windows and bounded memory.

:class:`RateLimit` counts hits of one kind; :class:`LoginRateLimiter` puts two
of them (per account, per address) in front of a password check. Both are
re-exported by :mod:`aiorest.security`, where :doc:`auth` documents them. They count
in the process's memory, or in a shared store (:mod:`.stores`) when given one.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Generator
from types import TracebackType
from typing import Literal, NoReturn

from ..._support.bursts import BurstLog, failing
from ...http.exceptions import HTTPServiceUnavailable, HTTPTooManyRequests
from .stores import LimitStore, LimitStoreUnavailable

__all__ = ["LoginAttempt", "LoginRateLimiter", "RateLimit"]

# A longer key is kept by its SHA-256, so that what a client sends does not decide an entry's size.
_MAX_KEY = 64


def _bounded(key: str) -> str:
    return key if len(key) <= _MAX_KEY else "sha256:" + hashlib.sha256(key.encode()).hexdigest()


logger = logging.getLogger("aiorest.security")

# A store that is down warns once every 10 seconds, with a count, not once a check.
_warn_store_down = BurstLog(logger, failing("rate limit store unavailable", "checks"), every=10.0)


def _seconds(wait: float) -> int:
    """A ``Retry-After``: whole seconds, rounded up, at least 1."""
    return max(1, int(wait + 0.999))


class _Window:
    """One key's count in the window that started at ``start``."""

    __slots__ = ("count", "start")

    def __init__(self, start: float) -> None:
        self.start = start
        self.count = 0


class _InStore(OrderedDict[str, _Window]):
    """The memory table of a rate limit that counts in a store: reading it says what to call instead."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name

    def _refuse(self, *args: object) -> NoReturn:
        raise TypeError(f"rate limit {self.name!r} counts in a shared store: use its a-methods (await limit.ahit(...))")

    get = pop = _refuse  # type: ignore[assignment]


class RateLimit:
    """At most ``limit`` hits a key in a fixed window of ``window`` seconds.

    :meth:`hit` counts one and raises :class:`~aiorest.HTTPTooManyRequests`
    (429, ``Retry-After`` until the key's window ends) once the key has had
    ``limit`` in its window; a refused hit is not counted.

    Memory is bounded: at most ``max_entries`` keys are kept. A new key
    makes room by forgetting the key whose window began first (one that has
    ended, else the oldest still in its window): a new key is always
    counted, so a full table refuses no one. Forgetting a key in its window
    gives it a fresh count, but only after ``max_entries`` other keys were
    counted since its window began. A refund that takes a key's count back
    to nothing forgets the key: a hit taken back leaves no entry behind.
    ``message`` is the 429's.

    With a ``store`` (:class:`~aiorest.security.RedisLimitStore`,
    :class:`~aiorest.security.PostgresLimitStore`) the counts live there, under
    ``name``, and hold across processes and hosts: count with the ``a``
    methods (:meth:`ahit`, :meth:`arefund`, :meth:`areset`), which also work
    without a store. A store that cannot make room for a new key (see
    :class:`~aiorest.security.Hit`) refuses it with
    :class:`~aiorest.HTTPServiceUnavailable` (503). When the store cannot
    answer, ``on_store_failure`` decides: ``"closed"`` refuses the hit with
    503 (``Retry-After: 1``), ``"open"`` lets it through uncounted; either
    logs a warning.
    """

    def __init__(
        self,
        limit: int,
        window: float,
        *,
        max_entries: int = 10_000,
        message: str = "too many requests",
        clock: Callable[[], float] = time.monotonic,
        store: LimitStore | None = None,
        name: str | None = None,
        on_store_failure: Literal["closed", "open"] = "closed",
    ) -> None:
        if limit < 1 or window <= 0 or max_entries < 1:
            raise ValueError(
                f"a rate limit needs a positive count, window and max_entries, not {limit}, {window}, {max_entries}"
            )
        if store is not None and not name:
            raise ValueError("a rate limit in a shared store needs a name, which every process gives it alike")
        if on_store_failure not in ("closed", "open"):
            raise ValueError(f"on_store_failure is 'closed' or 'open', not {on_store_failure!r}")
        self.limit = limit
        self.window = window
        self.max_entries = max_entries
        self.message = message
        self.clock = clock
        self.store = store
        self.name = name or ""
        self.on_store_failure = on_store_failure
        # by the start of their window, oldest first: the first is the one to forget first. With a store,
        # a table that refuses to be read: the memory methods fail clearly, at no cost to them without one.
        self._windows: OrderedDict[str, _Window] = OrderedDict() if store is None else _InStore(self.name)

    def __len__(self) -> int:
        """How many keys are kept (in this process's memory)."""
        return len(self._windows)

    def hit(self, key: str) -> object:
        """Count a hit of ``key``; 429 over the limit, 503 when full (see the class).

        Returns a receipt for :meth:`refund`. In memory only (TypeError with a store).
        """
        now = self.clock()
        key = _bounded(key)
        window = self._windows.get(key)
        if window is not None and now - window.start >= self.window:
            del self._windows[key]
            window = None
        if window is None:
            if len(self._windows) >= self.max_entries:
                # The table is in the order windows began: the first ended first, or ends first.
                self._windows.popitem(last=False)
            window = self._windows[key] = _Window(now)
        if window.count >= self.limit:
            raise HTTPTooManyRequests(self.message, retry_after=_seconds(window.start + self.window - now))
        window.count += 1
        return window

    def refund(self, key: str, receipt: object) -> None:
        """Take back the hit :meth:`hit` returned ``receipt`` for, if its window is still the key's;
        a key whose count that takes back to nothing is forgotten."""
        key = _bounded(key)
        window = self._windows.get(key)
        if window is not None and window is receipt and window.count > 0:
            window.count -= 1
            if not window.count:
                del self._windows[key]

    def reset(self, key: str) -> None:
        """Forget the key's count."""
        self._windows.pop(_bounded(key), None)

    async def ahit(self, key: str) -> object:
        """:meth:`hit`, in the store when there is one; a store that cannot answer: see the class."""
        if self.store is None:
            return self.hit(key)
        try:
            done = await self.store.hit(self.name, _bounded(key), self.limit, self.window, self.max_entries)
        except LimitStoreUnavailable as exc:
            _warn_store_down.note(f"{exc} (limit {self.name!r} fails {self.on_store_failure})")
            if self.on_store_failure == "open":
                return None
            raise HTTPServiceUnavailable(f"{self.message}: the limit cannot be checked now", retry_after=1) from None
        if done.counted:
            return done.receipt
        if done.full:
            raise HTTPServiceUnavailable(f"{self.message}: too many clients at once", retry_after=_seconds(done.wait))
        raise HTTPTooManyRequests(self.message, retry_after=_seconds(done.wait))

    async def arefund(self, key: str, receipt: object) -> None:
        """:meth:`refund`, in the store when there is one. Never raises: a refund the store
        cannot take is lost (logged), and the hit stays counted."""
        if self.store is None:
            self.refund(key, receipt)
        elif receipt is not None:  # None: a hit let through uncounted
            try:
                await self.store.refund(self.name, _bounded(key), receipt)
            except LimitStoreUnavailable as exc:
                _warn_store_down.note(f"{exc} (a refund of limit {self.name!r} is lost)")

    async def areset(self, key: str) -> None:
        """:meth:`reset`, in the store when there is one. Never raises: a reset the store cannot
        take is lost (logged), and the count runs out with its window."""
        if self.store is None:
            self.reset(key)
            return
        try:
            await self.store.reset(self.name, _bounded(key))
        except LimitStoreUnavailable as exc:
            _warn_store_down.note(f"{exc} (a reset of limit {self.name!r} is lost)")


class LoginAttempt:
    """An attempt :meth:`LoginRateLimiter.check` (or :meth:`~LoginRateLimiter.acheck`) counted.

    As a context manager around the password check (``with``, or ``async
    with`` for a shared store), it takes the attempt back from the account's
    count when the block raises :class:`~aiorest.HTTPServiceUnavailable`: no
    password was checked (the hashing lane or the database was full), so it
    is no failed login of that account, and it leaves no entry in the
    accounts' table. The address's count keeps it: an address that is
    refused for capacity spends its own budget, as nginx's ``limit_req``
    counts every request, else one address could knock at 200 a second.
    """

    __slots__ = ("_refund",)

    def __init__(self, limit: RateLimit, key: str, receipt: object) -> None:
        self._refund: tuple[RateLimit, str, object] | None = (limit, key, receipt)

    def refund(self) -> None:
        """Take the attempt back from the account's count (once). In memory only."""
        refund, self._refund = self._refund, None
        if refund is not None:
            refund[0].refund(refund[1], refund[2])

    async def arefund(self) -> None:
        """:meth:`refund`, in the limiter's store when it has one."""
        refund, self._refund = self._refund, None
        if refund is not None:
            await refund[0].arefund(refund[1], refund[2])

    def __enter__(self) -> LoginAttempt:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if isinstance(exc, HTTPServiceUnavailable):
            self.refund()

    async def __aenter__(self) -> LoginAttempt:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if isinstance(exc, HTTPServiceUnavailable):
            await self.arefund()


class _Checking:
    """What :meth:`LoginRateLimiter.acheck` returns: await it for the attempt, or ``async with`` it."""

    __slots__ = ("_check", "_attempt")

    def __init__(self, check: Callable[[], Awaitable[LoginAttempt]]) -> None:
        self._check = check
        self._attempt: LoginAttempt | None = None

    def __await__(self) -> Generator[object, None, LoginAttempt]:
        return self._check().__await__()

    async def __aenter__(self) -> LoginAttempt:
        self._attempt = await self._check()
        return self._attempt

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._attempt is not None
        await self._attempt.__aexit__(exc_type, exc, tb)


class LoginRateLimiter:
    """Counts login attempts per client address and per account, in bounded memory or a shared store.

    ``per_account`` and ``per_address`` are ``(attempts, seconds)``: more than
    that many attempts in a fixed window of that many seconds raise
    :class:`~aiorest.HTTPTooManyRequests` with ``Retry-After`` until the window
    ends. The address is checked first: an attempt its address may not make
    is not counted against the account. Every attempt an address makes counts
    against it, whatever its answer; a 503 inside the attempt is taken back
    from the account's count only (see :class:`LoginAttempt`). Each table
    keeps at most ``max_entries`` keys, and a new key makes room by
    forgetting the oldest (see :class:`RateLimit`): a full table refuses no
    login.

    With a ``store``, the two limits are named ``name + ":account"`` and
    ``name + ":address"`` in it; use :meth:`acheck` and :meth:`areset`.
    ``on_store_failure`` is each limit's (see :class:`RateLimit`): closed by
    default, since a login limit that fails open gives an attacker unlimited
    guesses whenever the store is down.
    """

    def __init__(
        self,
        *,
        per_account: tuple[int, float] = (5, 60.0),
        per_address: tuple[int, float] = (20, 60.0),
        max_entries: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
        store: LimitStore | None = None,
        name: str = "login",
        on_store_failure: Literal["closed", "open"] = "closed",
    ) -> None:
        def limit(per: tuple[int, float], kind: str) -> RateLimit:
            return RateLimit(
                *per,
                max_entries=max_entries,
                message="too many login attempts",
                clock=clock,
                store=store,
                name=f"{name}:{kind}",
                on_store_failure=on_store_failure,
            )

        self.accounts = limit(per_account, "account")
        self.addresses = limit(per_address, "address")

    def check(self, account: str, address: str | None) -> LoginAttempt:
        """Count an attempt to log in to ``account`` from ``address``; 429 if over a limit.

        Call it before checking the password, so a refused attempt costs no hash,
        and check the password inside ``with limiter.check(...):``, so that a 503
        (nothing was checked) is taken back from the account. In memory only
        (TypeError with a store).
        """
        if address is not None:
            self.addresses.hit(address)
        return LoginAttempt(self.accounts, account, self.accounts.hit(account))

    def acheck(self, account: str, address: str | None) -> _Checking:
        """:meth:`check` in the limiter's store, or in memory without one:
        ``async with limiter.acheck(account, address):`` around the password check."""
        return _Checking(lambda: self._acheck(account, address))

    async def _acheck(self, account: str, address: str | None) -> LoginAttempt:
        if address is not None:
            await self.addresses.ahit(address)
        return LoginAttempt(self.accounts, account, await self.accounts.ahit(account))

    def reset(self, account: str) -> None:
        """Forget the account's count, after a successful login. In memory only."""
        self.accounts.reset(account)

    async def areset(self, account: str) -> None:
        """:meth:`reset`, in the limiter's store when it has one."""
        await self.accounts.areset(account)

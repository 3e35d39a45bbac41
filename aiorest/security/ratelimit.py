"""Rate limits by key (an account, a client address) in fixed windows and bounded memory.

:class:`RateLimit` counts hits of one kind; :class:`LoginRateLimiter` puts two
of them (per account, per address) in front of a password check. Both are
re-exported by :mod:`aiorest.auth`, where :doc:`auth` documents them.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable
from types import TracebackType

from ..http.exceptions import HTTPServiceUnavailable, HTTPTooManyRequests

__all__ = ["LoginAttempt", "LoginRateLimiter", "RateLimit"]

# A longer key is kept by its SHA-256, so that what a client sends does not decide an entry's size.
_MAX_KEY = 64


def _bounded(key: str) -> str:
    return key if len(key) <= _MAX_KEY else "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def _seconds(wait: float) -> int:
    """A ``Retry-After``: whole seconds, rounded up, at least 1."""
    return max(1, int(wait + 0.999))


class _Window:
    """One key's count in the window that started at ``start``."""

    __slots__ = ("count", "start")

    def __init__(self, start: float) -> None:
        self.start = start
        self.count = 0


class RateLimit:
    """At most ``limit`` hits a key in a fixed window of ``window`` seconds.

    :meth:`hit` counts one and raises :class:`~aiorest.HTTPTooManyRequests`
    (429, ``Retry-After`` until the key's window ends) once the key has had
    ``limit`` in its window; a refused hit is not counted.

    Memory is bounded: at most ``max_entries`` keys are kept. A key whose
    window has ended is forgotten to make room; a key still in its window
    never is, since forgetting it would give it a fresh count. When every
    kept key is still in its window, a hit of a new key is refused with
    :class:`~aiorest.HTTPServiceUnavailable` (503, ``Retry-After`` until the
    oldest window ends) and counted nowhere; the keys already kept go on as
    before. ``message`` is the 429's.
    """

    def __init__(
        self,
        limit: int,
        window: float,
        *,
        max_entries: int = 10_000,
        message: str = "too many requests",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if limit < 1 or window <= 0 or max_entries < 1:
            raise ValueError(
                f"a rate limit needs a positive count, window and max_entries, not {limit}, {window}, {max_entries}"
            )
        self.limit = limit
        self.window = window
        self.max_entries = max_entries
        self.message = message
        self.clock = clock
        # by the start of their window, oldest first: the first is the one to forget first
        self._windows: OrderedDict[str, _Window] = OrderedDict()

    def __len__(self) -> int:
        """How many keys are kept."""
        return len(self._windows)

    def hit(self, key: str) -> object:
        """Count a hit of ``key``; 429 over the limit, 503 when full (see the class).

        Returns a receipt for :meth:`refund`.
        """
        now = self.clock()
        key = _bounded(key)
        window = self._windows.get(key)
        if window is not None and now - window.start >= self.window:
            del self._windows[key]
            window = None
        if window is None:
            if len(self._windows) >= self.max_entries:
                self._make_room(now)
            window = self._windows[key] = _Window(now)
        if window.count >= self.limit:
            raise HTTPTooManyRequests(self.message, retry_after=_seconds(window.start + self.window - now))
        window.count += 1
        return window

    def _make_room(self, now: float) -> None:
        windows = self._windows
        while windows:
            oldest = next(iter(windows.values()))
            if now - oldest.start < self.window:
                break
            windows.popitem(last=False)
        if len(windows) >= self.max_entries:
            raise HTTPServiceUnavailable(
                f"{self.message}: too many clients at once", retry_after=_seconds(oldest.start + self.window - now)
            )

    def refund(self, key: str, receipt: object) -> None:
        """Take back the hit :meth:`hit` returned ``receipt`` for, if its window is still the key's."""
        window = self._windows.get(_bounded(key))
        if window is not None and window is receipt and window.count > 0:
            window.count -= 1

    def reset(self, key: str) -> None:
        """Forget the key's count."""
        self._windows.pop(_bounded(key), None)


class LoginAttempt:
    """An attempt :meth:`LoginRateLimiter.check` counted.

    As a context manager around the password check, it takes the attempt back
    when the block raises :class:`~aiorest.HTTPServiceUnavailable`: no password
    was checked (the hashing pool or the database was full), so the attempt
    counts against no one.
    """

    __slots__ = ("_refunds",)

    def __init__(self, refunds: list[tuple[RateLimit, str, object]]) -> None:
        self._refunds = refunds

    def refund(self) -> None:
        """Take the attempt back, from the account's count and the address's (once)."""
        refunds, self._refunds = self._refunds, []
        for limit, key, receipt in refunds:
            limit.refund(key, receipt)

    def __enter__(self) -> LoginAttempt:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if isinstance(exc, HTTPServiceUnavailable):
            self.refund()


class LoginRateLimiter:
    """Counts login attempts per client address and per account, in bounded memory.

    ``per_account`` and ``per_address`` are ``(attempts, seconds)``: more than
    that many attempts in a fixed window of that many seconds raise
    :class:`~aiorest.HTTPTooManyRequests` with ``Retry-After`` until the window
    ends. The address is checked first: an attempt its address may not make
    is not counted against the account. Each table keeps at most
    ``max_entries`` keys, and never forgets one still in its window (see
    :class:`RateLimit`): when full of such keys, an attempt with a new one is
    refused with 503.
    """

    def __init__(
        self,
        *,
        per_account: tuple[int, float] = (5, 60.0),
        per_address: tuple[int, float] = (20, 60.0),
        max_entries: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        message = "too many login attempts"
        self.accounts = RateLimit(*per_account, max_entries=max_entries, message=message, clock=clock)
        self.addresses = RateLimit(*per_address, max_entries=max_entries, message=message, clock=clock)

    def check(self, account: str, address: str | None) -> LoginAttempt:
        """Count an attempt to log in to ``account`` from ``address``; 429 if over a limit.

        Call it before checking the password, so a refused attempt costs no hash,
        and check the password inside ``with limiter.check(...):``, so that a 503
        (nothing was checked) is taken back.
        """
        refunds: list[tuple[RateLimit, str, object]] = []
        if address is not None:
            refunds.append((self.addresses, address, self.addresses.hit(address)))
        try:
            refunds.append((self.accounts, account, self.accounts.hit(account)))
        except HTTPServiceUnavailable:  # the accounts' table is full: not an attempt of this address either
            LoginAttempt(refunds).refund()
            raise
        return LoginAttempt(refunds)

    def reset(self, account: str) -> None:
        """Forget the account's count, after a successful login."""
        self.accounts.reset(account)

"""Password hashing with argon2id, off the event loop, in bounded lanes.

Re-exported by :mod:`aiorest.security`, where :doc:`auth` documents it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from ..http.exceptions import HTTPServiceUnavailable

try:
    import argon2
except ImportError:  # an optional dependency: the password functions say so when called
    argon2 = None  # type: ignore[assignment]

__all__ = ["Passwords", "hash_password", "needs_rehash", "verify_password"]

_T = TypeVar("_T")


class _Lane:
    """Calls of one kind: ``threads`` of their own, at most ``waiting`` more queued for them,
    and at most ``per_client`` of them, running or queued, from one client."""

    def __init__(self, name: str, threads: int, waiting: int, per_client: int) -> None:
        self.name = name
        self.threads = threads
        self.waiting = waiting
        self.per_client = per_client
        self.executor: ThreadPoolExecutor | None = None  # started at the first call
        # submitted and not finished, in all and by client; changed by the threads too, under the lock.
        # ``clients`` holds only clients with a call pending: at most threads + waiting of them.
        self.pending = 0
        self.clients: dict[str, int] = {}
        self.lock = threading.Lock()

    def admit(self, client: str | None) -> None:
        with self.lock:
            if self.pending >= self.threads + self.waiting:
                raise HTTPServiceUnavailable(f"too many password {self.name} in progress", retry_after=1)
            if client is not None:
                held = self.clients.get(client, 0)
                if held >= self.per_client:
                    raise HTTPServiceUnavailable(
                        f"too many password {self.name} in progress for this client", retry_after=1
                    )
                self.clients[client] = held + 1
            self.pending += 1

    def done(self, client: str | None) -> None:
        with self.lock:
            self.pending -= 1
            if client is not None:
                held = self.clients.pop(client) - 1
                if held:
                    self.clients[client] = held


class Passwords:
    """Argon2id password hashing (argon2-cffi's defaults) run off the event loop.

    Each hash or verification takes tens of milliseconds of CPU, so none runs
    on the event loop, and at most ``max_in_flight`` run at once. Calls go
    through two lanes, each with threads and a bounded queue of its own, so
    that one kind cannot crowd out the other:

    * :meth:`verify` (logins): up to ``max_in_flight`` at once, and up to
      ``max_waiting`` more waiting;
    * :meth:`hash` (registrations, password changes): up to ``hash_in_flight``
      at once (by default one fewer than ``max_in_flight``, at least 1), and
      up to ``hash_waiting`` (by default ``max_waiting``) more waiting.

    While hashes take their share, verifications keep the rest of
    ``max_in_flight`` and their own queue: a flood of registrations never
    makes a login wait behind it. A call beyond its lane's queue raises
    :class:`~aiorest.HTTPServiceUnavailable` (503, Retry-After 1), before any
    hash, rather than queue without bound. A call counts until its hash is
    done, even when the caller was cancelled (the client went away): a thread
    cannot be stopped, so cancelling frees no CPU.

    A call that names its ``client`` (the address of the request, say) gets
    a share of its lane: at most ``max_per_client`` of one client's calls run
    or wait at once (by default a sixteenth of the lane's threads and queue,
    at least 1: 4 of 66), and the next is refused with 503 as above. A few
    clients then cannot fill a lane and refuse everyone else's logins.
    """

    def __init__(
        self,
        *,
        max_in_flight: int = 2,
        max_waiting: int = 64,
        hash_in_flight: int | None = None,
        hash_waiting: int | None = None,
        max_per_client: int | None = None,
        hasher: Any = None,
    ) -> None:
        if argon2 is None:
            raise RuntimeError("password hashing needs argon2-cffi: pip install '.[auth]' in aiorest's checkout")
        if hash_in_flight is None:
            hash_in_flight = max(1, max_in_flight - 1)
        if hash_waiting is None:
            hash_waiting = max_waiting
        if max_in_flight < 1 or max_waiting < 0 or not 1 <= hash_in_flight <= max_in_flight or hash_waiting < 0:
            raise ValueError(
                "max_in_flight must be at least 1, hash_in_flight from 1 to max_in_flight,"
                f" and the waiting counts at least 0, not {max_in_flight}, {hash_in_flight},"
                f" {max_waiting}, {hash_waiting}"
            )
        if max_per_client is not None and max_per_client < 1:
            raise ValueError(f"max_per_client must be at least 1, not {max_per_client}")

        def lane(name: str, threads: int, waiting: int) -> _Lane:
            return _Lane(name, threads, waiting, max_per_client or max(1, (threads + waiting) // 16))

        self.hasher: argon2.PasswordHasher = hasher if hasher is not None else argon2.PasswordHasher()
        self.max_in_flight = max_in_flight
        self._verifying = lane("checks", max_in_flight, max_waiting)
        self._hashing = lane("hashes", hash_in_flight, hash_waiting)
        # What bounds the CPU: a lane's thread runs argon2 only holding one of these.
        self._cpu = threading.BoundedSemaphore(max_in_flight)
        self._dummy: str | None = None

    def _on_cpu(self, work: Callable[[], _T]) -> _T:
        with self._cpu:
            return work()

    async def _run(self, lane: _Lane, work: Callable[[], _T], client: str | None) -> _T:
        lane.admit(client)
        if lane.executor is None:
            lane.executor = ThreadPoolExecutor(lane.threads, thread_name_prefix=f"aiorest-password-{lane.name}")
        future = lane.executor.submit(self._on_cpu, work)
        future.add_done_callback(lambda _: lane.done(client))
        return await asyncio.wrap_future(future)

    async def hash(self, password: str, *, client: str | None = None) -> str:
        """The argon2id hash of ``password``, in the PHC string format, to store.

        ``client``: who asks (see the class), None for no share."""
        return await self._run(self._hashing, lambda: self.hasher.hash(password), client)

    async def verify(self, stored: str | None, password: str, *, client: str | None = None) -> bool:
        """Whether ``password`` matches ``stored``; False for a malformed hash, never an exception.

        Pass None for an account that does not exist: a hash is still checked,
        so the answer takes as long as for a real account. ``client``: who
        asks (see the class), None for no share.
        """
        if stored is None:
            if self._dummy is None:
                self._dummy = await self._run(self._verifying, lambda: self.hasher.hash("not a password"), client)
            stored = self._dummy
        target = stored

        def check() -> bool:
            try:
                return bool(self.hasher.verify(target, password))
            except (argon2.exceptions.VerificationError, argon2.exceptions.InvalidHashError):
                return False

        return await self._run(self._verifying, check, client) and stored is not self._dummy

    def needs_rehash(self, stored: str) -> bool:
        """Whether ``stored`` was made with other parameters than now (rehash it at the next login).

        A malformed hash needs one too. This is cheap: it only parses the string.
        """
        try:
            return bool(self.hasher.check_needs_rehash(stored))
        except argon2.exceptions.InvalidHashError:
            return True


_passwords: Passwords | None = None


def _default() -> Passwords:
    global _passwords
    if _passwords is None:
        _passwords = Passwords()
    return _passwords


async def hash_password(password: str) -> str:
    """:meth:`Passwords.hash` with the default limits."""
    return await _default().hash(password)


async def verify_password(stored: str | None, password: str) -> bool:
    """:meth:`Passwords.verify` with the default limits."""
    return await _default().verify(stored, password)


def needs_rehash(stored: str) -> bool:
    """:meth:`Passwords.needs_rehash` with the default hasher."""
    return _default().needs_rehash(stored)

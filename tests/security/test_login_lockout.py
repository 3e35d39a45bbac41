"""Issue 34, point 7: no sequence of attempts from a few addresses keeps a correct login out.

An attempt refused for capacity (503) leaves no entry in the accounts' table and still counts
against its address; a full table forgets its oldest key rather than refuse a new one; a
client's calls take at most a share of the hashing lane. In memory, in Redis and in PostgreSQL.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import argon2
import pytest

from aiorest import HTTPServiceUnavailable, HTTPTooManyRequests
from aiorest.security import LimitStore, LoginRateLimiter, Passwords, RateLimit
from tests.security.test_auth import Clock
from tests.security.test_limitstores import pg_limits, redis_limits, redis_server, store  # noqa: F401  # fixtures

FULL_LANE = HTTPServiceUnavailable("too many password checks in progress", retry_after=1)


def test_attempts_refused_for_capacity_leave_no_entry_and_a_new_account_logs_in() -> None:
    # the figures: 400 names from one address, each 503, filled a table of 200
    limiter = LoginRateLimiter(per_address=(10**6, 60), max_entries=200, clock=Clock())
    for i in range(400):
        with pytest.raises(HTTPServiceUnavailable), limiter.check(f"name-{i}", "10.0.0.66"):
            raise FULL_LANE
    assert len(limiter.accounts) == 0
    with limiter.check("alice", "10.0.0.1"):
        pass


def test_an_address_refused_for_capacity_spends_its_own_budget_not_the_account_s() -> None:
    limiter = LoginRateLimiter(per_account=(2, 60), per_address=(20, 60), clock=Clock())
    statuses = []
    for i in range(400):
        try:
            with limiter.check(f"name-{i}", "10.0.0.66"):
                raise FULL_LANE
        except HTTPServiceUnavailable:
            statuses.append(503)
        except HTTPTooManyRequests:
            statuses.append(429)
    assert statuses == [503] * 20 + [429] * 380  # was 400 × 503: every one taken back
    for _ in range(2):  # the accounts named were not charged: alice still has her 2
        with limiter.check("name-0", "10.0.0.1"):
            pass


def test_a_full_table_forgets_the_key_whose_window_began_first() -> None:
    clock = Clock()
    limiter = LoginRateLimiter(per_account=(1, 60), per_address=(10**6, 60), max_entries=100, clock=clock)
    limiter.check("first", "10.0.0.1")
    for i in range(99):
        clock.now += 0.1
        limiter.check(f"junk{i}", "10.0.0.2")  # wrong passwords, counted
    with limiter.check("alice", "10.0.0.3"):  # was 503: the table was full of keys in their window
        pass
    assert len(limiter.accounts) == 100
    limiter.check("first", "10.0.0.1")  # its key was the one forgotten: a fresh count
    with pytest.raises(HTTPTooManyRequests):
        limiter.check("junk98", "10.0.0.2")  # the others still count
    limit = RateLimit(1, 60, max_entries=1, clock=clock)
    limit.hit("a")
    limit.hit("b")  # a RateLimit of its own alike
    assert len(limit) == 1


async def test_in_a_store_refused_attempts_leave_no_key_and_a_full_limit_makes_room(store: LimitStore) -> None:  # noqa: F811
    limiter = LoginRateLimiter(per_account=(1, 60), per_address=(3, 60), max_entries=5, store=store, name="lockout")
    for i in range(3):
        with pytest.raises(HTTPServiceUnavailable):
            async with limiter.acheck(f"name-{i}", "10.0.0.66"):
                raise FULL_LANE
    with pytest.raises(HTTPTooManyRequests):  # the 503s counted against their address
        await limiter.acheck("name-3", "10.0.0.66")
    # no key was left in the accounts' limit: five more accounts fit, and none was forgotten
    for i in range(5):
        await limiter.acheck(f"user-{i}", f"10.0.1.{i}")
    for i in range(5):
        with pytest.raises(HTTPTooManyRequests):
            await limiter.acheck(f"user-{i}", "10.0.2.1")
    async with limiter.acheck("alice", "10.0.0.1"):  # full: the oldest key makes room (was 503)
        pass
    await limiter.acheck("user-0", "10.0.2.2")  # user-0's was the oldest: forgotten
    with pytest.raises(HTTPTooManyRequests):
        await limiter.acheck("alice", "10.0.2.3")


class HeldHasher(argon2.PasswordHasher):
    """Verifies only once the test says so: the lane's calls stay in it."""

    def __init__(self) -> None:
        super().__init__(time_cost=1, memory_cost=8192)
        self.go = threading.Event()

    def verify(self, hash: Any, password: Any) -> bool:
        assert self.go.wait(30)  # a breakage guard: the test sets it
        return bool(super().verify(hash, password))


async def test_a_client_gets_a_share_of_the_lane_and_others_still_log_in() -> None:
    hasher = HeldHasher()
    passwords = Passwords(max_in_flight=1, max_waiting=7, max_per_client=2, hasher=hasher)
    stored = await passwords.hash("pw")
    taken = [asyncio.ensure_future(passwords.verify(stored, "x", client=f"10.0.0.{i % 3}")) for i in range(6)]
    await asyncio.sleep(0.05)  # the six are in the lane: two from each of three clients
    with pytest.raises(HTTPServiceUnavailable) as refused:
        await passwords.verify(stored, "x", client="10.0.0.1")  # its third
    assert "for this client" in refused.value.message and refused.value.headers["Retry-After"] == "1"
    alice = asyncio.ensure_future(passwords.verify(stored, "pw", client="10.0.0.9"))
    hasher.go.set()
    assert await alice
    assert await asyncio.gather(*taken) == [False] * 6
    assert await passwords.verify(stored, "pw", client="10.0.0.1")  # its calls are done: room again
    assert passwords._verifying.clients == {}  # nothing kept for clients with no call pending
    with pytest.raises(ValueError):
        Passwords(max_per_client=0)


async def test_by_default_a_client_gets_a_sixteenth_of_the_lane() -> None:
    hasher = HeldHasher()
    passwords = Passwords(max_in_flight=2, max_waiting=64, hasher=hasher)
    stored = await passwords.hash("pw")
    calls = [asyncio.ensure_future(passwords.verify(stored, "x", client="10.0.0.66")) for _ in range(10)]
    await asyncio.sleep(0.05)
    hasher.go.set()
    results = await asyncio.gather(*calls, return_exceptions=True)
    assert sum(isinstance(r, HTTPServiceUnavailable) for r in results) == 6 and results.count(False) == 4

"""Sweep: a due sweep runs once; a failing one is logged, never raised into the request that ran it."""

from __future__ import annotations

import logging

import pytest

from aiorest._support.sweeps import Sweep


async def test_a_sweep_runs_when_due_and_once_per_period() -> None:
    runs = []

    async def sweep() -> None:
        runs.append(1)

    every = Sweep("rows", every=3600.0)
    await every(sweep)
    assert runs == []  # not due yet: the first one comes a period after the store is made
    every.every = 0.0
    await every(sweep)
    every.every = 3600.0
    await every(sweep)
    assert runs == [1]


async def test_a_failing_sweep_is_logged_and_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    async def sweep() -> None:
        raise ConnectionError("the database went away\nmore")

    every = Sweep("expired rows", every=0.0)
    with caplog.at_level(logging.WARNING, logger="aiorest.error"):
        await every(sweep)
    assert [record.getMessage() for record in caplog.records] == [
        "sweeping expired rows failed: the database went away"
    ]

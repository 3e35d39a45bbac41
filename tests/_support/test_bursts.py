"""BurstLog: one warning per burst, with the count (issue 28, point 7: the one copy of db, sessions and accesslog's)."""

import asyncio
import logging

from aiorest._support.bursts import BurstLog

logger = logging.getLogger("aiorest.test")


def lines(caplog):
    return [record.getMessage() for record in caplog.records if record.name == "aiorest.test"]


def test_at_once_the_first_event_is_heard_and_the_rest_of_the_burst_at_the_flush(caplog):
    burst = BurstLog(logger, lambda count, reason: f"{count} × {reason}", every=3600)
    for n in range(5):
        burst.note(f"reason {n}")
    assert lines(caplog) == ["1 × reason 0"]
    burst.flush()
    burst.flush()  # nothing more counted: no line
    assert lines(caplog) == ["1 × reason 0", "4 × reason 1"]


async def test_with_a_delay_the_whole_burst_is_one_line(caplog):
    burst = BurstLog(logger, lambda count, reason: f"{count} × {reason}", every=3600, delay=0.01)
    for n in range(3):
        burst.note(f"reason {n}")
    assert lines(caplog) == []
    while not lines(caplog):
        await asyncio.sleep(0.01)
    burst.note("later")  # within `every` of that line: waits for the flush
    await asyncio.sleep(0.05)
    assert lines(caplog) == ["3 × reason 0"]
    burst.flush()
    assert lines(caplog) == ["3 × reason 0", "1 × later"]

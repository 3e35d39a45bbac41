"""SIGHUP: ``aiorest run --workers N`` replaces its workers one at a time, under load, losing nothing."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal

import pytest

from harness import steady
from harness.processes import AiorestProcess
from harness.restarts import sighups_under_load
from tests.server.versioned import APP

BROKEN = {
    "import": ("raise ImportError('the new code is broken')", "ImportError: the new code is broken"),
    "startup hook": (
        "async def fail(app):\n    raise RuntimeError('cannot connect')\napp.on_startup.append(fail)",
        "RuntimeError: cannot connect (raised in the startup hook versioned.fail)",
    ),
}


def write_app(tmp_path, version: int, extra: str = "") -> None:
    (tmp_path / "versioned.py").write_text(APP.format(version=version, extra=extra))


def served_versions(server: AiorestProcess, times: int = 20) -> set[int]:
    return {json.loads(server.get("/version")[1])["version"] for _ in range(times)}


def aiorest(tmp_path, *args: str) -> AiorestProcess:
    # No .pyc: a rewrite within the second the old one was compiled, of the same
    # size, would pass for the old source.
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    return AiorestProcess(
        "versioned:app",
        "--workers",
        "2",
        *args,
        cwd=tmp_path,
        env=env,
        ready_path="/version",
        log_path=tmp_path / "aiorest.log",
    )


def replacements(log: str) -> list[tuple[str, ...]]:
    """The parent's reload lines in order: ("start", slot, pid) and ("swap", slot, new pid, old pid)."""
    events: list[tuple[str, ...]] = []
    pattern = r"worker (\d) \(pid (\d+)\) starting|reload: worker (\d) \(pid (\d+)\) serves; stopping pid (\d+)"
    reloading = False
    for line in log.splitlines():
        reloading = reloading or "SIGHUP: replacing" in line
        match = re.search(pattern, line)
        if reloading and match:
            events.append(("start", *match.group(1, 2)) if match.group(1) else ("swap", *match.group(3, 4, 5)))
    return events


async def test_two_sighups_under_load_serve_the_new_code_and_lose_no_request(tmp_path):
    write_app(tmp_path, 1)
    with aiorest(tmp_path) as server:
        first = server.worker_pids()
        assert len(first) == 2 and served_versions(server) == {1}
        write_app(tmp_path, 2)
        result = await sighups_under_load(
            server, server.url + "/version", sighups=2, rate=250, duration=6, connections=8
        )
        assert result.failed == 0, result.summary()
        assert result.statuses[200] > 1000
        # The old workers drained: the load's kept-alive connections were closed and opened again.
        assert result.connections_opened > 8, result.summary()
        assert served_versions(server) == {2}
        now = server.worker_pids()
        assert len(now) == 2 and not now & first
        log = server.log()
    events = replacements(log)
    # Each reload: a new worker starts, serves, and only then is one old worker told to stop, one at a time.
    assert [event[:2] for event in events] == [("start", "0"), ("swap", "0"), ("start", "1"), ("swap", "1")] * 2, log
    started = [event[2] for event in events if event[0] == "start"]
    swaps = [event for event in events if event[0] == "swap"]
    assert [swap[2] for swap in swaps] == started, log
    assert {swap[3] for swap in swaps[:2]} == {str(pid) for pid in first}, log
    assert [swap[3] for swap in swaps[2:]] == started[:2], log
    assert " ERROR " not in log and "Traceback" not in log, log


@pytest.mark.parametrize("how", list(BROKEN))
async def test_a_reload_to_broken_code_keeps_the_old_workers_and_loses_no_request(tmp_path, how):
    write_app(tmp_path, 1)
    breakage, reason = BROKEN[how]
    with aiorest(tmp_path) as server:
        first = server.worker_pids()
        load = asyncio.ensure_future(steady.run(server.url + "/version", rate=250, duration=3, connections=8))
        await asyncio.sleep(0.5)
        write_app(tmp_path, 2, breakage)
        server.send_signal(signal.SIGHUP)
        await asyncio.to_thread(server.wait_for_log, "reload failed")
        result = await load
        assert result.failed == 0, result.summary()
        assert served_versions(server) == {1}
        assert server.worker_pids() == first
        log = server.log()
    errors = [line for line in log.splitlines() if " ERROR " in line]
    assert len(errors) == 1, log
    assert "reload failed: new worker 0" in errors[0] and reason in errors[0], errors
    assert errors[0].endswith("keeping the 2 old workers"), errors
    assert "Traceback" not in log, log


async def test_a_new_worker_not_ready_in_time_is_stopped_and_the_old_ones_serve(tmp_path):
    write_app(tmp_path, 1)
    with aiorest(tmp_path, "--start-timeout", "1") as server:
        first = server.worker_pids()
        write_app(tmp_path, 2, "async def slow(app):\n    await asyncio.sleep(60)\napp.on_startup.append(slow)")
        server.send_signal(signal.SIGHUP)
        log = await asyncio.to_thread(server.wait_for_log, "reload failed")
        assert "could not start: not ready within 1 s: keeping the 2 old workers" in log, log
        assert served_versions(server) == {1}
        await asyncio.to_thread(server.wait_for_log, "exited with 0", count=1)  # the slow one, stopped
        assert server.worker_pids() == first
        # Fixed, the next SIGHUP goes through.
        write_app(tmp_path, 3)
        server.send_signal(signal.SIGHUP)
        await asyncio.to_thread(server.wait_for_log, "reload done")
        assert served_versions(server) == {3}


async def test_a_sighup_while_the_workers_start_reloads_them_once_they_serve(tmp_path):
    # Worker 0 imported the old code; the SIGHUP asks for the new code everywhere.
    imported = tmp_path / "imported"
    slow = (
        "from pathlib import Path\nPath(os.environ['IMPORTED']).touch()\n"
        "async def slow(app):\n    await asyncio.sleep(1)\napp.on_startup.append(slow)"
    )
    write_app(tmp_path, 1, slow)
    server = aiorest(tmp_path)
    server.env["IMPORTED"] = str(imported)
    starting = asyncio.ensure_future(asyncio.to_thread(server.start))
    try:
        async with asyncio.timeout(10):
            while not imported.exists():
                await asyncio.sleep(0.02)
        write_app(tmp_path, 2, slow)
        server.send_signal(signal.SIGHUP)
        await starting
        await asyncio.to_thread(server.wait_for_log, "reload done")
        assert served_versions(server) == {2}
        assert " ERROR " not in server.log()
    finally:
        await asyncio.wait([starting])
        if server.returncode is None:
            server.stop(timeout=15)

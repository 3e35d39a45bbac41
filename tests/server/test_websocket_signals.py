"""SIGTERM and SIGHUP close the WebSockets of a real ``aiorest run`` process with 1001 (Going Away)
within the graceful deadline (issue 37, point 5); after a SIGHUP a reconnect reaches the new worker."""

from __future__ import annotations

import signal
import time

import aiohttp

from harness.fixtures import APP, aiorest_process  # noqa: F401  (fixtures)


async def test_sigterm_closes_a_websocket_with_1001(aiorest_process):  # noqa: F811
    # A graceful deadline far above the client's 10-s wait: a WebSocket left to the deadline would
    # time the wait out, and one cut at the deadline would be 1006 (no close frame), not 1001.
    upstream = aiorest_process(APP, "--graceful-timeout", "60")
    async with aiohttp.ClientSession(upstream.url) as client, client.ws_connect("/ws") as ws:
        assert int(await ws.receive_str(timeout=10)) == upstream.pid
        upstream.send_signal(signal.SIGTERM)
        message = await ws.receive(timeout=10)
        assert message.type == aiohttp.WSMsgType.CLOSE and message.data == 1001, message
    assert upstream.process is not None and upstream.process.wait(20) == 0


async def test_sighup_closes_the_old_workers_websockets_and_a_reconnect_reaches_the_new_one(
    aiorest_process,  # noqa: F811
):
    upstream = aiorest_process(APP, "--workers", "1", "--graceful-timeout", "60")
    async with aiohttp.ClientSession(upstream.url) as client:
        async with client.ws_connect("/ws") as ws:
            old_pid = int(await ws.receive_str(timeout=10))
            upstream.send_signal(signal.SIGHUP)  # the worker is replaced: the old one stops gracefully
            message = await ws.receive(timeout=10)
            assert message.type == aiohttp.WSMsgType.CLOSE and message.data == 1001, message
        upstream.wait_for_log("reload done")
        deadline = time.monotonic() + 10
        while True:  # as a client does on 1001: connect again
            async with client.ws_connect("/ws") as ws:
                pid = int(await ws.receive_str(timeout=10))
                await ws.send_str("again")
                assert await ws.receive_str(timeout=10) == "again"
            if pid != old_pid or time.monotonic() > deadline:
                break
    assert pid != old_pid and pid in upstream.worker_pids()

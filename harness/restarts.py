"""Restarts under load, as figures: SIGHUP reloads and a SIGTERM with requests in flight.

For the reload tests and the production scenarios, against an ``aiorest run --workers N``
started with :class:`harness.processes.AiorestProcess`::

    with AiorestProcess("myapp:app", "--workers", "2") as upstream:
        result = asyncio.run(sighups_under_load(upstream, upstream.url + "/json", sighups=2))
        print(result.failed)                       # 0: no request lost

By hand: ``python -m load production restarts tests.apps.pid_app:app /pid --workers 2``.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import time
from dataclasses import dataclass

from harness import steady
from harness.processes import AiorestProcess

__all__ = ["sighups_under_load", "sigterm_in_flight", "SigtermResult"]


async def sighups_under_load(
    process: AiorestProcess,
    url: str,
    *,
    sighups: int = 2,
    rate: float = 400.0,
    duration: float = 10.0,
    connections: int = 16,
) -> steady.SteadyResult:
    """Steady load on ``url`` for ``duration`` s; after 1 s, ``sighups`` SIGHUPs, each once the last reload is done.

    Raises AssertionError (with the log) if a reload does not finish in time.
    """
    load = asyncio.ensure_future(steady.run(url, rate=rate, duration=duration, connections=connections))
    await asyncio.sleep(1.0)
    done = process.log().count("reload done")

    def reload() -> None:
        for number in range(1, sighups + 1):
            process.send_signal(signal.SIGHUP)
            process.wait_for_log("reload done", count=done + number, timeout=duration)

    try:
        await asyncio.to_thread(reload)
    finally:
        result = await load
    return result


@dataclass
class SigtermResult:
    """What a SIGTERM did to ``sent`` requests in flight."""

    sent: int
    answered: int  # complete 200 answers
    exit_code: int | None
    exit_seconds: float  # from the signal to the parent's exit

    def summary(self) -> dict[str, object]:
        return {**self.__dict__, "exit_seconds": round(self.exit_seconds, 2)}


def sigterm_in_flight(process: AiorestProcess, slow_path: str, *, count: int = 16, wait: float = 0.5) -> SigtermResult:
    """Send ``count`` requests for ``slow_path`` (each on its own connection), SIGTERM ``wait`` s later.

    Every one of them was received before the signal: each should be answered,
    and the process should exit within its grace period.
    """
    assert process.port is not None, "TCP only"
    sockets = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", process.port), timeout=60)
        sock.sendall(f"GET {slow_path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        sockets.append(sock)
    time.sleep(wait)
    began = time.monotonic()
    process.send_signal(signal.SIGTERM)
    answered = 0
    for sock in sockets:
        with sock:
            data = b""
            try:
                while chunk := sock.recv(65536):
                    data += chunk
            except OSError:
                pass
            answered += data.startswith(b"HTTP/1.1 200")
    assert process.process is not None
    code = process.process.wait(120)
    return SigtermResult(count, answered, code, time.monotonic() - began)

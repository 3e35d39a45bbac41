"""A steady, paced HTTP/1.1 load that counts every failed request: for restarts, failover and drains.

wrk and locust measure how much a server can take. This measures whether a
server *loses* requests while something happens to it (a SIGHUP, a killed
upstream, a drain): a fixed rate, well below capacity, on kept-alive
connections, and a strict client. It never retries: a request that does not get
a complete response is a failure, whatever the reason (refused, reset, closed
before the answer, timed out), and so is any 5xx. A response that says
``Connection: close`` is not a failure: the next request opens a new connection,
as every HTTP client does.

    python -m load steady http://127.0.0.1:8080/json --rate 400 --duration 30

Bounded: ``connections`` sockets, one request in flight on each, ``duration``
seconds, a ``timeout`` per request, and a response body of at most 1 MiB.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from urllib.parse import urlsplit

_MAX_BODY = 1024 * 1024
_MAX_HEAD = 64 * 1024


@dataclass
class SteadyResult:
    """What a steady run saw. ``failed`` counts requests without a complete non-5xx answer."""

    seconds: float
    sent: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    failed: int = 0
    failures: Counter[str] = field(default_factory=Counter)  # reason -> count
    first_failures: list[tuple[float, str]] = field(default_factory=list)  # (second of the run, reason), up to 20
    connections_opened: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    timeline: list[list[int]] = field(default_factory=list)  # per second of the run: [sent, failed]

    @property
    def ok(self) -> int:
        return sum(count for status, count in self.statuses.items() if status < 500)

    def percentile(self, q: float) -> float:
        """The ``q`` percentile (0-100) of the answered requests' latencies, in ms."""
        if not self.latencies_ms:
            return float("nan")
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(len(ordered) * q / 100))]

    def summary(self) -> dict[str, object]:
        data = asdict(self)
        del data["latencies_ms"], data["timeline"]
        data["statuses"] = {str(status): count for status, count in sorted(self.statuses.items())}
        data["failures"] = dict(self.failures)
        data["rate"] = round(self.sent / self.seconds, 1) if self.seconds else 0.0
        data["p50_ms"] = round(self.percentile(50), 2)
        data["p99_ms"] = round(self.percentile(99), 2)
        return data

    def _second(self, started: float) -> list[int]:
        second = min(int(time.monotonic() - started), max(0, len(self.timeline) - 1))
        return self.timeline[second]

    def _fail(self, started: float, reason: str) -> None:
        self.failed += 1
        self.failures[reason] += 1
        self._second(started)[1] += 1
        if len(self.first_failures) < 20:
            self.first_failures.append((round(time.monotonic() - started, 2), reason))


class _Connection:
    def __init__(self, host: str, port: int, unix: str | None) -> None:
        self.host, self.port, self.unix = host, port, unix
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        if self.unix is not None:
            self.reader, self.writer = await asyncio.open_unix_connection(self.unix)
        else:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


async def _exchange(connection: _Connection, request: bytes) -> tuple[int, bool]:
    """Send one request and read its whole response: (status, whether the connection stays open)."""
    assert connection.reader is not None and connection.writer is not None
    connection.writer.write(request)
    reader = connection.reader
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError as exc:
        raise ConnectionError("response head too large") from exc
    except asyncio.IncompleteReadError as exc:
        raise ConnectionError("closed before the response" if not exc.partial else "closed in the head") from exc
    if len(head) > _MAX_HEAD:
        raise ConnectionError("response head too large")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[1].isdigit():
        raise ConnectionError(f"bad status line {lines[0][:60]!r}")
    status = int(parts[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name:
            headers[name.strip().lower()] = value.strip()
    keep_alive = headers.get("connection", "").lower() != "close"
    try:
        if "content-length" in headers:
            length = int(headers["content-length"])
            if length > _MAX_BODY:
                raise ConnectionError("response body too large")
            await reader.readexactly(length)
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            total = 0
            while True:
                size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
                total += size
                if total > _MAX_BODY:
                    raise ConnectionError("response body too large")
                await reader.readexactly(size + 2)
                if size == 0:
                    break
        elif status not in (204, 304) and status >= 200:
            await reader.read(_MAX_BODY)  # the body ends with the connection
            keep_alive = False
    except asyncio.IncompleteReadError as exc:
        raise ConnectionError("closed in the body") from exc
    return status, keep_alive


async def _client(
    url: str, interval: float, start: float, deadline: float, timeout: float, result: SteadyResult, phase: float
) -> None:
    parts = urlsplit(url)
    unix = None
    if parts.scheme == "http+unix":  # http+unix://%2Fpath%2Fto.sock/json
        from urllib.parse import unquote

        unix = unquote(parts.netloc)
        host, port, host_header = "localhost", 0, "localhost"
    else:
        host, port = parts.hostname or "127.0.0.1", parts.port or 80
        host_header = parts.netloc
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    request = f"GET {target} HTTP/1.1\r\nHost: {host_header}\r\nUser-Agent: aiorest-steady\r\n\r\n".encode("latin-1")
    connection = _Connection(host, port, unix)
    at = start + phase
    try:
        while True:
            now = time.monotonic()
            if at > now:
                await asyncio.sleep(at - now)
            if time.monotonic() >= deadline:
                return
            at += interval
            result.sent += 1
            result._second(start)[0] += 1
            began = time.monotonic()
            try:
                async with asyncio.timeout(timeout):
                    if connection.writer is None:
                        await connection.open()
                        result.connections_opened += 1
                    status, keep_alive = await _exchange(connection, request)
            except TimeoutError:
                connection.close()
                result._fail(start, "timeout")
                continue
            except (OSError, ConnectionError) as exc:
                connection.close()
                result._fail(start, f"{type(exc).__name__}: {exc}"[:120])
                continue
            result.latencies_ms.append((time.monotonic() - began) * 1000)
            result.statuses[status] += 1
            if status >= 500:
                result._fail(start, f"status {status}")
            if not keep_alive:
                connection.close()
    finally:
        connection.close()


async def run(
    url: str,
    *,
    rate: float = 400.0,
    duration: float = 30.0,
    connections: int = 16,
    timeout: float = 10.0,
    progress: bool = False,
) -> SteadyResult:
    """Send ``rate`` requests a second for ``duration`` seconds to ``url``, spread over ``connections``.

    ``url``: ``http://host:port/path`` or ``http+unix://<percent-encoded socket path>/path``.
    """
    if rate <= 0 or duration <= 0 or connections < 1:
        raise ValueError("rate and duration must be positive, connections at least 1")
    interval = connections / rate
    start = time.monotonic()
    deadline = start + duration
    result = SteadyResult(seconds=duration, timeline=[[0, 0] for _ in range(max(1, math.ceil(duration)))])
    clients = [
        asyncio.ensure_future(
            _client(url, interval, start, deadline, timeout, result, phase=interval * i / connections)
        )
        for i in range(connections)
    ]
    reporter = asyncio.ensure_future(_report(result, start, deadline)) if progress else None
    try:
        await asyncio.gather(*clients)
    finally:
        for client in clients:
            client.cancel()
        if reporter is not None:
            reporter.cancel()
    return result


async def _report(result: SteadyResult, start: float, deadline: float) -> None:
    while time.monotonic() < deadline:
        await asyncio.sleep(5)
        print(
            f"  {time.monotonic() - start:5.1f} s: {result.sent} sent, {result.failed} failed",
            file=sys.stderr,
            flush=True,
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m load steady", description=__doc__.split("\n\n")[0])
    parser.add_argument("url")
    parser.add_argument("--rate", type=float, default=400.0, help="requests a second (default 400)")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds (default 30)")
    parser.add_argument("--connections", type=int, default=16, help="kept-alive connections (default 16)")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds a request may take (default 10)")
    args = parser.parse_args(argv)
    result = asyncio.run(
        run(
            args.url,
            rate=args.rate,
            duration=args.duration,
            connections=args.connections,
            timeout=args.timeout,
            progress=True,
        )
    )
    print(json.dumps(result.summary(), indent=2))
    return 1 if result.failed else 0

"""The client process of ``python -m load live``: N connections held open, driven by lines on stdin.

    python -m load.live.client ws|sse PORT N

Raw asyncio protocols on uvloop, the lightest a client can be: a WebSocket's handshake is one
fixed request, its server frames (unmasked) are parsed in place, and its own frames are masked with
a zero key (legal, and the payload unchanged); an event stream's ``data:`` lines are read as they
come, whatever the chunked framing around them. Each read is stamped with ``time.time_ns()``
before it is parsed: a broadcast's latency is that stamp less the server's (same host, same clock).

Commands, one per line, each answered with one JSON line on stdout (the first answer, unasked, is
``{"opened": k, "failed": f}``): ``expect`` (forget the latencies received), ``collect SECONDS``
(wait until every open connection has received one more message, at most SECONDS; answer its
latencies in µs), ``echo SECONDS CONNECTIONS`` (WebSockets: that many new connections send a
message and wait for its echo, over and over; answer the messages echoed a second) and ``quit``.
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
import time
from typing import Any, cast

import uvloop

PENDING = 256  # handshakes in flight at once while opening
MASK = b"\x00\x00\x00\x00"


def raise_nofile(wanted: int) -> int:
    """Raise the soft limit of open files toward ``wanted`` (up to the hard limit); the limit reached."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return max(soft, target)


def frame(opcode: int, payload: bytes) -> bytes:
    """A client frame (FIN set, masked with a zero key) of ``payload`` under 64 KiB."""
    if len(payload) < 126:
        return bytes([0x80 | opcode, 0x80 | len(payload)]) + MASK + payload
    return bytes([0x80 | opcode, 0x80 | 126]) + len(payload).to_bytes(2, "big") + MASK + payload


class Holder:
    """What every connection reports into: the latencies of the current broadcast, and who is open."""

    def __init__(self) -> None:
        self.latencies: list[int] = []  # ns
        self.alive = 0
        self.changed = asyncio.Event()

    def received(self, stamp: int, payload: bytes) -> None:
        self.latencies.append(stamp - int(payload))
        self.changed.set()


class Connection(asyncio.Protocol):
    """One connection: open once its response head says so; each message goes to ``on_message``."""

    def __init__(self, holder: Holder, request: bytes, status: bytes) -> None:
        self.holder = holder
        self.request = request
        self.status = status
        self.buffer = bytearray()
        self.open = False
        self.opened: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not asyncio.Transport's
        transport = self.transport
        transport.write(self.request)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.open:
            self.holder.alive -= 1
            self.holder.changed.set()
        elif not self.opened.done():
            self.opened.set_result(False)
        self.open = False

    def data_received(self, data: bytes) -> None:
        stamp = time.time_ns()
        self.buffer += data
        if not self.open:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self.buffer[:end])
            del self.buffer[: end + 4]
            if not head.startswith(self.status):
                self.opened.set_result(False)
                assert self.transport is not None
                self.transport.close()
                return
            self.open = True
            self.holder.alive += 1
            self.opened.set_result(True)
        self.parse(stamp)

    def parse(self, stamp: int) -> None:
        raise NotImplementedError

    def on_message(self, stamp: int, payload: bytes) -> None:
        self.holder.received(stamp, payload)


class WebSocketClient(Connection):
    def parse(self, stamp: int) -> None:
        buffer, pos = self.buffer, 0
        while len(buffer) - pos >= 2:
            first, second = buffer[pos], buffer[pos + 1]
            length, head = second & 0x7F, 2
            if length == 126:
                if len(buffer) - pos < 4:
                    break
                length, head = int.from_bytes(buffer[pos + 2 : pos + 4], "big"), 4
            elif length == 127:
                if len(buffer) - pos < 10:
                    break
                length, head = int.from_bytes(buffer[pos + 2 : pos + 10], "big"), 10
            if second & 0x80:  # a masked server frame: not expected, skipped whole
                head += 4
            if len(buffer) - pos < head + length:
                break
            payload = bytes(buffer[pos + head : pos + head + length])
            pos += head + length
            opcode = first & 0x0F
            if opcode in (1, 2):
                self.on_message(stamp, payload)
            elif opcode == 9 and self.transport is not None:
                self.transport.write(frame(10, payload))
            elif opcode == 8 and self.transport is not None:
                self.transport.close()
        del buffer[:pos]


class EchoClient(WebSocketClient):
    """Sends a message, waits for its echo, sends again; counts the echoes while ``counting``."""

    MESSAGE = frame(1, b"0123456789abcdef0123456789abcdef")
    counting = False
    echoes = 0

    def on_message(self, stamp: int, payload: bytes) -> None:
        if EchoClient.counting:
            EchoClient.echoes += 1
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(self.MESSAGE)


class EventStreamClient(Connection):
    def parse(self, stamp: int) -> None:
        *lines, rest = self.buffer.split(b"\n")
        for line in lines:
            if line.startswith(b"data:"):
                self.on_message(stamp, bytes(line[5:]).strip())
        self.buffer = bytearray(rest)


def request(kind: str, port: int) -> bytes:
    if kind == "sse":
        return f"GET /sse HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: text/event-stream\r\n\r\n".encode()
    return (
        f"GET /ws HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    ).encode()


async def open_all(
    kind: str, port: int, count: int, holder: Holder, factory: type[Connection] | None = None
) -> list[Connection]:
    """Open ``count`` connections, ``PENDING`` handshakes at a time; those that opened."""
    loop = asyncio.get_running_loop()
    cls = factory or (EventStreamClient if kind == "sse" else WebSocketClient)
    status = b"HTTP/1.1 200" if kind == "sse" else b"HTTP/1.1 101"
    data = request(kind, port)
    gate = asyncio.Semaphore(PENDING)

    async def one() -> Connection | None:
        async with gate:
            try:
                _, protocol = await loop.create_connection(lambda: cls(holder, data, status), "127.0.0.1", port)
                return protocol if await asyncio.wait_for(protocol.opened, 30) else None
            except (TimeoutError, OSError):
                return None

    return [c for c in await asyncio.gather(*(one() for _ in range(count))) if c is not None]


async def echo(port: int, seconds: float, count: int) -> dict[str, float]:
    holder = Holder()
    connections = await open_all("ws", port, count, holder, EchoClient)
    for connection in connections:
        connection.on_message(0, b"")  # the first message of each
    await asyncio.sleep(min(1.0, seconds / 4))  # warm-up, not counted
    EchoClient.echoes, EchoClient.counting = 0, True
    start = time.perf_counter()
    await asyncio.sleep(seconds)
    elapsed = time.perf_counter() - start
    EchoClient.counting = False
    for connection in connections:
        assert connection.transport is not None
        connection.transport.close()
    return {"connections": len(connections), "messages": EchoClient.echoes, "per_s": EchoClient.echoes / elapsed}


async def collect(holder: Holder, seconds: float) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    while len(holder.latencies) < holder.alive and time.monotonic() < deadline:
        holder.changed.clear()
        try:
            await asyncio.wait_for(holder.changed.wait(), max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            break
    return {"alive": holder.alive, "latencies_us": [round(ns / 1000) for ns in holder.latencies]}


async def serve(kind: str, port: int, count: int) -> None:
    raise_nofile(count + 1024)
    holder = Holder()
    connections = await open_all(kind, port, count, holder)
    reply({"opened": len(connections), "failed": count - len(connections)})
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := (await reader.readline()).decode().split():
        if line[0] == "expect":
            holder.latencies = []
            reply({"ok": True})
        elif line[0] == "collect":
            reply(await collect(holder, float(line[1])))
        elif line[0] == "echo":
            reply(await echo(port, float(line[1]), int(line[2])))
        elif line[0] == "quit":
            break
    for connection in connections:
        if connection.transport is not None:
            connection.transport.close()
    await asyncio.sleep(0.1)


def reply(answer: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()


def main(argv: list[str]) -> None:
    kind, port, count = argv[0], int(argv[1]), int(argv[2])
    uvloop.run(serve(kind, port, count))


if __name__ == "__main__":
    main(sys.argv[1:])

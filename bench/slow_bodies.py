"""What clients sending bodies at their own pace cost everybody else (issue 34, points 1 and 2).

Two questions, each against a fresh server (``bench/servers/upload_app.py`` under ``aiorest run``):

  slots   ``--max-concurrency 8``; twelve clients send ``POST /upload`` with
          ``Content-Length: 900000``, 300 KiB of it, then a byte a second. Meanwhile
          ``GET /json`` is asked ten times a second: how many answers are 200, how many 503.
  memory  ``--connections`` clients each send 250 KiB of a larger body and stall: the
          server's RSS before, while they stall, and after they close; and the 503s
          past ``max_body_memory`` (set with ``--max-body-memory``).

``--tree DIR`` runs the same against another checkout (the tree before a change), so the
two print side by side::

    python -m bench.slow_bodies --seconds 8 --connections 200
    python -m bench.slow_bodies --tree /tmp/before --seconds 8 --connections 200
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

from harness.processes import ROOT, ServerProcess


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def server(tree: Path, *flags: str) -> ServerProcess:
    # The tree's aiorest first (``-m`` puts the working directory first), the app from this one.
    env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{ROOT / 'bench' / 'servers'}"}
    command = [sys.executable, "-m", "aiorest", "run", "upload_app:app", "--port", "{port}"]
    process = ServerProcess("aiorest", [*command, "--log-level", "warning", *flags], env, cpu=0, cwd=tree)
    process.wait_ready("/json")
    return process


async def upload(port: int, length: int, first: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % length + b"x" * first)
    await writer.drain()
    return reader, writer


async def ask_json(port: int) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"GET /json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        line = await asyncio.wait_for(reader.readline(), 5)
        return int(line.split()[1]) if line else 0
    except (TimeoutError, OSError, IndexError, ValueError):
        return 0
    finally:
        writer.close()


async def slots(port: int, seconds: float) -> dict[int, int]:
    """Statuses of GET /json while twelve uploads trickle."""
    clients = [await upload(port, 900_000, 300 * 1024) for _ in range(12)]
    statuses: dict[int, int] = {}
    start = time.monotonic()
    next_byte = start + 1
    while time.monotonic() - start < seconds:
        status = await ask_json(port)
        statuses[status] = statuses.get(status, 0) + 1
        if time.monotonic() >= next_byte:
            next_byte += 1
            for _, writer in clients:
                if not writer.is_closing():
                    writer.write(b"x")
        await asyncio.sleep(0.1)
    for _, writer in clients:
        writer.close()
    return statuses


async def memory(process: ServerProcess, connections: int) -> dict[str, float]:
    """RSS (MiB) before, while ``connections`` bodies stall after 250 KiB, and after they close."""
    port = process.port
    pid = process.process.pid
    before = rss_mib(pid)
    clients = []
    for _ in range(connections):
        try:
            clients.append(await upload(port, 900_000, 250 * 1024))
        except ConnectionError:  # refused (503) and closed while it was still sending
            pass
    await asyncio.sleep(1.5)
    stalled = rss_mib(pid)
    refused = connections - len(clients)
    for reader, writer in clients:
        try:
            line = await asyncio.wait_for(reader.readline(), 0.05)
        except TimeoutError:
            line = None  # still stalled: held by the server
        except ConnectionError:
            line = b""  # answered and reset while it was still sending
        refused += line is not None and (line == b"" or b" 503 " in line)
        writer.close()
    await asyncio.sleep(1.5)
    return {"before": before, "stalled": stalled, "after": rss_mib(pid), "refused": refused}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", type=Path, default=ROOT, help="the checkout whose aiorest is served")
    parser.add_argument("--seconds", type=float, default=8, help="how long the uploads trickle (slots)")
    parser.add_argument("--connections", type=int, default=200, help="stalled bodies (memory)")
    parser.add_argument("--max-body-memory", default="", help="aiorest run --max-body-memory (memory; new trees)")
    args = parser.parse_args()
    print(f"tree {args.tree}")
    print(f"slots: 12 uploads of 900,000 bytes at a byte a second, --max-concurrency 8, {args.seconds:g} s …")
    process = server(args.tree, "--max-concurrency", "8")
    try:
        statuses = asyncio.run(slots(process.port, args.seconds))
    finally:
        process.stop()
    answered = ", ".join(f"{count} × {status or 'no answer'}" for status, count in sorted(statuses.items()))
    print(f"  GET /json meanwhile: {answered}")
    flags = ["--max-body-memory", args.max_body_memory] if args.max_body_memory else []
    print(f"memory: {args.connections} bodies stalled after 250 KiB {' '.join(flags)} …")
    process = server(args.tree, *flags)
    try:
        figures = asyncio.run(memory(process, args.connections))
    finally:
        process.stop()
    print(
        f"  RSS {figures['before']:.1f} MiB before, {figures['stalled']:.1f} stalled, {figures['after']:.1f} after"
        f" they closed; {figures['refused']:.0f} refused (503)"
    )


if __name__ == "__main__":
    main()

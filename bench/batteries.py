"""What the batteries cost: a route with a battery against the same route without it.

    python bench/batteries.py --rounds 10          # compression: gzip on a 10 KB and a 100 B JSON route
    python bench/batteries.py --smoke              # one round of 1 s: a check, not a measurement

One server process (bench/servers/compression_app.py) serves each route twice,
plain and under ``Compression``, pinned to CPU 0 like bench/run.py; wrk (pinned to
CPU 1) asks for gzip on both, so they differ by the middleware only. The order of
the pair alternates from round to round. Printed per route: requests/s of each,
their ratio (compressed over plain, paired by round) and the bytes on the wire of
one response, head included.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script: bench/ is a package

from bench.process import ServerProcess  # noqa: E402
from bench.run import SERVERS, measure  # noqa: E402
from bench.stats import median, paired_ratio  # noqa: E402
from bench.wrk import require_wrk  # noqa: E402

LUA = str(Path(__file__).resolve().parent / "accept_gzip.lua")
ROUTES = ["/big", "/small"]  # each also served under /gz with Compression


def wire_bytes(port: int, path: str) -> tuple[int, str]:
    """Bytes of one response to a GET asking for gzip (head and body), and its Content-Encoding."""
    request = f"GET {path} HTTP/1.1\r\nHost: bench\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(request.encode())
        data = bytearray()
        while chunk := sock.recv(65536):
            data += chunk
    head = bytes(data).partition(b"\r\n\r\n")[0].decode("latin-1").lower()
    encoding = next(
        (line.split(":", 1)[1].strip() for line in head.split("\r\n") if line.startswith("content-encoding:")), ""
    )
    return len(data), encoding or "identity"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--smoke", action="store_true", help="one round of 1 s")
    args = parser.parse_args()
    if args.smoke:
        args.rounds, args.seconds = 1, 1.0
    require_wrk()
    rates: dict[str, list[float]] = {path: [] for route in ROUTES for path in (route, "/gz" + route)}
    wire: dict[str, tuple[int, str]] = {}
    for round_number in range(args.rounds):
        server = ServerProcess(
            "aiorest", [sys.executable, str(SERVERS / "compression_app.py"), "--port", "{port}"], dict(os.environ)
        )
        try:
            server.wait_ready(ROUTES[0])
            for route in ROUTES:
                pair = [route, "/gz" + route]
                for path in pair if round_number % 2 == 0 else pair[::-1]:
                    print(f"round {round_number + 1}/{args.rounds}  {path}", file=sys.stderr, flush=True)
                    figures = measure(server, path, args.connections, args.seconds, False, script=LUA)
                    rates[path].append(figures["requests_per_sec"])
                    wire.setdefault(path, wire_bytes(server.port, path))
        finally:
            server.stop()
    print(f"{'route':12s} {'req/s':>10s} {'bytes/resp':>10s}  encoding   ratio gzip/plain (95% CI)")
    for route in ROUTES:
        for path in (route, "/gz" + route):
            size, encoding = wire[path]
            print(f"{path:12s} {median(rates[path]):10.0f} {size:10d}  {encoding:9s}", end="")
            if path != route:
                ratio = paired_ratio(rates[path], rates[route])
                print(f"  {ratio.mean:.3f} ({ratio.ci_low:.3f}-{ratio.ci_high:.3f})", end="")
            print()


if __name__ == "__main__":
    main()

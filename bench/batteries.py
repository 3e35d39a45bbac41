"""What each battery costs: a route with it against the same route without it, in one run.

    python bench/batteries.py --rounds 10 --dsn postgresql://postgres@127.0.0.1/aiorest_bench \
        --redis redis://127.0.0.1:6379/0          # every battery, 10 interleaved rounds of 5 s
    python bench/batteries.py --smoke              # one round of 1 s: a check, not a measurement

The batteries: gzip on a 10 KB and a 100 B JSON body, CORS on a simple request,
a session read from a signed cookie, from Redis (``--redis``) and from
PostgreSQL (``--dsn``: aiorest's session table is created there); without
those options their session battery is left out. ``--only gzip,cookie`` picks
by name.

One server process (bench/servers/batteries_app.py) serves each route twice,
plain and with the battery, pinned to CPU 0 like bench/run.py; wrk (pinned to
CPU 1, bench/headers.lua) sends both the same headers, so the pair differs by
the battery only. The order within a pair alternates from round to round.
Printed per battery: requests/s of each, the ratio battery/plain (paired by
round, mean and 95% CI), server CPU per request, and the bytes on the wire of
one response, head included. Then the compression bar: a 10 KB JSON body cut
by at least 3× on the wire, a 100 B one untouched. Results and a plot go to
bench/out/<time>-batteries/.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import socket
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script: bench/ is a package

from bench.host import describe  # noqa: E402
from bench.run import SERVERS, Record, keep_measuring, measure, write_summary  # noqa: E402
from bench.stats import Summary, bar_chart, median, paired_ratio, summarise  # noqa: E402
from bench.wrk import require_wrk  # noqa: E402
from harness.processes import ServerProcess  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
LUA = str(Path(__file__).resolve().parent / "headers.lua")
ORIGIN = "https://app.example.org"  # batteries_app's allowed origin


@dataclasses.dataclass(frozen=True)
class Battery:
    """One comparison: ``path`` with the battery, ``plain`` without it, both sent ``headers``."""

    name: str
    plain: str
    path: str
    headers: tuple[str, ...] = ()
    #: POSTed once per server before measuring: its Set-Cookie goes into every request of the pair.
    login: str | None = None
    #: "redis" or "dsn": the option it needs; left out without it.
    needs: str | None = None


BATTERIES = [
    Battery("gzip, 10 KB JSON", "/big", "/gz/big", ("Accept-Encoding: gzip",)),
    Battery("gzip, 100 B JSON", "/small", "/gz/small", ("Accept-Encoding: gzip",)),
    Battery("CORS, simple request", "/small", "/cors/small", (f"Origin: {ORIGIN}",)),
    Battery("session read, signed cookie", "/me", "/session/cookie/me", login="/session/cookie/login"),
    Battery("session read, Redis", "/me", "/session/redis/me", login="/session/redis/login", needs="redis"),
    Battery("session read, PostgreSQL", "/me", "/session/pg/me", login="/session/pg/login", needs="dsn"),
]


def exchange(port: int, request: str) -> bytes:
    """Send one request (asking the server to close) and read the whole answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(request.encode())
        data = bytearray()
        while chunk := sock.recv(65536):
            data += chunk
    return bytes(data)


def session_cookie(port: int, path: str) -> str:
    """The ``Cookie`` header line for the session a POST to ``path`` makes."""
    data = exchange(port, f"POST {path} HTTP/1.1\r\nHost: bench\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
    for line in data.partition(b"\r\n\r\n")[0].decode("latin-1").split("\r\n"):
        if line.lower().startswith("set-cookie:"):
            return "Cookie: " + line.split(":", 1)[1].split(";", 1)[0].strip()
    raise RuntimeError(f"POST {path} set no cookie: {data[:300]!r}")


def wire_bytes(port: int, path: str, headers: tuple[str, ...]) -> tuple[int, int, str]:
    """Bytes of one response to a GET with ``headers``: head and body, the body alone; its Content-Encoding."""
    head_lines = "".join(f"{line}\r\n" for line in headers)
    data = exchange(port, f"GET {path} HTTP/1.1\r\nHost: bench\r\n{head_lines}Connection: close\r\n\r\n")
    head, _, body = data.partition(b"\r\n\r\n")
    fields = dict(line.split(":", 1) for line in head.decode("latin-1").lower().split("\r\n")[1:])
    return len(data), len(body), fields.get("content-encoding", "identity").strip()


def run_rounds(
    batteries: list[Battery], rounds: int, seconds: float, connections: int, env: dict[str, str], raw: list[Record]
) -> None:
    for number in range(rounds):
        server = ServerProcess("aiorest", [sys.executable, str(SERVERS / "batteries_app.py"), "--port", "{port}"], env)
        try:
            server.wait_ready("/small")
            for battery in batteries:
                headers = battery.headers
                if battery.login is not None:
                    headers += (session_cookie(server.port, battery.login),)
                pair = [battery.plain, battery.path]
                for path in pair if number % 2 == 0 else pair[::-1]:
                    print(f"round {number + 1}/{rounds}  {battery.name:28s} {path}", file=sys.stderr, flush=True)
                    figures = measure(server, path, connections, seconds, False, script=LUA, script_args=headers)
                    size, body, encoding = wire_bytes(server.port, path, headers)
                    raw.append(
                        {"round": number, "battery": battery.name, "path": path, **figures}
                        | {"wire_bytes": size, "body_bytes": body, "encoding": encoding}
                    )
        finally:
            server.stop()


def summarise_run(batteries: list[Battery], raw: list[dict[str, Any]]) -> dict[str, Any]:
    cells = {}
    for battery in batteries:
        runs = {
            path: [r for r in raw if r["battery"] == battery.name and r["path"] == path]
            for path in (battery.plain, battery.path)
        }
        with_, without = runs[battery.path], runs[battery.plain]
        paired = min(len(with_), len(without))
        ratio = paired_ratio(
            [r["requests_per_sec"] for r in with_[:paired]], [r["requests_per_sec"] for r in without[:paired]]
        )
        cells[battery.name] = {
            "plain": battery.plain,
            "path": battery.path,
            "rps": summarise([r["requests_per_sec"] for r in with_]).__dict__,
            "plain_rps": summarise([r["requests_per_sec"] for r in without]).__dict__,
            "ratio": ratio.__dict__,
            "server_cpu_us": median([r["server_cpu_us_per_request"] for r in with_]),
            "plain_server_cpu_us": median([r["server_cpu_us_per_request"] for r in without]),
            "wire_bytes": with_[0]["wire_bytes"],
            "plain_wire_bytes": without[0]["wire_bytes"],
            "body_bytes": with_[0]["body_bytes"],
            "plain_body_bytes": without[0]["body_bytes"],
            "encoding": with_[0]["encoding"],
            "errors": sum(r["errors"] for r in with_ + without),
        }
    return cells


def bar(cells: dict[str, Any]) -> list[tuple[str, bool]]:
    if "gzip, 10 KB JSON" not in cells or "gzip, 100 B JSON" not in cells:
        return []
    big, small = cells["gzip, 10 KB JSON"], cells["gzip, 100 B JSON"]
    cut = big["plain_wire_bytes"] / big["wire_bytes"]
    return [
        (
            f"gzip cuts a 10 KB JSON body's bytes on the wire by ≥ 3×: {cut:.1f}× ({big['plain_wire_bytes']:,} → "
            f"{big['wire_bytes']:,} B)",
            cut >= 3,
        ),
        (
            f"a 100 B JSON body goes untouched: {small['encoding']}, a body of {small['body_bytes']} B against "
            f"{small['plain_body_bytes']} B (the head gains Vary: Accept-Encoding)",
            small["encoding"] == "identity" and small["body_bytes"] == small["plain_body_bytes"],
        ),
    ]


def report(summary: dict[str, Any]) -> str:
    lines = [
        "| battery | route | req/s with (95% CI) | req/s without | ratio with/without (95% CI) "
        "| server CPU µs/req with, without | bytes/response with, without | errors |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, cell in summary["cells"].items():
        rps, plain, ratio = Summary(**cell["rps"]), Summary(**cell["plain_rps"]), Summary(**cell["ratio"])
        lines.append(
            f"| {name} | {cell['path']} vs {cell['plain']} | {rps.mean:,.0f} ± {rps.half_width:,.0f} "
            f"| {plain.mean:,.0f} ± {plain.half_width:,.0f} "
            f"| {ratio.mean:.2f} ({ratio.ci_low:.2f}–{ratio.ci_high:.2f}) "
            f"| {cell['server_cpu_us']:.1f}, {cell['plain_server_cpu_us']:.1f} "
            f"| {cell['wire_bytes']:,} ({cell['encoding']}), {cell['plain_wire_bytes']:,} | {cell['errors']} |"
        )
    lines.append("")
    lines += [f"- {'PASS' if ok else 'FAIL'}: {text}" for text, ok in summary["bar"]]
    return "\n".join(lines)


def plot(summary: dict[str, Any], path: Path) -> bool:
    names = list(summary["cells"])
    series = {
        "without": [Summary(**summary["cells"][n]["plain_rps"]) for n in names],
        "with the battery": [Summary(**summary["cells"][n]["rps"]) for n in names],
    }
    return bar_chart(path, "What each battery costs (requests/s, 95% CI)", names, series, "requests/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--smoke", action="store_true", help="one round of 1 s")
    parser.add_argument("--out", type=Path, default=None, help="default: bench/out/<time>-batteries")
    parser.add_argument("--dsn", default=None, help="PostgreSQL for the session store (its table is created there)")
    parser.add_argument("--redis", default=None, help="Redis URL for the session store, e.g. redis://127.0.0.1:6379/0")
    parser.add_argument("--only", default=None, help="comma-separated battery names (substrings), e.g. gzip,cookie")
    args = parser.parse_args()
    if args.smoke:
        args.rounds, args.seconds = 1, 1.0
    require_wrk()
    host = describe()
    out = args.out or ROOT / "bench" / "out" / f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}-batteries"
    out.mkdir(parents=True, exist_ok=True)
    given = {"redis": args.redis, "dsn": args.dsn}
    batteries = [b for b in BATTERIES if b.needs is None or given[b.needs]]
    for left_out in (b for b in BATTERIES if b not in batteries):
        print(f"left out: {left_out.name} (give --{left_out.needs})", file=sys.stderr)
    if args.only:
        wanted = [word.strip() for word in args.only.split(",")]
        batteries = [b for b in batteries if any(word in b.name for word in wanted)]
    env = dict(os.environ)
    env.update({"BATTERIES_REDIS": args.redis or "", "BATTERIES_DSN": args.dsn or ""})
    raw: list[Record] = []
    failure = keep_measuring(
        out, raw, lambda: run_rounds(batteries, args.rounds, args.seconds, args.connections, env, raw)
    )
    cells = summarise_run(batteries, raw)
    summary = {"cells": cells, "bar": bar(cells), "command": " ".join(sys.argv), "host": host}
    write_summary(out, summary, report(summary), plot)
    if failure:
        raise SystemExit(failure)
    if not all(ok for _, ok in summary["bar"]):
        raise SystemExit("the compression bar is not met")


if __name__ == "__main__":
    main()

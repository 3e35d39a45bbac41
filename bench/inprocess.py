"""The framework's own cost per request, without sockets: a profiling aid.

Feeds keep-alive requests one at a time to an HttpProtocol with a stand-in
transport, on uvloop, and prints microseconds per request (the median of
several repeats). What it leaves out (recv, send, epoll) is the same for every
server on the machine, so a change here shows up clearly where wrk's figures
would drown it in noise. ``--profile`` prints cProfile's top functions instead;
``--ceiling`` feeds the ceiling's canned-response protocol the same way, for
comparison; ``--endpoints`` picks a subset. ``--metrics``, ``--access-log PATH``
(``--access-log-format json``) and ``--blocked-loop-threshold SECONDS`` serve through
a :class:`aiorest.Server` started with those options (listening on a port nobody
connects to), to count their cost; ``--tracing RATIO`` likewise, with OpenTelemetry
tracing sampling that ratio of the requests (see ``_tracing``: the spans are encoded as
OTLP/HTTP would send them, then dropped).
``--forwarded`` times instead the resolution of hostile Forwarded/X-Forwarded-For
headers (megabytes of elements) behind a trusted proxy, in milliseconds a request.

    python -m bench.inprocess [--requests 100000] [--repeats 7] [--profile] [--ceiling] [--endpoints /json]
                              [--metrics] [--access-log PATH [--access-log-format json]]
                              [--blocked-loop-threshold SECONDS] [--tracing RATIO] [--forwarded]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import functools
import pstats
import socket
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from aiorest import App, Limits, Server
from aiorest.http.forwarded import TrustedProxies, resolve_forwarded
from aiorest.server.protocol import HttpProtocol, ServerState
from bench.servers.aiorest_app import app as bench_app
from bench.servers.ceiling import Ceiling

_MEGABYTE = 1 << 20
#: Headers a client behind a trusted proxy (10.0.0.0/8) may send, and the client each resolves to.
#: Resolving one took 0.3-0.5 s a megabyte while every element was parsed; now a few ms.
FORWARDED_CASES: list[tuple[list[tuple[bytes, bytes]], str | None]] = [
    ([(b"Forwarded", b"," * _MEGABYTE)], None),  # a million empty elements
    ([(b"Forwarded", b"a=b;" * (_MEGABYTE // 4))], None),  # one element of 250,000 pairs
    ([(b"Forwarded", b"for=1.2.3.4;proto=http," * 40_000 + b"for=198.51.100.7, for=10.0.0.1")], "198.51.100.7"),
    ([(b"Forwarded", b"for=1.2.3.4, " * 900)] * 100 + [(b"Forwarded", b"for=198.51.100.8")], "198.51.100.8"),
    ([(b"X-Forwarded-For", b"1.2.3.4, " * 9_000 + b"198.51.100.9")] * 100, "198.51.100.9"),
]
FORWARDED_PROXIES = "10.0.0.0/8"

REQUESTS = {
    "/json": b"GET /json HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n",
    "/plaintext": b"GET /plaintext HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n",
}


class _Transport:
    """Counts the responses written and asks for the next request; everything else is a no-op."""

    def __init__(self, on_response: Callable[[], object]) -> None:
        self.writes = 0
        self._on_response = on_response

    def write(self, data: bytes) -> None:
        self.writes += 1
        self._on_response()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "socket":
            return _Socket()
        return ("127.0.0.1", 50000) if name == "peername" else default

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        raise RuntimeError("the benchmark connection was closed: a request failed")


class _Socket:
    """What connection_made sets TCP_NODELAY on."""

    family = socket.AF_INET

    def setsockopt(self, *args: object) -> None:
        pass


def _aiorest(app: App, loop: asyncio.AbstractEventLoop) -> asyncio.Protocol:
    state = ServerState()
    state.refresh()
    state.static_endpoints = app.static_endpoints()  # as Server keeps it once the app started
    return HttpProtocol(app, state, Limits(), loop)


def _ceiling(loop: asyncio.AbstractEventLoop) -> asyncio.Protocol:
    return Ceiling()


async def _drive(
    make_protocol: Callable[[asyncio.AbstractEventLoop], asyncio.Protocol], request: bytes, count: int
) -> float:
    """Seconds to answer ``count`` requests, each after the previous one's response.

    Each request is fed from a loop callback of its own, as a socket's data
    would be, never from a Task: the driver costs every Python version the same
    (one callback a request), and only the server's own work differs.
    """
    loop = asyncio.get_running_loop()
    finished: asyncio.Future[None] = loop.create_future()
    protocol = make_protocol(loop)

    def feed() -> None:
        if transport.writes < count:
            protocol.data_received(request)
        elif not finished.done():
            finished.set_result(None)

    transport = _Transport(lambda: loop.call_soon(feed))
    protocol.connection_made(transport)  # type: ignore[arg-type]
    started = time.perf_counter()
    loop.call_soon(feed)
    await finished
    elapsed = time.perf_counter() - started
    protocol.connection_lost(None)  # ends the connection's Task
    await asyncio.sleep(0)
    return elapsed


async def _measure(args: argparse.Namespace) -> None:
    server: Server | None = None
    if args.metrics or args.access_log or args.blocked_loop_threshold or args.tracing is not None:
        server = Server(
            bench_app,
            host="127.0.0.1",
            port=0,
            metrics=args.metrics,
            access_log=args.access_log,
            access_log_format=args.access_log_format,
            blocked_loop_threshold=args.blocked_loop_threshold,
            tracing=False if args.tracing is None else _tracing(args.tracing),
        )
        await server.start()
        factory = server._factory
        assert factory is not None
        make_protocol: Callable[[asyncio.AbstractEventLoop], asyncio.Protocol] = lambda loop: factory()  # noqa: E731
    else:
        await bench_app.startup()
        make_protocol = functools.partial(_aiorest, bench_app)
    if args.ceiling:
        make_protocol = _ceiling
    try:
        for path in args.endpoints:
            request = REQUESTS[path]
            await _drive(make_protocol, request, 2000)  # warm up
            if args.profile:
                profiler = cProfile.Profile()
                profiler.enable()
                await _drive(make_protocol, request, args.requests)
                profiler.disable()
                print(f"== {path}")
                pstats.Stats(profiler).sort_stats("tottime").print_stats(15)
                continue
            runs = [await _drive(make_protocol, request, args.requests) for _ in range(args.repeats)]
            per_request = [run * 1e6 / args.requests for run in runs]
            print(
                f"{path:12s} {statistics.median(per_request):6.2f} µs/request "
                f"(min {min(per_request):.2f}, max {max(per_request):.2f}; {args.repeats} × {args.requests:,})"
            )
    finally:
        if server is not None:
            await server.stop()
        else:
            await bench_app.shutdown()


def _time_forwarded(repeats: int) -> None:
    proxies = TrustedProxies(FORWARDED_PROXIES)
    for headers, _ in FORWARDED_CASES:
        size = sum(len(name) + len(value) for name, value in headers)
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            resolve_forwarded(headers, proxies)
            times.append(time.perf_counter() - started)
        first = headers[0][1][:24].decode()
        print(f"{size / 1000:8.0f} KB  {statistics.median(times) * 1000:7.2f} ms  {first!r}... x{len(headers)}")


def _tracing(ratio: float) -> Any:
    """Tracing as ``aiorest run --tracing`` sets it up (a BatchSpanProcessor, the ratio's sampler), with an
    exporter that encodes each batch as the OTLP/HTTP one does and drops it instead of POSTing it; the queue
    is made big enough that no span is dropped for want of room (the default 2048 would drop some here)."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    from aiorest.ops.tracing import Tracing

    class Encoding(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            encode_spans(spans).SerializePartialToString()
            return SpanExportResult.SUCCESS

    provider = TracerProvider(sampler=ParentBased(TraceIdRatioBased(ratio)))
    provider.add_span_processor(BatchSpanProcessor(Encoding(), max_queue_size=200_000))
    return Tracing(tracer_provider=provider)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.inprocess", description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--profile", action="store_true", help="cProfile one run per endpoint instead")
    parser.add_argument("--ceiling", action="store_true", help="feed the ceiling's canned-response protocol instead")
    parser.add_argument(
        "--endpoints",
        type=lambda text: text.split(","),
        default=list(REQUESTS),
        help=f"comma-separated subset of {','.join(REQUESTS)}",
    )
    parser.add_argument("--metrics", action="store_true", help="serve with metrics=True")
    parser.add_argument("--access-log", metavar="PATH", help="serve with an access log written to PATH")
    parser.add_argument("--access-log-format", default="combined", choices=("combined", "json"))
    parser.add_argument("--blocked-loop-threshold", type=float, metavar="SECONDS", help="serve with the detector on")
    parser.add_argument("--forwarded", action="store_true", help="time hostile Forwarded headers instead")
    parser.add_argument("--tracing", type=float, metavar="RATIO", help="serve with tracing, sampling RATIO")
    args = parser.parse_args(argv)
    if args.forwarded:
        _time_forwarded(args.repeats)
        return
    unknown = set(args.endpoints) - set(REQUESTS)
    if unknown:
        parser.error(f"unknown endpoints: {', '.join(sorted(unknown))}")
    try:
        import uvloop
    except ImportError:
        print("uvloop is not installed: measuring on asyncio's own loop", file=sys.stderr)
        asyncio.run(_measure(args))
    else:
        uvloop.run(_measure(args))
    print(f"Python {sys.version.split()[0]}")


if __name__ == "__main__":
    main(sys.argv[1:])

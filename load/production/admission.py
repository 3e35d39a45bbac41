"""Admission control under a 10x overload: only 200s and 503s, and the 200s as fast as unloaded.

    python -m load production admission [--seconds 4] [--max-concurrency 16] [--work 0.01]

One aiorest worker serves ``GET /work`` (``await asyncio.sleep(work)``: a handler
waiting on I/O, the kind admission control is for) with ``max_concurrency``
slots and the default ``max_queue`` and ``queue_timeout``. A client process
first measures the unloaded capacity and p99 with ``max_concurrency``
connections (every request finds a slot), each sending its next request as
soon as it has an answer; then it offers ten times that many connections for
the same time, each at the pace of one unloaded client (a request every
``max_concurrency / unloaded rate`` seconds, at once if late: a client that
got a quick 503 waits for its next turn, it does not hammer), so ten times the
capacity is offered. It prints the
unloaded p99, the p99 of the overload's 200s, their ratio, the counts by status,
the errors (timeouts, connection errors), the worker's RSS growth and the
longest its queue has been. Bounded: about ``2 * seconds + 5`` s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Any

from harness.ports import free_port

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The server and the client are child processes of their own (this module, run with --serve or --client).
_CHILD = [sys.executable, "-m", "load.production.admission"]
_REQUEST = b"GET /work HTTP/1.1\r\nHost: load\r\n\r\n"


# -- the server (a child process) -----------------------------------------------------------


def _serve(port: int, max_concurrency: int, work: float, max_queue: int | None, queue_timeout: float | None) -> None:
    from aiorest import App, Server
    from aiorest.server import new_event_loop

    app = App()

    @app.get("/work")
    async def do_work(request: Any) -> dict[str, bool]:
        await asyncio.sleep(work)
        return {"ok": True}

    async def main() -> None:
        options: dict[str, Any] = {"max_queue": max_queue}
        if queue_timeout is not None:
            options["queue_timeout"] = queue_timeout
        server = Server(app, port=port, max_concurrency=max_concurrency, backlog=4096, **options)

        @app.get("/stats")
        async def stats(request: Any) -> dict[str, Any]:
            gate = server.admission
            assert gate is not None
            return {
                "peak_queued": gate.peak_queued,
                "max_queue": gate.max_queue,
                "queue_timeout": gate.queue_timeout,
                "rejected": gate.rejected,
                "rss_kb": _rss_kb(),
            }

        stop = asyncio.Event()
        await server.serve_forever(stop, ready=lambda: print("ready", flush=True))

    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        runner.run(main())


def _rss_kb() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


# -- the client (a child process) -----------------------------------------------------------


async def _one_connection(port: int, until: float, interval: float, results: dict[str, Any]) -> None:
    latencies = results["latencies_200"]
    statuses = results["statuses"]
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 5)
    except (OSError, TimeoutError):
        results["connect_errors"] += 1
        return
    try:
        start = time.perf_counter()
        while start < until:
            writer.write(_REQUEST)
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
                length = 0
                retry_after = False
                for line in head.split(b"\r\n"):
                    lower = line.lower()
                    if lower.startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                    elif lower.startswith(b"retry-after:"):
                        retry_after = True
                if length:
                    await asyncio.wait_for(reader.readexactly(length), 5)
            except TimeoutError:
                results["timeouts"] += 1
                return
            except (OSError, asyncio.IncompleteReadError):
                results["connection_errors"] += 1
                return
            elapsed = time.perf_counter() - start
            status = head[9:12].decode()
            statuses[status] = statuses.get(status, 0) + 1
            if status == "200":
                latencies.append(elapsed)
            elif status == "503" and not retry_after:
                results["503_without_retry_after"] += 1
            # the next request at the pace of a client of the unloaded run (at once if late)
            start += interval
            now = time.perf_counter()
            if start > now:
                await asyncio.sleep(start - now)
            else:
                start = now
    finally:
        writer.close()


async def _load(port: int, connections: int, seconds: float, interval: float) -> dict[str, Any]:
    results: dict[str, Any] = {
        "latencies_200": [],
        "statuses": {},
        "timeouts": 0,
        "connect_errors": 0,
        "connection_errors": 0,
        "503_without_retry_after": 0,
    }
    until = time.perf_counter() + seconds
    await asyncio.gather(*(_one_connection(port, until, interval, results) for _ in range(connections)))
    latencies = sorted(results.pop("latencies_200"))
    results["count_200"] = len(latencies)
    results["p50_ms"] = _percentile(latencies, 0.50) * 1000
    results["p99_ms"] = _percentile(latencies, 0.99) * 1000
    results["rate_200"] = len(latencies) / seconds
    return results


def _percentile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] if ordered else float("nan")


def _client(port: int, connections: int, seconds: float, interval: float) -> None:
    try:
        import uvloop

        loop_factory = uvloop.new_event_loop
    except ImportError:
        loop_factory = asyncio.new_event_loop
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        print(json.dumps(runner.run(_load(port, connections, seconds, interval))))


# -- the measurement ---------------------------------------------------------------------------


def _run_client(port: int, connections: int, seconds: float, interval: float = 0.0) -> dict[str, Any]:
    command = [*_CHILD, "--client", str(port), str(connections), str(seconds), str(interval)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 30, env=_env(), check=True)
    return dict(json.loads(done.stdout))


def _stats(port: int) -> dict[str, Any]:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"GET /stats HTTP/1.1\r\nHost: load\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return dict(json.loads(data.split(b"\r\n\r\n", 1)[1]))


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [_ROOT, os.environ.get("PYTHONPATH")]))}


def measure(
    seconds: float = 4.0,
    max_concurrency: int = 16,
    work: float = 0.01,
    overload: int = 10,
    max_queue: int | None = None,
    queue_timeout: float | None = None,
) -> dict[str, Any]:
    """Unloaded run, then ``overload`` times the connections; the figures as a dict.

    ``max_queue`` and ``queue_timeout``: None for the server's defaults.
    """
    port = free_port()
    command = [*_CHILD, "--serve", str(port), str(max_concurrency), str(work)]
    command += [json.dumps(max_queue), json.dumps(queue_timeout)]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=_env())
    try:
        assert server.stdout is not None
        if server.stdout.readline().strip() != "ready":
            raise RuntimeError("the server did not start")
        _run_client(port, max_concurrency, 0.5)  # warm up
        before = _stats(port)
        unloaded = _run_client(port, max_concurrency, seconds)
        # each of the overload's clients at the pace of one of the unloaded run's
        interval = max_concurrency / unloaded["rate_200"]
        overloaded = _run_client(port, max_concurrency * overload, seconds, interval)
        after = _stats(port)
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        if server.stdout is not None:
            server.stdout.close()
    errors = {key: overloaded[key] for key in ("timeouts", "connect_errors", "connection_errors")}
    return {
        "max_concurrency": max_concurrency,
        "max_queue": after["max_queue"],
        "queue_timeout_s": after["queue_timeout"],
        "handler_work_s": work,
        "connections_unloaded": max_concurrency,
        "connections_overloaded": max_concurrency * overload,
        "unloaded_rate_per_s": round(unloaded["rate_200"]),
        "offered_rate_per_s": round(max_concurrency * overload / interval),
        "unloaded_p50_ms": round(unloaded["p50_ms"], 2),
        "unloaded_p99_ms": round(unloaded["p99_ms"], 2),
        "overloaded_rate_200_per_s": round(overloaded["rate_200"]),
        "overloaded_p50_200_ms": round(overloaded["p50_ms"], 2),
        "overloaded_p99_200_ms": round(overloaded["p99_ms"], 2),
        "p99_ratio": round(overloaded["p99_ms"] / unloaded["p99_ms"], 2),
        "statuses": overloaded["statuses"],
        "503_without_retry_after": overloaded["503_without_retry_after"],
        "errors": errors,
        "unloaded_errors": {key: unloaded[key] for key in errors},
        "peak_queued": after["peak_queued"],
        "rss_growth_kb": after["rss_kb"] - before["rss_kb"],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m load production admission", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="each phase's duration (default 4)")
    parser.add_argument("--max-concurrency", type=int, default=16)
    parser.add_argument("--work", type=float, default=0.01, help="the handler's sleep in seconds (default 0.01)")
    parser.add_argument("--overload", type=int, default=10, help="times the unloaded connections (default 10)")
    parser.add_argument("--max-queue", type=int, help="default: the server's (max_concurrency)")
    parser.add_argument("--queue-timeout", type=float, help="default: the server's")
    args = parser.parse_args(argv)
    result = measure(args.seconds, args.max_concurrency, args.work, args.overload, args.max_queue, args.queue_timeout)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        _serve(int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), json.loads(sys.argv[5]), json.loads(sys.argv[6]))
    elif len(sys.argv) > 1 and sys.argv[1] == "--client":
        _client(int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]))
    else:
        main()

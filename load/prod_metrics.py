"""The cost of --metrics on /json: requests/s with metrics against without, in one interleaved run.

    python load/prod_metrics.py [--rounds 4] [--seconds 3] [--connections 32]

Two aiorest processes of one worker each serve the same ``/json`` (``{"message":
"Hello, World!"}``), one with ``--metrics``, one without. wrk drives them in
turn, ``rounds`` times each, alternating which goes first; the script prints
the mean requests/s of each, their standard deviations and the ratio (with
metrics / without). Bounded: about ``2 * rounds * seconds + 5`` s.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from typing import Any

from aiorest import App

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

app = App()


@app.get("/json")
async def hello(request: Any) -> dict[str, str]:
    return {"message": "Hello, World!"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start(metrics: bool) -> tuple[subprocess.Popen[bytes], int]:
    port = _free_port()
    command = [sys.executable, "-m", "aiorest", "run", "load.prod_metrics:app", "--port", str(port)]
    command += ["--log-level", "warning", "--metrics" if metrics else "--no-metrics"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [_ROOT, os.environ.get("PYTHONPATH")]))}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    process = subprocess.Popen(command, cwd=_ROOT, env=env)
    deadline = time.monotonic() + 15
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json", timeout=1):
                return process, port
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                process.wait()
                raise RuntimeError("the server did not start") from None
            time.sleep(0.1)


def _wrk(port: int, seconds: float, connections: int) -> float:
    command = ["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(seconds))}s", f"http://127.0.0.1:{port}/json"]
    output = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 30, check=True).stdout
    match = re.search(r"Requests/sec:\s+([\d.]+)", output)
    if match is None or "Non-2xx" in output or "Socket errors" in output:
        raise RuntimeError(f"wrk reported errors or no rate:\n{output}")
    return float(match.group(1))


def measure(rounds: int = 4, seconds: float = 3.0, connections: int = 32) -> dict[str, Any]:
    """Interleaved wrk rounds against both servers; requests/s of each and the ratio."""
    servers = {"off": _start(False), "on": _start(True)}
    rates: dict[str, list[float]] = {"off": [], "on": []}
    try:
        for name in servers:
            _wrk(servers[name][1], 1, connections)  # warm up
        for round_number in range(rounds):
            order = ("off", "on") if round_number % 2 == 0 else ("on", "off")
            for name in order:
                rates[name].append(_wrk(servers[name][1], seconds, connections))
        with urllib.request.urlopen(f"http://127.0.0.1:{servers['on'][1]}/metrics", timeout=2) as response:
            scraped = response.read().decode()
    finally:
        for process, _ in servers.values():
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    counted = re.search(r'aiorest_requests_total\{method="GET",route="/json",status="200"\} ([\d.e+]+)', scraped)
    result: dict[str, Any] = {"rounds": rounds, "seconds": seconds, "connections": connections}
    for name, values in rates.items():
        result[f"metrics_{name}_rps_mean"] = round(statistics.mean(values))
        result[f"metrics_{name}_rps_stdev"] = round(statistics.stdev(values)) if len(values) > 1 else 0
    result["ratio_on_over_off"] = round(statistics.mean(rates["on"]) / statistics.mean(rates["off"]), 3)
    result["per_round_ratios"] = [round(on / off, 3) for on, off in zip(rates["on"], rates["off"], strict=True)]
    result["requests_counted_by_metrics"] = int(float(counted.group(1))) if counted else None
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--connections", type=int, default=32)
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.rounds, args.seconds, args.connections), indent=2))


if __name__ == "__main__":
    sys.path.insert(0, _ROOT)
    main()

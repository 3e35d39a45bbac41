"""The access log's cost on ``/json``: requests/s with it on against off, measured in one run.

Two aiorest processes serve ``bench.servers.aiorest_app:app`` (one with
``--access-log FILE``, combined format, one without), both pinned to CPU 0;
wrk (one thread, pinned to CPU 1) loads one at a time, alternating which goes
first from round to round, so that a slow minute hurts both alike. The ratio
on/off is paired per round; its mean comes with a 95% confidence interval.
The access log's writer thread runs in its server's process, so its work is
counted in that server's throughput.

    python -m load.prod_accesslog [--duration 5] [--rounds 6] [--connections 64]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.process import ServerProcess
from bench.stats import paired_ratio, summarise
from bench.wrk import run_wrk

_APP = "bench.servers.aiorest_app:app"


def measure(duration: float = 5.0, rounds: int = 6, connections: int = 64) -> dict[str, Any]:
    """Requests/s on ``/json`` with the access log on and off, interleaved; their paired ratio.

    Returns ``{"on": {...}, "off": {...}, "ratio": {...}, "lines": N, "errors": N}``: the mean,
    std and 95% CI of each, the access log lines written (to check they were), and wrk's errors.
    """
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent))
    command = [sys.executable, "-m", "aiorest", "run", _APP, "--port", "{port}", "--log-level", "warning"]
    with tempfile.TemporaryDirectory(prefix="aiorest-accesslog-") as folder:
        log_path = Path(folder) / "access.log"
        servers = {
            "off": ServerProcess("access log off", command, env),
            "on": ServerProcess("access log on", [*command, "--access-log", str(log_path)], env),
        }
        try:
            for server in servers.values():
                server.wait_ready("/json")
                run_wrk(f"{server.url}/json", connections=connections, seconds=1)  # warm-up, not counted
            rates: dict[str, list[float]] = {"off": [], "on": []}
            errors = 0
            for number in range(rounds):
                order = ("off", "on") if number % 2 == 0 else ("on", "off")
                for name in order:
                    result = run_wrk(f"{servers[name].url}/json", connections=connections, seconds=duration)
                    rates[name].append(result.requests_per_sec)
                    errors += result.errors
        finally:
            for server in servers.values():
                server.stop()
        lines = sum(1 for _ in log_path.open()) if log_path.exists() else 0

    def described(values: list[float]) -> dict[str, float]:
        summary = summarise(values)
        return {"mean": summary.mean, "std": summary.std, "ci_low": summary.ci_low, "ci_high": summary.ci_high}

    ratio = paired_ratio(rates["on"], rates["off"])
    return {
        "endpoint": "/json",
        "rounds": rounds,
        "duration": duration,
        "connections": connections,
        "on": {**described(rates["on"]), "runs": rates["on"]},
        "off": {**described(rates["off"]), "runs": rates["off"]},
        "ratio": {"mean": ratio.mean, "std": ratio.std, "ci_low": ratio.ci_low, "ci_high": ratio.ci_high},
        "lines": lines,
        "errors": errors,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=5.0, help="seconds of load per run (default 5)")
    parser.add_argument("--rounds", type=int, default=6, help="rounds, each runs both (default 6)")
    parser.add_argument("--connections", type=int, default=64, help="wrk connections (default 64)")
    parser.add_argument("--json", action="store_true", help="print the whole result as JSON")
    args = parser.parse_args(argv)
    result = measure(args.duration, args.rounds, args.connections)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    ratio = result["ratio"]
    print(
        f"/json requests/s, access log on {result['on']['mean']:.0f} ± {result['on']['std']:.0f}, "
        f"off {result['off']['mean']:.0f} ± {result['off']['std']:.0f} "
        f"({result['rounds']} interleaved rounds of {result['duration']:.0f} s, {result['connections']} connections)"
    )
    print(
        f"access log on/off: {ratio['mean']:.3f} (95% CI {ratio['ci_low']:.3f}–{ratio['ci_high']:.3f}); "
        f"{result['lines']} lines written, {result['errors']} errors"
    )


if __name__ == "__main__":
    main()

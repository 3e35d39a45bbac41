"""Run wrk and read its report: requests/s, latency percentiles, errors."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import asdict, dataclass

_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1000.0, "m": 60000.0}


@dataclass(frozen=True)
class WrkResult:
    requests: int
    seconds: float
    requests_per_sec: float
    p50_ms: float
    p99_ms: float
    connect_errors: int
    read_errors: int
    write_errors: int
    timeouts: int
    non_2xx: int

    @property
    def errors(self) -> int:
        return self.connect_errors + self.read_errors + self.write_errors + self.timeouts + self.non_2xx

    def as_dict(self) -> dict[str, float]:
        return {**asdict(self), "errors": self.errors}


def require_wrk() -> str:
    path = shutil.which("wrk")
    if path is None:
        raise SystemExit("wrk is not installed: apt-get install -y wrk")
    return path


def _ms(text: str) -> float:
    match = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text)
    if match is None:
        raise ValueError(f"unexpected wrk latency {text!r}")
    return float(match.group(1)) * _UNITS[match.group(2)]


def parse(output: str) -> WrkResult:
    total = re.search(r"(\d+) requests in ([\d.]+)(ms|s|m)", output)
    rate = re.search(r"Requests/sec:\s+([\d.]+)", output)
    if total is None or rate is None:
        raise ValueError(f"cannot read wrk's output:\n{output}")
    seconds = float(total.group(2)) * _UNITS[total.group(3)] / 1000
    # wrk pads values of a second or more with a trailing space
    percentiles = dict(re.findall(r"^\s+(50|99)%\s+(\S+)\s*$", output, re.MULTILINE))
    socket = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output)
    errors = [int(x) for x in socket.groups()] if socket else [0, 0, 0, 0]
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    return WrkResult(
        requests=int(total.group(1)),
        seconds=seconds,
        requests_per_sec=float(rate.group(1)),
        p50_ms=_ms(percentiles["50"]) if "50" in percentiles else float("nan"),
        p99_ms=_ms(percentiles["99"]) if "99" in percentiles else float("nan"),
        connect_errors=errors[0],
        read_errors=errors[1],
        write_errors=errors[2],
        timeouts=errors[3],
        non_2xx=int(non_2xx.group(1)) if non_2xx else 0,
    )


def run_wrk(
    url: str,
    *,
    connections: int,
    seconds: float,
    cpu: int | None = 1,
    timeout_s: float = 2.0,
    script: str | None = None,
    script_args: Sequence[str] = (),
) -> WrkResult:
    """Run wrk with one thread against ``url``, pinned to ``cpu``; ``script`` (Lua) gets ``script_args``."""
    # wrk reads whole numbers only: "2.0s" is a usage error
    command = [
        require_wrk(),
        "-t1",
        f"-c{connections}",
        f"-d{round(seconds)}s",
        f"--timeout={round(timeout_s)}s",
        "--latency",
        *(["-s", script] if script else []),
        url,
        *(["--", *script_args] if script_args else []),
    ]
    if cpu is not None and shutil.which("taskset"):
        command = ["taskset", "-c", str(cpu), *command]
    done = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 60)
    if done.returncode != 0:
        raise RuntimeError(f"wrk failed ({done.returncode}): {done.stderr.strip()}")
    return parse(done.stdout)

"""The load generators: locust (user flows) and wrk (raw throughput), with their own CPU use."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.wrk import run_wrk

# Past its run time, a generator gets this long to finish and report before it is stopped.
GRACE_S = 60.0


class GeneratorError(RuntimeError):
    """The load generator failed or did not finish: the run measured nothing."""


ROOT = Path(__file__).resolve().parents[2]
LOCUSTFILE = Path(__file__).resolve().parent / "locustfile.py"
FLOWS = {"tfb": ["TechEmpowerUser"], "notes": ["BrowsingUser", "WritingUser"], "all": []}
TFB_PATHS = ["/json", "/db", "/queries?queries={n}", "/fortunes", "/updates?queries={n}"]
_BOOKKEEPING = {"setup", "seed", "cleanup"}  # the run's own setup requests, not load
HEADERS_LUA = ROOT / "bench" / "headers.lua"
# wrk's account on the target's database: registered by the first run, logged in once per run.
WRK_ACCOUNT = {"username": "load-wrk", "password": "load-wrk-password"}
WRK_NOTES = 10  # its notes while it runs: /notes?limit=10 answers a full page
_CLOCK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class LoadResult:
    requests: int
    failures: int
    seconds: float
    requests_per_sec: float
    p50_ms: float
    p99_ms: float
    generator_cpu: float  # busy share of the generator's cores, 0..1
    generator_bound: bool
    per_endpoint: dict[str, dict[str, float]]

    @property
    def failure_rate(self) -> float:
        return self.failures / self.requests if self.requests else 0.0

    def as_dict(self) -> dict[str, object]:
        return {**asdict(self), "failure_rate": self.failure_rate}


def count_cpus(cpus: str) -> int:
    """How many CPUs a taskset list names: "1" → 1, "1-3,6" → 4."""
    total = 0
    for part in cpus.split(","):
        first, _, last = part.partition("-")
        total += int(last or first) - int(first) + 1
    return total


def _cpu_seconds(pid: int) -> float:
    """CPU time of a process and of its children (locust's workers), in seconds."""
    total = 0.0
    pids = [pid]
    while pids:
        current = pids.pop()
        try:
            fields = Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / _CLOCK
            for task in Path(f"/proc/{current}/task").iterdir():
                pids += [int(p) for p in (task / "children").read_text().split()]
        except OSError:
            continue
    return total


def _percentile(histogram: dict[int, int], fraction: float) -> float:
    total = sum(histogram.values())
    if not total:
        return float("nan")
    running = 0
    for value in sorted(histogram):
        running += histogram[value]
        if running >= fraction * total:
            return float(value)
    return float(max(histogram))


def run_locust(
    url: str,
    *,
    flow: str,
    users: int,
    seconds: int,
    processes: int,
    think: tuple[float, float],
    queries: int,
    cpus: str | None = "1",
) -> LoadResult:
    """A headless locust run; totals come from its JSON file (the CSV misses the last second)."""
    with tempfile.TemporaryDirectory(prefix="aiorest-locust-") as directory:
        base = Path(directory) / "run"
        command = [
            sys.executable,
            "-m",
            "locust",
            "-f",
            str(LOCUSTFILE),
            "--headless",
            "--host",
            url,
            "-u",
            str(users),
            "-r",
            str(max(1, min(users, 200))),
            "-t",
            f"{seconds}s",
            "--json-file",
            str(base),
            "--only-summary",
            "--stop-timeout",
            "5",
            "--think-min",
            str(think[0]),
            "--think-max",
            str(think[1]),
            "--tfb-queries",
            str(queries),
            "--loglevel",
            "WARNING",
            *FLOWS[flow],
        ]
        if processes > 1:
            command[3:3] = ["--processes", str(processes)]
        cores = min(processes, os.cpu_count() or 1)  # what the generator can use at most
        if cpus is not None and shutil.which("taskset"):
            command = ["taskset", "-c", cpus, *command]
            cores = min(processes, count_cpus(cpus))  # the locust processes share these cores
        started = time.monotonic()
        # A session of its own: the master and its worker processes are one
        # process group, stopped together if the run is abandoned. stderr goes to
        # a file, not a pipe: a failing flow logs a traceback per request, and a
        # full pipe nobody reads until the end would stall locust to its deadline.
        errors = Path(directory) / "stderr.txt"
        with errors.open("wb") as stderr_file:  # the child keeps its own copy of the descriptor
            process = subprocess.Popen(
                command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=stderr_file, start_new_session=True
            )
        cpu_before, cpu_after = _cpu_seconds(process.pid), 0.0
        deadline = started + seconds + GRACE_S
        try:
            while process.poll() is None:  # sample while it runs: workers are gone at the end
                cpu_after = max(cpu_after, _cpu_seconds(process.pid))
                if time.monotonic() > deadline:
                    raise GeneratorError(f"locust did not finish within {seconds + GRACE_S:.0f} s")
                time.sleep(0.5)
        finally:
            if process.poll() is None:  # timed out, or Ctrl-C (which no longer reaches its group)
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        wall = time.monotonic() - started
        with errors.open("rb") as written:  # its last 3,000 bytes, however much it wrote
            written.seek(max(0, written.seek(0, os.SEEK_END) - 3000))
            stderr = written.read().decode(errors="replace")
        stats_file = base.with_suffix(".json")
        if not stats_file.exists():
            raise GeneratorError(f"locust wrote no results (exit {process.returncode}):\n{stderr}")
        entries = [e for e in json.loads(stats_file.read_text()) if e["name"] not in _BOOKKEEPING]
    busy = (cpu_after - cpu_before) / (wall * cores)
    return _summarise_locust(entries, busy)


def _summarise_locust(entries: list[dict], busy: float) -> LoadResult:
    requests = sum(e["num_requests"] for e in entries)
    failures = sum(e["num_failures"] for e in entries)
    start = min((e["start_time"] for e in entries), default=0.0)
    end = max((e["last_request_timestamp"] or 0.0 for e in entries), default=0.0)
    seconds = max(end - start, 1e-9)
    histogram: dict[int, int] = {}
    per_endpoint = {}
    for entry in entries:
        times = {int(k): v for k, v in entry["response_times"].items()}
        for value, count in times.items():
            histogram[value] = histogram.get(value, 0) + count
        per_endpoint[f"{entry['method']} {entry['name']}"] = {
            "requests": entry["num_requests"],
            "failures": entry["num_failures"],
            "p99_ms": _percentile(times, 0.99),
        }
    return LoadResult(
        requests=requests,
        failures=failures,
        seconds=seconds,
        requests_per_sec=requests / seconds,
        p50_ms=_percentile(histogram, 0.50),
        p99_ms=_percentile(histogram, 0.99),
        generator_cpu=busy,
        generator_bound=busy > 0.9,
        per_endpoint=per_endpoint,
    )


def wrk_paths(flow: str, queries: int) -> list[str]:
    """The endpoints ``--tool wrk`` drives for a flow."""
    return [p.format(n=queries) for p in TFB_PATHS] if flow != "notes" else ["/notes?limit=10"]


def _call(url: str, method: str, path: str, body: object = None, headers: dict[str, str] | None = None) -> Any:
    """One JSON request; returns (status, decoded body or None)."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        url + path, data=data, method=method, headers={"Content-Type": "application/json", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            status, text = response.status, response.read()
    except urllib.error.HTTPError as exc:
        status, text = exc.code, exc.read()
    except OSError as exc:
        raise GeneratorError(f"{method} {path}: {exc}") from None
    try:
        return status, json.loads(text) if text else None
    except ValueError:
        return status, text[:200]


@contextmanager
def wrk_headers(url: str, paths: Sequence[str]) -> Iterator[list[str]]:
    """The headers wrk sends: a bearer token of wrk's account if a path is under /notes, else none.

    The account is registered if it is new and logs in once (POST /tokens); it gets
    ``WRK_NOTES`` notes for the run, and at the end they are deleted and the token revoked.
    """
    if not any(path.startswith("/notes") for path in paths):
        yield []
        return
    status, body = _call(url, "POST", "/users", WRK_ACCOUNT)
    if status not in (201, 409):  # 409: registered by an earlier run
        raise GeneratorError(f"POST /users for wrk's account: {status} {body}")
    status, body = _call(url, "POST", "/tokens", WRK_ACCOUNT)
    if status != 201:
        raise GeneratorError(f"POST /tokens for wrk's account: {status} {body}")
    bearer = {"Authorization": f"Bearer {body['token']}"}
    created = []
    try:
        tag = f"wrk-{uuid.uuid4().hex[:8]}"
        for i in range(WRK_NOTES):
            status, note = _call(url, "POST", "/notes", {"title": f"{tag} {i}", "body": "seeded for wrk"}, bearer)
            if status != 201:
                raise GeneratorError(f"POST /notes for wrk's account: {status} {note}")
            created.append(note["id"])
        yield [f"{name}: {value}" for name, value in bearer.items()]
    finally:  # every step tried even if one fails (a server already gone): the token is revoked last
        for method, path in [*(("DELETE", f"/notes/{note_id}") for note_id in created), ("DELETE", "/tokens/current")]:
            try:
                status, body = _call(url, method, path, headers=bearer)
            except GeneratorError as exc:
                status, body = 0, str(exc)
            if status not in (204, 404):
                print(f"wrk cleanup: {method} {path}: {status} {body}", file=sys.stderr)


def run_wrk_mix(
    url: str, *, paths: list[str], connections: int, seconds: int, headers: Sequence[str] = ()
) -> LoadResult:
    """wrk on each of ``paths`` in turn, ``seconds`` split between them; each request carries ``headers``."""
    share = max(1, seconds // len(paths))
    script = str(HEADERS_LUA) if headers else None
    results = {}
    for path in paths:
        try:
            results[path] = run_wrk(
                url + path, connections=connections, seconds=share, timeout_s=10, script=script, script_args=headers
            )
        except subprocess.TimeoutExpired:  # run_wrk killed it
            raise GeneratorError(f"wrk on {path} at {connections} connections did not finish") from None
        except RuntimeError as exc:
            raise GeneratorError(f"wrk on {path}: {exc}") from None
    requests = sum(r.requests for r in results.values())
    failures = sum(r.errors for r in results.values())
    elapsed = sum(r.seconds for r in results.values())
    return LoadResult(
        requests=requests,
        failures=failures,
        seconds=elapsed,
        requests_per_sec=requests / elapsed if elapsed else 0.0,
        p50_ms=max(r.p50_ms for r in results.values()),
        p99_ms=max(r.p99_ms for r in results.values()),
        generator_cpu=float("nan"),
        generator_bound=False,
        per_endpoint={
            path: {
                "requests": r.requests,
                "failures": r.errors,
                "timeouts": r.timeouts,
                "rps": r.requests_per_sec,
                "p99_ms": r.p99_ms,
                "socket_errors": r.connect_errors + r.read_errors + r.write_errors,
                "non_2xx": r.non_2xx,
            }
            for path, r in results.items()
        },
    )

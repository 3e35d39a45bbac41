"""Load on the cluster: distributed locust on the load hosts, wrk beside it, and what they saw.

:class:`LocustRun` starts a locust master on ``load1`` and a worker on each load
host (load/cluster/locustfile.py, every request logged); :func:`windows` splits those
logs into before, during and after a fault; :func:`run_wrk` runs wrk on a load host.
Every run is bounded: locust gets ``-t`` and is killed 60 s past it, wrk gets ``-d``.
"""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.wrk import WrkResult, parse, require_wrk
from harness.processes import stop_process
from load.clients.generators import LoadResult, _summarise_locust
from load.cluster.hosts import ROOT, Cluster

LOCUSTFILE = Path(__file__).resolve().parent / "locustfile.py"
USERS = ["BrowsingUser", "ClusterWritingUser", "TechEmpowerUser", "LoginUser"]
BOOKKEEPING = {"setup", "seed", "cleanup"}
IDEMPOTENT = {"GET", "HEAD", "PUT", "DELETE", "OPTIONS"}  # what nginx passes to the next upstream
RETRIED_PREFIX = "(retried) "  # load/clients/locustfile.py's name of an attempt that it sent again
GRACE_S = 60.0


@dataclass
class LocustRun:
    """A distributed locust run on the cluster's load hosts, started by :meth:`start`."""

    cluster: Cluster
    users: int
    seconds: int
    queries: int = 5
    folder: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="aiorest-cluster-locust-")))
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    started: float = 0.0

    def start(self) -> LocustRun:
        self.folder.mkdir(parents=True, exist_ok=True)
        master_host = self.cluster.address("load1")
        common = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--request-log", str(self.folder)]
        common += ["--tfb-queries", str(self.queries), "--loglevel", "WARNING"]
        master = [*common, "--master", "--master-bind-host", master_host, "--headless"]
        master += ["--expect-workers", str(len(self.cluster.load_names)), "-u", str(self.users)]
        master += ["-r", str(max(1, self.users)), "-t", f"{self.seconds}s", "--host", self.cluster.url]
        master += ["--json-file", str(self.folder / "run"), "--only-summary", "--stop-timeout", "5", *USERS]
        env = {**self.cluster.app_env(), "PYTHONPATH": str(ROOT)}
        self.started = time.monotonic()
        self.processes.append(
            self.cluster.net.popen("load1", master, log=self.folder / "master.log", env=env, cwd=ROOT)
        )
        for name in self.cluster.load_names:
            worker = [*common, "--worker", "--master-host", master_host]
            self.processes.append(
                self.cluster.net.popen(name, worker, log=self.folder / f"worker-{name}.log", env=env, cwd=ROOT)
            )
        return self

    def wait_for_traffic(self, timeout: float = 90) -> float:
        """Wait until the users send requests (the master's setup done); the epoch time of the first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            rows = [row for row in self.rows() if row["name"] not in BOOKKEEPING]
            if rows:
                return min(row["t"] for row in rows)
            if self.processes[0].poll() is not None:
                break
            time.sleep(0.25)
        raise RuntimeError(f"locust sent no load within {timeout} s:\n{self.log()}")

    def wait(self) -> None:
        """Wait for the master's end (killing every locust process 60 s past its run time)."""
        deadline = self.started + self.seconds + GRACE_S + 90  # the setup's logins come before -t counts
        try:
            while self.processes[0].poll() is None and time.monotonic() < deadline:
                time.sleep(0.25)
        finally:
            self.stop()

    def stop(self) -> None:
        """Stop every locust process (SIGTERM: the master cleans up), SIGKILL past 10 s."""
        for process in self.processes:
            stop_process(process, 10)

    def log(self) -> str:
        return "".join(
            path.read_text(errors="replace")[-2000:] for path in sorted(self.folder.glob("*.log")) if path.exists()
        )

    def rows(self) -> list[dict[str, Any]]:
        """Every request logged so far."""
        found = []
        for path in self.folder.glob("requests-*.csv"):
            with path.open(newline="") as handle:
                for row in csv.DictReader(handle):
                    try:
                        found.append(
                            {
                                **row,
                                "t": float(row["t"]),
                                "status": int(row["status"]),
                                "ms": float(row["ms"]),
                                "failed": row["failed"] == "1",
                                "retry_after": row["retry_after"] == "1",
                            }
                        )
                    except (KeyError, TypeError, ValueError):  # a line being written
                        continue
        return found

    def result(self) -> LoadResult | None:
        """The master's totals (its JSON file), the setup's requests left out; None if it wrote none."""
        path = self.folder / "run.json"
        if not path.exists():
            return None
        entries = [e for e in json.loads(path.read_text()) if e["name"] not in BOOKKEEPING]
        return _summarise_locust(entries, float("nan"))


def kind(row: dict[str, Any]) -> str:
    """What a failed request's failure was: no answer, a 5xx, or a wrong answer."""
    if row["status"] == 0:
        return "no answer: " + (row["error"].split(":")[0][:40] or "?")
    if row["status"] >= 500:
        return f"http {row['status']}" + (" + Retry-After" if row["retry_after"] else "")
    return f"wrong answer ({row['status']})"


def percentile(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q / 100))]


def figures(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Requests, failures by kind (idempotent or not), p50 and p99 of a set of logged requests.

    An attempt that the client sent again (``(retried) ...``: a write after no answer,
    502, 503, 504 or 409; an idempotent request after a 503 with ``Retry-After``) is no
    request of its own: it is counted in ``retries``, writes and idempotent requests
    apart, by kind and by request, and the request is its last attempt.
    """
    retried = [row for row in rows if row["name"].startswith(RETRIED_PREFIX)]
    rows = [row for row in rows if not row["name"].startswith(RETRIED_PREFIX)]
    failed = [row for row in rows if row["failed"]]
    return {
        "retries": len(retried),
        "retries_of_writes": sum(row["method"] not in IDEMPOTENT for row in retried),
        "retries_of_idempotent": sum(row["method"] in IDEMPOTENT for row in retried),
        "retries_by_kind": dict(Counter(kind(row) for row in retried)),
        "retries_by_request": dict(
            Counter(f"{row['name'].removeprefix(RETRIED_PREFIX)}: {kind(row)}" for row in retried)
        ),
        "requests": len(rows),
        "failed": len(failed),
        "failed_idempotent": sum(row["method"] in IDEMPOTENT for row in failed),
        "failed_non_idempotent": sum(row["method"] not in IDEMPOTENT for row in failed),
        "by_kind": dict(Counter(kind(row) for row in failed)),
        "statuses": {str(k): v for k, v in sorted(Counter(row["status"] for row in rows).items())},
        "p50_ms": percentile([row["ms"] for row in rows], 50),
        "p99_ms": percentile([row["ms"] for row in rows], 99),
    }


def windows(rows: list[dict[str, Any]], fault_start: float, fault_end: float, settle: float = 1.0) -> dict[str, Any]:
    """:func:`figures` before the fault, during it (and ``settle`` s after), and after.

    A request belongs to the window it ended in (start + its time): one sent just
    before the fault and answered during it was answered during it.
    """
    load = [row for row in rows if row["name"] not in BOOKKEEPING]

    def end(row: dict[str, Any]) -> float:
        return float(row["t"]) + row["ms"] / 1000

    return {
        "before": figures([row for row in load if end(row) < fault_start]),
        "during": figures([row for row in load if fault_start <= end(row) < fault_end + settle]),
        "after": figures([row for row in load if end(row) >= fault_end + settle]),
        "all": figures(load),
    }


def timeline(rows: list[dict[str, Any]]) -> list[tuple[int, int, int, float]]:
    """Per second from the first request: (second, requests, failed, p99 ms)."""
    load = [row for row in rows if row["name"] not in BOOKKEEPING]
    if not load:
        return []
    first = min(row["t"] for row in load)
    seconds: dict[int, list[dict[str, Any]]] = {}
    for row in load:
        seconds.setdefault(int(row["t"] - first), []).append(row)
    return [
        (second, len(group), sum(r["failed"] for r in group), percentile([r["ms"] for r in group], 99))
        for second, group in sorted(seconds.items())
    ]


def run_wrk(cluster: Cluster, host: str, path: str, seconds: int, connections: int = 32) -> WrkResult:
    """wrk on load host ``host`` against the balancer's ``path``, bounded by ``seconds`` + 30."""
    command = [require_wrk(), "-t1", f"-c{connections}", f"-d{seconds}s", "--timeout=10s", "--latency"]
    done = subprocess.run(
        cluster.net.command(host, [*command, cluster.url + path]), capture_output=True, text=True, timeout=seconds + 30
    )
    if done.returncode != 0:
        raise RuntimeError(f"wrk failed ({done.returncode}): {done.stderr.strip()}")
    return parse(done.stdout)

"""How load/cluster/locust_runs.py counts a fault's requests: windows by the time each ended, failures by kind."""

from __future__ import annotations

from load.cluster.locust_runs import figures, kind, timeline, windows


def row(t: float, ms: float, method: str = "GET", status: int = 200, **extra: object) -> dict[str, object]:
    failed = bool(extra.pop("failed", status >= 300 or status == 0))
    values = {"name": "/json", "error": "", "retry_after": False, "key": ""} | extra
    return {"t": t, "ms": ms, "method": method, "status": status, "failed": failed, **values}


def test_a_request_counts_in_the_window_it_ended_in():
    rows = [
        row(100.0, 10),  # before
        row(104.9, 300, status=503, retry_after=True),  # sent before the fault at 105, answered during it
        row(106.0, 5, method="POST", status=502, name="POST /notes", error="expected 201, got 502"),
        row(109.0, 5),  # after: the fault ended at 107, 1 s to settle
        row(101.0, 1, name="setup"),  # the run's own setup: never counted
    ]
    found = windows(rows, 105.0, 107.0)
    assert [found[w]["requests"] for w in ("before", "during", "after", "all")] == [1, 2, 1, 4]
    assert found["during"]["by_kind"] == {"http 503 + Retry-After": 1, "http 502": 1}
    assert found["during"]["failed_idempotent"] == 1  # the GET
    assert found["during"]["failed_non_idempotent"] == 1  # the POST
    assert found["during"]["statuses"] == {"502": 1, "503": 1}


def test_failures_are_told_apart_by_kind():
    assert kind(row(0, 0, status=0, error="ConnectionRefusedError: [Errno 111]")) == "no answer: ConnectionRefusedError"
    assert kind(row(0, 0, status=404, failed=True)) == "wrong answer (404)"
    assert kind(row(0, 0, status=200, failed=True)) == "wrong answer (200)"  # a 200 with a wrong body
    assert figures([])["requests"] == 0


def test_the_timeline_counts_each_second_from_the_first_request():
    rows = [row(50.2, 10), row(50.9, 30, status=500), row(52.5, 20), row(49.0, 1, name="seed")]
    assert [(s, n, f) for s, n, f, _ in timeline(rows)] == [(0, 2, 1), (2, 1, 0)]

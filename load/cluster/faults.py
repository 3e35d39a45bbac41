"""Faults under load on the cluster (issue 30, point 5), each with its verdict and figures.

Each scenario runs distributed locust through the balancer (load/cluster/locust_runs.py),
lets it run steady for a third of ``duration``, does its fault, and keeps the load
on for another third: the requests logged before, during and after are counted
apart (failures by kind, p50, p99). A verdict is PASS, FAIL or SKIP, with its reason.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from load.cluster.hosts import ROOT, Cluster
from load.cluster.locust_runs import IDEMPOTENT, LocustRun, timeline, windows

OK_STATUSES = {200, 201, 204}


@dataclass
class Outcome:
    name: str
    verdict: str  # PASS, FAIL or SKIP
    reason: str
    figures: dict[str, Any] = field(default_factory=dict)
    timeline: list[tuple[int, int, int, float]] = field(default_factory=list)


def shared_limiter_supported() -> bool:
    """Whether the example app reads ``RATE_LIMIT_STORE`` (issue 30, point 3, built apart)."""
    return any("RATE_LIMIT_STORE" in path.read_text() for path in (ROOT / "example_app").glob("*.py"))


def under_load(
    cluster: Cluster, users: int, duration: float, fault: Callable[[], dict[str, Any]], fault_allow: float, out: Path
) -> tuple[dict[str, Any], dict[str, Any], LocustRun]:
    """Locust for ``duration`` + ``fault_allow`` s; ``fault()`` after a third of ``duration``: (windows, extra, run)."""
    steady = max(2.0, duration / 3)
    run = LocustRun(cluster, users=users, seconds=int(2 * steady + fault_allow), folder=out).start()
    try:
        first = run.wait_for_traffic()
        time.sleep(max(0.0, first + steady - time.time()))
        began = time.time()
        extra = fault()
        ended = time.time()
        extra["fault_seconds"] = round(ended - began, 2)
        extra["fault_window_s"] = [round(began - first, 1), round(ended - first, 1)]  # seconds of the run
        run.wait()
    except BaseException:
        run.stop()
        raise
    return windows(run.rows(), began, ended), extra, run


def write_ledger(cluster: Cluster, run: LocustRun, since: float) -> dict[str, int]:
    """Whether each write sent since ``since`` (epoch) was applied once: the writers' logs against the database.

    Each writer's request carries its note's title (``key``), one title a note. The
    writer deletes the note it created, once its PATCH is acknowledged: a title it
    deleted must have no row left (a second row is a POST applied twice, that nobody
    knew of to delete); a title acknowledged and not deleted, exactly one row, at
    version 2 if its PATCH was acknowledged (3: applied twice). A title whose POST was
    never acknowledged, even after the retries, is counted with the rows it has.
    """
    rows = [row for row in run.rows() if row["t"] >= since and row["key"] and row["name"] in _WRITES]
    titles: dict[str, set[str]] = {}
    for row in rows:
        if not row["failed"]:
            titles.setdefault(row["key"], set()).add(_WRITES[row["name"]])
    sent = {row["key"] for row in rows if row["name"] == "POST /notes"}
    found = cluster.sql(
        "SELECT title, count(*), max(version) FROM notes WHERE title = ANY(%s) GROUP BY title", (list(sent),)
    )
    counts = {title: int(count) for title, count, _ in found}
    versions = {title: int(version) for title, _, version in found}
    acked = {title for title in sent if "post" in titles.get(title, ())}
    deleted = {title for title in acked if "delete" in titles[title]}
    kept = acked - deleted
    patched = {title for title in kept if "patch" in titles[title]}
    return {
        "writes_replayed": sum(row.get("replayed") == "1" for row in rows if not row["failed"]),
        "writes_acknowledged": len(acked),
        "patches_acknowledged": sum("patch" in titles[title] for title in acked),
        "duplicated_posts": sum(counts.get(t, 0) for t in deleted) + sum(max(0, counts.get(t, 0) - 1) for t in kept),
        "lost_posts": sum(counts.get(t, 0) == 0 for t in kept),
        "patches_applied_twice": sum(versions.get(t, 0) > 2 for t in patched),
        "patches_lost": sum(versions.get(t, 0) < 2 for t in patched),
        "posts_unacknowledged": len(sent - acked),
        "posts_unacknowledged_applied": sum(counts.get(t, 0) for t in sent - acked),
    }


_WRITES = {"POST /notes": "post", "PATCH /notes/{id}": "patch", "DELETE /notes/{id}": "delete",
           "DELETE /notes/{id} (gone)": "delete"}  # fmt: skip


def rolling_deploy(cluster: Cluster, users: int, duration: float, out: Path) -> Outcome:
    found, extra, run = under_load(
        cluster, users, duration, lambda: {"reload_s": [round(s, 2) for s in cluster.rolling_deploy()]}, 15, out
    )
    total = found["all"]
    verdict = "PASS" if total["failed"] == 0 and total["requests"] else "FAIL"
    reason = (
        f"{total['failed']} failed of {total['requests']} requests, after {_retries(total)}; "
        f"reloads took {extra['reload_s']} s"
    )
    return Outcome("5a rolling deploy (SIGHUP each app host in turn)", verdict, reason, {**found, **extra},
                   timeline(run.rows()))  # fmt: skip


def _retries(total: dict[str, Any]) -> str:
    """How many attempts the clients sent again, writes and idempotent requests apart, and why."""
    return (
        f"{total['retries']} attempts sent again ({total['retries_of_writes']} of writes, "
        f"{total['retries_of_idempotent']} of idempotent requests: {total['retries_by_request'] or 'none'})"
    )


def _losses(cluster: Cluster, found: dict[str, Any], run: LocustRun, since: float) -> tuple[bool, str, dict[str, int]]:
    writes = write_ledger(cluster, run, since)
    total = found["all"]
    wrong = writes["duplicated_posts"] + writes["lost_posts"] + writes["patches_applied_twice"] + writes["patches_lost"]
    ok = total["failed"] == 0 and wrong == 0 and writes["posts_unacknowledged"] == 0 and total["requests"] > 0
    text = (
        f"{total['failed']} failed of {total['requests']} requests as the clients saw them "
        f"({total['failed_idempotent']} idempotent), after {_retries(total)}; "
        f"{writes['writes_acknowledged']} POST /notes and "
        f"{writes['patches_acknowledged']} PATCH acknowledged ({writes['writes_replayed']} answers replayed from an "
        f"earlier attempt): {writes['duplicated_posts']} notes made twice, "
        f"{writes['lost_posts']} lost, {writes['patches_applied_twice']} patches applied twice, "
        f"{writes['patches_lost']} lost; {writes['posts_unacknowledged']} POST never acknowledged "
        f"({writes['posts_unacknowledged_applied']} applied); failures by kind {total['by_kind']}"
    )
    return ok, text, writes


def kill_host(cluster: Cluster, users: int, duration: float, out: Path) -> Outcome:
    victim = cluster.app_names[-1]

    def fault() -> dict[str, Any]:
        killed = cluster.kill_app_host(victim)
        time.sleep(3)
        began = time.monotonic()
        cluster.restart_app(victim)
        return {"victim": victim, "processes_killed": killed, "restart_s": round(time.monotonic() - began, 2)}

    started = time.time()
    found, extra, run = under_load(cluster, users, duration, fault, 15, out)
    ok, text, writes = _losses(cluster, found, run, started)
    verdict = "PASS" if ok and cluster.serving(victim) else "FAIL"
    reason = f"{victim}: {extra['processes_killed']} processes killed, back in {extra['restart_s']} s; {text}"
    return Outcome("5b one app host killed whole", verdict, reason, {**found, **extra, **writes}, timeline(run.rows()))


def _wait_serving_again(cluster: Cluster, name: str, timeout: float) -> float | None:
    """Seconds until host ``name`` answers requests from the balancer again (its /metrics count grows)."""
    began = time.monotonic()
    first = cluster.metrics(name)["requests"]
    while time.monotonic() - began < timeout:
        time.sleep(0.5)
        if cluster.metrics(name)["requests"] > first + 5:  # more than the harness's own scrapes
            return round(time.monotonic() - began, 1)
    return None


def cut_host(cluster: Cluster, users: int, duration: float, out: Path, down: float = 10.0) -> Outcome:
    victim = cluster.app_names[-1]

    def fault() -> dict[str, Any]:
        cluster.net.cut(victim)
        time.sleep(down)
        cluster.net.restore(victim)
        return {"victim": victim, "down_s": down, "serves_again_after_s": _wait_serving_again(cluster, victim, 25)}

    started = time.time()
    found, extra, run = under_load(cluster, users, duration, fault, down + 25, out)
    ok, text, writes = _losses(cluster, found, run, started)
    back = extra["serves_again_after_s"]
    verdict = "PASS" if ok and back is not None else "FAIL"
    reason = f"{victim} cut {down:.0f} s, serves again {back} s after its link is back; {text}"
    return Outcome("5c one app host cut off and back", verdict, reason, {**found, **extra, **writes},
                   timeline(run.rows()))  # fmt: skip


def restart_pgbouncer(cluster: Cluster, users: int, duration: float, out: Path) -> Outcome:
    before = {name: cluster.metrics(name).get("pool_size", 0.0) for name in cluster.app_names}

    def fault() -> dict[str, Any]:
        cluster.restart_pgbouncer()
        began = time.monotonic()
        back = None
        while time.monotonic() - began < 20:
            time.sleep(0.5)
            sizes = {name: cluster.metrics(name).get("pool_size", 0.0) for name in cluster.app_names}
            if all(sizes[name] >= min(before[name], cluster.config.pool_per_host) for name in sizes):
                back = round(time.monotonic() - began, 1)
                break
        return {"pool_size_before": before, "pool_size_after": sizes, "pools_back_s": back}

    found, extra, run = under_load(cluster, users, duration, fault, 25, out)
    rows = [row for row in run.rows() if row["name"] not in ("setup", "seed", "cleanup")]
    bad = [
        row for row in rows if row["status"] not in OK_STATUSES and not (row["status"] == 503 and row["retry_after"])
    ]
    wrong = [row for row in rows if row["failed"] and row["status"] in OK_STATUSES]
    pools = cluster.pgbouncer_pools()
    extra["pgbouncer_server_connections_after"] = sum(
        row["sv_active"] + row["sv_idle"] + row["sv_used"] for row in pools if row["database"] != "pgbouncer"
    )
    n503 = sum(row["status"] == 503 for row in rows)
    verdict = "PASS" if not bad and not wrong and extra["pools_back_s"] is not None else "FAIL"
    reason = (
        f"{len(rows)} requests: {n503} answered 503 with Retry-After, {len(bad)} other failures "
        f"({', '.join(sorted({str(r['status']) + ' ' + r['error'][:40] for r in bad})[:4]) or 'none'}); "
        f"host pools back to their size in {extra['pools_back_s']} s"
    )
    return Outcome("5d PgBouncer restarted", verdict, reason, {**found, **extra}, timeline(run.rows()))


def restart_redis(cluster: Cluster, users: int, duration: float, out: Path, login: Callable[[], int]) -> Outcome:
    name = "5e Redis restarted"
    if not shared_limiter_supported() or cluster.config.rate_limit_store != "redis":
        why = "the example app keeps nothing in Redis without the shared limiter"
        return Outcome(name, "SKIP", f"{why} (RATE_LIMIT_STORE=redis://..., issue 30 point 3): nothing to test")
    statuses: list[int] = []

    def fault() -> dict[str, Any]:
        logins = threading.Thread(target=lambda: statuses.extend(login() for _ in range(6)))
        logins.start()
        cluster.restart_redis(down=3)
        logins.join(30)
        return {"harness_logins_during": statuses}

    found, extra, run = under_load(cluster, users, duration, fault, 15, out)
    login_rows = [row["status"] for row in run.rows() if row["name"] == "POST /login"]
    errors = [s for s in login_rows + statuses if s >= 500 and s != 503]
    # the limit holds afterwards: a fresh account, 6 wrong passwords from load2 (5 reach the check, then 429)
    account = {"username": f"cluster-limit-{uuid.uuid4().hex[:8]}", "password": uuid.uuid4().hex}
    registered = cluster.post_json("load2", "/users", account)
    wrong = [cluster.post_json("load2", "/login", {**account, "password": "wrong-password"}) for _ in range(6)]
    holds = registered == 201 and wrong == [401] * 5 + [429]
    verdict = "PASS" if not errors and holds else "FAIL"
    reason = (
        f"logins: {sorted(set(login_rows + statuses))} statuses, {len(errors)} 5xx other than 503; "
        f"afterwards 6 wrong passwords answered {wrong} (limit {'holds' if holds else 'BROKEN'})"
    )
    return Outcome(name, verdict, reason, {**found, **extra, "wrong_after": wrong}, timeline(run.rows()))


__all__ = ["IDEMPOTENT", "Outcome", "cut_host", "kill_host", "restart_pgbouncer", "restart_redis", "rolling_deploy"]

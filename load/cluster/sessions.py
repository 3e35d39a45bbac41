"""Sessions across hosts (issue 30, point 4): a login through the balancer is valid on every app host,
and a logout is seen by every host at the next request — with the sessions in PostgreSQL, then in Redis.

Which host answered a request is read from the balancer's access log (``upstream=``
in deploy/nginx/aiorest.conf's format), each request named by a query string of its own.
"""

from __future__ import annotations

import http.client
import json
import time
import uuid
from collections import Counter
from http.cookies import SimpleCookie
from typing import Any

from load.cluster.faults import Outcome
from load.cluster.hosts import APP_PORT, Cluster

STORES = ("postgres", "redis")


def _request(cluster: Cluster, method: str, path: str, body: Any = None, cookie: str = "") -> tuple[int, Any, str]:
    """(status, JSON body or None, the session cookie it set) of one request to the balancer."""
    connection = http.client.HTTPConnection(cluster.address("lb"), 80, timeout=10)
    headers = {"Content-Type": "application/json"} if body is not None else {}
    if cookie:
        headers["Cookie"] = f"session={cookie}"
    try:
        connection.request(method, path, None if body is None else json.dumps(body), headers)
        response = connection.getresponse()
        data = response.read()
        morsel = SimpleCookie(response.getheader("Set-Cookie") or "").get("session")
        is_json = response.getheader("Content-Type", "").startswith("application/json")
        parsed = json.loads(data) if data and is_json else None
        return response.status, parsed, morsel.value if morsel else ""
    finally:
        connection.close()


def _hosts_of(cluster: Cluster, probes: list[str]) -> dict[str, str]:
    """probe → the app host nginx passed it to, from the access log (the last upstream tried)."""
    assert cluster.nginx is not None
    by_address = {f"{cluster.address(name)}:{APP_PORT}": name for name in cluster.app_names}
    found: dict[str, str] = {}
    for _ in range(20):  # nginx writes a line once the request is done: wait for the last
        for line in cluster.nginx.access_log():
            for probe in probes:
                if f"probe={probe} " in line and "upstream=" in line:
                    upstream = line.split("upstream=", 1)[1].split(" ", 1)[0].split(",")[-1].strip()
                    found[probe] = by_address.get(upstream, upstream)
        if len(found) == len(probes):
            break
        time.sleep(0.1)
    return found


def _spread(cluster: Cluster, cookie: str, count: int, tag: str) -> list[tuple[str, int, str]]:
    """``count`` GET /me through the balancer: (app host, status, username) each."""
    probes = [f"{tag}-{i}" for i in range(count)]
    answers = []
    for probe in probes:
        status, body, _ = _request(cluster, "GET", f"/me?probe={probe}", cookie=cookie)
        answers.append((status, (body or {}).get("username", "")))
    hosts = _hosts_of(cluster, probes)
    return [(hosts.get(probe, "?"), status, name) for probe, (status, name) in zip(probes, answers, strict=True)]


def _session_rows(cluster: Cluster) -> int:
    return int(cluster.sql("SELECT count(*) FROM aiorest_sessions")[0][0])


def use_session_store(cluster: Cluster, store: str) -> None:
    """Restart every app host with ``SESSION_STORE`` set to ``store`` (``postgres`` or ``redis``)."""
    if cluster.config.session_store == store:
        return
    cluster.config.session_store = store
    for name in cluster.app_names:
        cluster.kill_app_host(name)
        cluster.restart_app(name)


def sessions_across_hosts(cluster: Cluster, store: str) -> Outcome:
    """Log in through the balancer, read /me on every host, log out, read /me on every host again."""
    name = f"4 sessions across hosts ({store})"
    use_session_store(cluster, store)
    account = {"username": f"cluster-session-{uuid.uuid4().hex[:8]}", "password": uuid.uuid4().hex}
    registered = _request(cluster, "POST", "/users", account)[0]
    rows_before = _session_rows(cluster)
    status, _, cookie = _request(cluster, "POST", "/login", account)
    rows_added = _session_rows(cluster) - rows_before  # the store in use: 1 row in PostgreSQL, none with Redis
    if registered != 201 or status != 200 or not cookie:
        return Outcome(name, "FAIL", f"register {registered}, login {status}, cookie {'set' if cookie else 'none'}")
    per_round = 4 * len(cluster.app_names)
    tag = uuid.uuid4().hex[:8]
    logged_in = _spread(cluster, cookie, per_round, f"in-{tag}")
    logout = _request(cluster, "POST", "/logout", cookie=cookie)[0]
    logged_out = _spread(cluster, cookie, per_round, f"out-{tag}")
    hosts = set(cluster.app_names)
    valid = {host for host, status, user in logged_in if status == 200 and user == account["username"]}
    first_after = {}
    for host, status, _ in logged_out:
        first_after.setdefault(host, status)
    ok = (
        valid == hosts
        and all(status == 200 for _, status, _ in logged_in)
        and logout == 204
        and all(status == 401 for _, status, _ in logged_out)
        and set(first_after) == hosts
        and rows_added == (1 if store == "postgres" else 0)
    )
    figures = {
        "store": store,
        "logged_in_by_host": dict(Counter(f"{host} {status}" for host, status, _ in logged_in)),
        "logged_out_by_host": dict(Counter(f"{host} {status}" for host, status, _ in logged_out)),
        "first_answer_after_logout": first_after,
        "logout": logout,
        "aiorest_sessions_rows_added_by_the_login": rows_added,
    }
    reason = (
        f"logged in: {figures['logged_in_by_host']}; logout {logout}; then {figures['logged_out_by_host']}, "
        f"each host's first answer after the logout {first_after}; the login added {rows_added} row(s) to "
        "aiorest_sessions"
    )
    return Outcome(name, "PASS" if ok else "FAIL", reason, figures)


__all__ = ["STORES", "sessions_across_hosts", "use_session_store"]

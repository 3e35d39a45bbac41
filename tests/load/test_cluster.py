"""Issue 30, point 7: a cluster of hosts on this machine (load/cluster/hosts.py), tested as one.

Network namespaces joined by a bridge: a balancer (nginx, deploy/nginx.conf), two
app hosts (``aiorest run example_app.app:app --workers 2``), a database host (its own
PostgreSQL behind PgBouncer in transaction mode) and a Redis host. A rolling deploy
through the balancer loses no request; the login limiter holds across hosts when the
example app has a shared store (``RATE_LIMIT_STORE``); a login through the balancer is
valid on both hosts and a logout is seen by both at once, with the sessions in PostgreSQL
and in Redis (``SESSION_STORE``). ``python -m load cluster`` runs
the rest of the issue's scenarios, with figures.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest

from harness import steady
from load.cluster.faults import shared_limiter_supported
from load.cluster.hosts import Cluster, ClusterConfig
from load.cluster.sessions import sessions_across_hosts
from tests.load.namespaces import running_cluster


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    config = ClusterConfig(app_hosts=2, rate_limit_store="redis" if shared_limiter_supported() else None)
    yield from running_cluster(config)


def test_a_rolling_deploy_through_the_balancer_loses_no_request(cluster):
    before = {name: cluster.metrics(name)["requests"] for name in cluster.app_names}

    async def deploy_under_load() -> steady.SteadyResult:
        load = asyncio.ensure_future(steady.run(cluster.url + "/db", rate=200, duration=8, connections=16))
        await asyncio.sleep(1)
        try:
            took = await asyncio.to_thread(cluster.rolling_deploy, 20)
            assert len(took) == 2
        finally:
            result = await load
        return result

    result = asyncio.run(deploy_under_load())
    assert result.sent > 1000
    assert result.failed == 0, result.summary()
    assert set(result.statuses) == {200}
    # both hosts served, reloaded, and serve again
    after = {name: cluster.metrics(name)["requests"] for name in cluster.app_names}
    assert all(after[name] > before[name] for name in cluster.app_names), (before, after)
    assert all(cluster.serving(name) for name in cluster.app_names)
    # a client on another host (load1) reaches the app through the balancer: a registration
    account = {"username": f"cluster-{uuid.uuid4().hex[:8]}", "password": "right-password-1"}
    assert cluster.post_json("load1", "/users", account) == 201


@pytest.mark.skipif(
    not shared_limiter_supported(), reason="the example app has no shared login limiter yet (RATE_LIMIT_STORE)"
)
def test_the_login_limit_holds_across_hosts_and_workers(cluster):
    username = f"cluster-{uuid.uuid4().hex[:8]}"
    assert cluster.post_json("load1", "/users", {"username": username, "password": "right-password-1"}) == 201
    before = {name: cluster.metrics(name)["requests"] for name in cluster.app_names}
    # Two client addresses (load1's and load2's), the balancer spreading them over 4 workers.
    wrong = {"username": username, "password": "wrong-password"}
    statuses = [cluster.post_json(("load1", "load2")[n % 2], "/login", wrong) for n in range(8)]
    assert statuses[:5] == [401] * 5, statuses
    assert statuses[5:] == [429] * 3, statuses
    after = {name: cluster.metrics(name)["requests"] for name in cluster.app_names}
    assert all(after[name] > before[name] for name in cluster.app_names), (before, after)


@pytest.mark.parametrize("store", ["postgres", "redis"])
def test_a_login_is_valid_on_every_host_and_a_logout_seen_by_all(cluster, store):
    outcome = sessions_across_hosts(cluster, store)
    assert outcome.verdict == "PASS", outcome.reason
    assert set(outcome.figures["first_answer_after_logout"].values()) == {401}

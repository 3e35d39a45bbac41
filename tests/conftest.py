import logging
from collections.abc import Iterator

import pytest

from harness.postgres import fresh_database, server_url

# The fast tier, `python -m pytest -q -m "not db and not slow"`: what runs in-process in
# well under a minute (unit tests, the sans-IO connection fed bytes, servers on a free port).
# `db`: a test that uses PostgreSQL (one of these fixtures), marked here by its fixtures.
_DATABASE_FIXTURES = frozenset({"pg_server", "database_url", "shared_database_url"})
# `slow`: modules whose tests start processes (servers, workers, nginx, PgBouncer, locust,
# Sphinx, a browser) or run a tool for seconds; a single such test elsewhere says
# @pytest.mark.slow itself.
_SLOW_MODULES = frozenset(
    {
        "tests/bench/test_bench.py",
        "tests/cli/test_cli.py",
        "tests/db/test_db_restart.py",
        "tests/db/test_pool_workers.py",
        "tests/deploy/test_nginx.py",
        "tests/deploy/test_pgbouncer.py",
        "tests/deploy/test_shared_state.py",
        "tests/docs/test_docs.py",
        "tests/docs/test_docs_commands.py",
        "tests/docs/test_tutorial.py",
        "tests/harness/test_procs.py",
        "tests/ops/test_tracing_export.py",
        "tests/harness/test_steady.py",
        "tests/load/test_cluster.py",
        "tests/load/test_cluster_live.py",
        "tests/load/test_load_compare.py",
        "tests/server/test_conformance.py",
        "tests/server/test_reload.py",
        "tests/server/test_sse_signals.py",
        "tests/server/test_systemd.py",
        "tests/server/test_watch.py",
        "tests/server/test_workers.py",
        "tests/typed/test_schemathesis.py",
    }
)
# `serial`: the full suite runs in two processes (pytest-xdist, a module per process at a time),
# then these modules alone (README's test command, .ci/run): each sends load for a while and
# counts what failed or how fast (wrk, locust, steady clients through nginx, a rolling restart,
# PostgreSQL restarted under load, 512 clients against 100 connections), or builds network
# namespaces, so the other process's load would make them fail for nothing. (tests/bench/ and
# tests/load/test_load_compare.py run beside the others: their smoke runs count instructions under valgrind,
# or errors and timeouts at 2 to 10 clients, which another process's load slows but cannot make.)
_SERIAL_MODULES = frozenset(
    {
        "tests/db/test_aiopg_uvloop.py",
        "tests/db/test_db_restart.py",
        "tests/db/test_pool_workers.py",
        "tests/deploy/test_nginx.py",
        "tests/deploy/test_pgbouncer.py",
        "tests/deploy/test_shared_state.py",
        "tests/docs/test_tutorial.py",
        "tests/load/test_cluster.py",
        "tests/load/test_cluster_live.py",
        "tests/server/test_reload.py",
    }
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = config.rootpath
    # A module moved or renamed would silently join the fast tier: its old name must not linger.
    if missing := sorted(name for name in _SLOW_MODULES | _SERIAL_MODULES if not (root / name).is_file()):
        raise pytest.UsageError(f"tests/conftest.py names modules that are not there: {missing}")
    for item in items:
        if _DATABASE_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.db)
        module = item.path.relative_to(root).as_posix()
        if module in _SLOW_MODULES:
            item.add_marker(pytest.mark.slow)
        if module in _SERIAL_MODULES:
            item.add_marker(pytest.mark.serial)


@pytest.fixture(autouse=True)
def _quiet_aiorest_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="aiorest")


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """A PostgreSQL server for this test run ($DATABASE_URL's, or an embedded one)."""
    with server_url() as url:
        yield url


@pytest.fixture
def database_url(pg_server: str) -> Iterator[str]:
    """A new, empty database for one test."""
    with fresh_database(pg_server) as url:
        yield url


@pytest.fixture(scope="session")
def shared_database_url(pg_server: str) -> Iterator[str]:
    """One database shared by the tests that only need the migrated schema."""
    with fresh_database(pg_server) as url:
        yield url

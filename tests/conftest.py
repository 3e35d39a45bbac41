import logging
from collections.abc import Iterator

import pytest

from tests.pg import fresh_database, server_url


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

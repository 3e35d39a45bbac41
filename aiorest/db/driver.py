"""The seam between the pool and a database driver: how a connection is opened, and what it does.

The pool (pool.py), the queries and transactions (database.py) and the error
mapping (errors.py) are written once against this. A driver opens one
connection; a connection runs one statement at a time and returns psycopg2's
cursor positioned on the results, so rows, row counts and errors are
psycopg2's whichever driver ran the statement. Two drivers:

- ``"psycopg2"`` (the default, ``Psycopg2Driver``): aiorest's own
  connections over psycopg2's asynchronous mode (psycopg2_driver.py): prepared
  statements, no ``wait_for`` per statement;
- ``"aiopg"`` (aiopg_driver.py): aiopg's connections, opened by the pool or
  borrowed from an ``aiopg.Pool`` the app already has.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from .errors import Params

__all__ = ["DatabaseConnection", "ConnectOptions", "Driver", "driver_named"]


class DatabaseConnection(Protocol):
    """One connection as the pool sees it.

    ``broken``: it failed and must not be reused. ``sent``: the last statement
    reached libpq to send (one that did not may run again elsewhere).
    ``interrupted``: a cancelled task left its statement running, until
    ``recover()`` ends it.
    """

    broken: bool
    sent: bool
    interrupted: bool

    @property
    def reusable(self) -> bool: ...

    async def execute(self, sql: str, params: Params = None, *, prepare: bool = True) -> Any: ...

    async def recover(self) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class ConnectOptions:
    """What the pool tells a driver about every connection it opens."""

    dsn: str | None
    application_name: str
    prepare: bool
    statement_timeout: float
    #: behind a pooler in transaction mode: cancel at the timeout instead of a session's SET
    cancel_at_timeout: bool
    #: called once, the connection closed already, when it dies with its backend
    lost: Callable[[Any, BaseException], None]
    #: a LISTEN connection's (listening.py): called with each NOTIFY received (psycopg2's ``Notify``)
    notified: Callable[[Any], None] | None = None


class Driver(Protocol):
    """Opens connections for the pool.

    ``owns_connections``: the pool opens and closes them, and sets their
    statement timeout; else they are borrowed from another pool (an aiopg pool
    the app shares) and given back on release, their session left as found.
    ``prepares``: whether it can prepare statements.
    """

    name: str
    owns_connections: bool
    prepares: bool

    def opening(self) -> None:
        """The pool opens (again): what the driver works from is looked up now, once."""

    async def connect(self, options: ConnectOptions) -> DatabaseConnection: ...


def driver_named(name: str) -> Driver:
    """The driver for ``Database(driver=name)``."""
    if name == "psycopg2":
        from .psycopg2_driver import Psycopg2Driver  # (it imports this module's types)

        return Psycopg2Driver()
    if name == "aiopg":
        try:
            from .aiopg_driver import AiopgDriver
        except ImportError as exc:
            raise RuntimeError(
                f"driver='aiopg' needs aiopg: pip install '.[aiopg]' in aiorest's checkout ({exc})"
            ) from exc
        return AiopgDriver()
    raise ValueError(f"driver must be 'psycopg2' or 'aiopg', got {name!r}")

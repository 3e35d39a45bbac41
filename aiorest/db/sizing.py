"""How many connections a pool may hold, and whether the host's pools fit in PostgreSQL.

``max_size`` is per worker process; ``max_total`` is the host's, shared out
between the host's workers when the pool opens (the workers are known by then,
not necessarily when the app is made). At open, the host's total is checked
against what PostgreSQL can give (``max_connections`` less its reserved
connections): a pool that cannot fit refuses to open, since under load it
would turn requests into 503s and lock out every other client of that server.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .driver import DatabaseConnection

__all__ = ["check_capacity", "initial_max_size", "plural", "share_out"]


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def initial_max_size(min_size: int, max_size: int | None, max_total: int | None) -> int:
    """The pool's bound until it opens: ``max_size`` (default 16), or the whole of ``max_total``, checked."""
    if max_total is None:
        size = 16 if max_size is None else max_size
        if not 0 <= min_size <= size or size < 1:
            raise ValueError(f"need 0 <= min_size <= max_size and max_size >= 1, got {min_size}, {max_size}")
        return size
    if max_size is not None:
        raise ValueError("give max_size (per worker process) or max_total (for the host's workers), not both")
    if max_total < 1 or min_size < 0:
        raise ValueError(f"need max_total >= 1 and min_size >= 0, got {max_total}, {min_size}")
    return max_total


def share_out(max_total: int, workers: int, min_wanted: int) -> tuple[int, int]:
    """``(max_size, min_size)`` of one worker's pool: its share of ``max_total``, ``min_size`` capped to it."""
    share = max_total // workers
    if share < 1:
        raise RuntimeError(
            f"max_total {max_total} cannot be shared between {workers} workers: each needs at least one connection"
        )
    return share, min(min_wanted, share)


async def check_capacity(connection: DatabaseConnection, max_size: int, workers: int) -> None:
    """Raise if this host's pools (``max_size`` × ``workers``) could ask PostgreSQL for more than it gives."""
    cursor = await connection.execute(
        "SELECT current_setting('max_connections')::int, current_setting('superuser_reserved_connections')::int,"
        " coalesce(current_setting('reserved_connections', true), '0')::int",  # PostgreSQL 16+
        prepare=False,
    )
    max_connections, superuser_reserved, reserved = cursor.fetchone()
    available = max_connections - superuser_reserved - reserved
    total = max_size * workers
    if total > available:
        raise RuntimeError(
            f"database pool too large: pool max {max_size} × {plural(workers, 'worker')}"
            f" = {total} connections exceeds PostgreSQL's max_connections {max_connections}"
            f" − {superuser_reserved + reserved} reserved = {available}; set Database(max_total=...) for this"
            f" host to at most {available} less what other clients and hosts need, raise max_connections,"
            " or put PgBouncer in front"
        )

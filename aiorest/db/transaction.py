"""The row helpers (``fetchone`` … ``execute``), and a Transaction: one held connection.

``Queries`` is what Database and Transaction share: each says how a statement
runs (``_execute``), and the helpers turn psycopg2's cursor into rows.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, TypeVar, overload

import psycopg2

from .errors import Params, translate
from .rows import row_maker

if TYPE_CHECKING:
    from .driver import DatabaseConnection

__all__ = ["Queries", "Transaction"]

_T = TypeVar("_T")


class Queries:
    """The row helpers, shared by Database (a connection per call) and Transaction."""

    async def _execute(self, sql: str, params: Params) -> Any:
        raise NotImplementedError

    @overload
    async def fetchall(self, sql: str, params: Params = None) -> list[dict[str, Any]]: ...
    @overload
    async def fetchall(self, sql: str, params: Params = None, *, into: type[_T]) -> list[_T]: ...
    async def fetchall(self, sql: str, params: Params = None, *, into: type[Any] | None = None) -> list[Any]:
        """Every row, as dicts keyed by column name; ``into``: as objects of that type, made straight from
        the row (see :func:`row_maker`: a msgspec Struct, ``tuple``, or a class taking the columns by name)."""
        cursor = await self._execute(sql, params)
        if into is not None:
            return row_maker(into, cursor.description)(cursor.fetchall())
        names = [column.name for column in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    async def fetchrows(self, sql: str, params: Params = None) -> list[tuple[Any, ...]]:
        """Every row, as tuples in column order: for many rows, cheaper than dicts."""
        cursor = await self._execute(sql, params)
        rows: list[tuple[Any, ...]] = cursor.fetchall()
        return rows

    @overload
    async def fetchone(self, sql: str, params: Params = None) -> dict[str, Any] | None: ...
    @overload
    async def fetchone(self, sql: str, params: Params = None, *, into: type[_T]) -> _T | None: ...
    async def fetchone(self, sql: str, params: Params = None, *, into: type[Any] | None = None) -> Any:
        """The first row as a dict (``into``: as that type, like :meth:`fetchall`), or None."""
        cursor = await self._execute(sql, params)
        row = cursor.fetchone()
        if row is None:
            return None
        if into is not None:
            return row_maker(into, cursor.description)([row])[0]
        return {column.name: value for column, value in zip(cursor.description, row, strict=True)}

    async def fetchval(self, sql: str, params: Params = None) -> Any:
        """The first column of the first row, or None."""
        cursor = await self._execute(sql, params)
        row = cursor.fetchone()
        return None if row is None else row[0]

    async def execute(self, sql: str, params: Params = None) -> int:
        """Run a statement; returns the number of rows it affected."""
        cursor = await self._execute(sql, params)
        return int(cursor.rowcount)


class Transaction(Queries):
    """One held connection: a transaction (depth 1, savepoints deeper), or autocommit (depth 0)."""

    def __init__(self, connection: DatabaseConnection, depth: int, begin: str | None = None) -> None:
        self._connection = connection
        self._depth = depth
        # A transaction's BEGIN, not sent yet: it goes with the first statement, in the same round trip.
        self.unsent_begin = begin

    async def run(self, sql: str, params: Params, prepare: bool = True) -> Any:
        """Run ``sql`` on this transaction's connection: its cursor (Database's queries inside one come here)."""
        begin = self.unsent_begin
        try:
            if begin is None:
                return await self._connection.execute(sql, params, prepare=prepare)
            # "BEGIN; <statement>": one round trip, the statement's result is the query's (unprepared)
            self.unsent_begin = None
            return await self._connection.execute(f"{begin}; {sql}", params, prepare=False)
        except BaseException as exc:
            if begin is not None and not self._connection.sent:  # nothing went: not begun either
                self.unsent_begin = begin
            if isinstance(exc, psycopg2.Error):
                raise translate(exc, sql) from exc
            raise

    _execute = run

    async def execute_script(self, sql: str) -> None:
        """Run SQL text as is: several statements, never prepared, no parameters."""
        await self._execute(sql, None, prepare=False)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Transaction]:
        """BEGIN on an autocommit connection, else a savepoint; rolled back on an exception."""
        if self._depth == 0:  # BEGIN goes with the transaction's first statement (none: nothing to end)
            inner = Transaction(self._connection, 1, begin="BEGIN")
            commit, rollback = "COMMIT", "ROLLBACK"
        else:
            name = f"aiorest_sp_{self._depth}"
            await self._execute(f"SAVEPOINT {name}", None, prepare=False)
            inner = Transaction(self._connection, self._depth + 1)
            commit, rollback = f"RELEASE SAVEPOINT {name}", f"ROLLBACK TO SAVEPOINT {name}"
        try:
            yield inner
        except BaseException:
            # A statement cancelled with its task still runs: the pool ends it
            # and rolls the whole transaction back when the connection returns.
            if inner.unsent_begin is None and not self._connection.broken and not self._connection.interrupted:
                await self._execute(rollback, None, prepare=False)
            raise
        if inner.unsent_begin is None:
            await self._execute(commit, None, prepare=False)

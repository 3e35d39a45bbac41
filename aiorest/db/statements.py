"""Statements as both drivers send them: ``%s`` as ``$n`` for PREPARE, integers inlined.

What may be prepared (a statement without parameters, or with integer ones only, typed by
size), and the text psycopg2 would have made, so that a prepared or inlined statement
returns exactly what psycopg2 alone returns. ``Preparing`` is what a connection of either
driver (psycopg2_driver.py, aiopg_driver.py) does with a statement it is given.
"""

from __future__ import annotations

import datetime
import decimal
import math
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import psycopg2  # type: ignore[import-untyped]
import psycopg2.extensions  # type: ignore[import-untyped]
from psycopg2.extras import Json  # type: ignore[import-untyped]

from .errors import Params

__all__ = [
    "PREPARED_MAX",
    "Preparing",
    "PreparedStatements",
    "execute_prepared",
    "inline_integers",
    "integer_types",
    "parameter_types",
    "to_dollar",
]

_Key = str | tuple[str, str]
#: Texts a connection prepares (each plan lives in its backend); past it, statements run unprepared.
PREPARED_MAX = 256

_PREPARABLE = re.compile(r"^\s*(select|insert|update|delete|with|values)\b", re.IGNORECASE)
_PERCENT = re.compile(r"%.?", re.DOTALL)


def _substitute(sql: str, placeholder: Callable[[int], str | None]) -> tuple[str, int] | None:
    """``sql`` formatted as psycopg2 formats it when given parameters, and the count of ``%s``.

    ``%%`` becomes ``%`` and the n-th ``%s`` ``placeholder(n)``. None if
    ``placeholder`` returns None, or the text holds any other ``%`` (``%(name)s``,
    a lone ``%``): psycopg2 is then left to format it, or to raise its error.
    """
    count = 0
    failed = False

    def replace(match: re.Match[str]) -> str:
        nonlocal count, failed
        if match.group() == "%%":
            return "%"
        text = None
        if match.group() == "%s":
            count += 1
            text = placeholder(count)
        if text is None:
            failed = True
            return ""
        return text

    formatted = _PERCENT.sub(replace, sql)
    return None if failed else (formatted, count)


def to_dollar(sql: str, params: Params) -> str | None:
    """The text to PREPARE for ``sql`` run with ``params``: ``%s`` as ``$1, $2…``; None if it can't be prepared.

    Without parameters (None) psycopg2 sends the text as it is, ``%`` and all,
    and so does this. A text whose ``%s`` do not match the parameters one to one
    is left to psycopg2, which says so.
    """
    if not _PREPARABLE.match(sql):
        return None
    if params is None:
        return sql
    dollar = _substitute(sql, lambda n: f"${n}")
    return None if dollar is None or dollar[1] != len(params) else dollar[0]


def integer_types(params: Params) -> str | None:
    """The types PostgreSQL gives ``params`` written as literals, for PREPARE: ``"int4,int8"``.

    ``""`` for no parameters; None unless every parameter is an int (not a bool):
    only those are prepared, typed as psycopg2's literals are, so that a prepared
    statement returns what the same statement unprepared returns (``SELECT %s``
    with an untyped parameter would return text). Other types run unprepared.
    """
    if not params:
        return ""
    types = []
    for value in params:
        if type(value) is not int:
            return None
        types.append(_integer_type(value))
    return ",".join(types)


def parameter_types(params: Params) -> str | None:
    """The types PostgreSQL gives psycopg2's literals of ``params``, for PREPARE: ``"int4,unknown,bool"``.

    ``""`` for no parameters; None for a parameter whose literal's type cannot be
    told from its Python value alone (a list, a dict, an adapter of the app's):
    the statement then runs unprepared. Each type is the literal's own, so that
    the prepared statement, given the same literal in ``EXECUTE``, returns what
    the statement unprepared returns: a str (``'…'``) and None (``NULL``) are
    ``unknown``, which PostgreSQL types from where the parameter stands, as it
    types the literal; a finite float is written ``1.5``, a numeric.
    """
    if not params:
        return ""
    if type(params) is tuple and len(params) == 1 and type(params[0]) is int:
        return _integer_type(params[0])  # the common statement (a row by its id): the loop below, shorter
    if isinstance(params, Mapping):
        return None  # %(name)s: left to psycopg2
    types = []
    value: Any
    for value in params:
        name = _array_type(value) if type(value) is list else _literal_type(value)
        if name is None:
            return None
        types.append(name)
    return ",".join(types)


def _literal_type(value: Any) -> str | None:
    kind = type(value)
    if kind is int:
        return _integer_type(value)
    name = _LITERAL_TYPES.get(kind)
    if name is None:
        if kind is not float:
            return None
        return "numeric" if math.isfinite(value) else "float8"  # 'NaN'::float, 'Infinity'::float
    if kind is datetime.datetime:
        return name if value.tzinfo is None else "timestamptz"
    if kind is datetime.time and value.tzinfo is not None:
        return None
    return name


def _array_type(values: list[Any]) -> str | None:
    """The type of psycopg2's ``ARRAY[…]`` of a flat list whose items' literals share a type (unknown when empty).

    Integers of several sizes: the widest. Only strs and Nones: ``text[]`` (PostgreSQL makes an array of
    unknown literals one of text). Other mixes, and lists in lists, run unprepared.
    """
    if all(item is None for item in values):
        return "unknown"  # '{}', '{NULL,NULL}': psycopg2 writes these as strings
    kinds = {"unknown" if item is None else _literal_type(item) for item in values}
    if None in kinds or len(kinds) > 2 or (len(kinds) == 2 and not kinds <= _INTEGERS):
        return None
    if kinds <= _INTEGERS:
        return next(name for name in ("numeric", "int8", "int4") if name in kinds) + "[]"
    name = "text" if kinds == {"unknown"} else kinds.pop()
    return f"{name}[]"


_INTEGERS = frozenset({"int4", "int8", "numeric"})


def _integer_type(value: int) -> str:
    return "int4" if -0x8000_0000 <= value <= 0x7FFF_FFFF else "int8" if -(1 << 63) <= value < 1 << 63 else "numeric"


# The type of psycopg2's literal for a parameter of each Python type (float and int: by value, above).
_LITERAL_TYPES: dict[type, str] = {
    str: "unknown",
    Json: "unknown",  # a quoted string, '{"a": 1}': the statement casts it (%s::jsonb) or PostgreSQL types it
    type(None): "unknown",
    bool: "bool",
    decimal.Decimal: "numeric",
    bytes: "bytea",
    bytearray: "bytea",
    memoryview: "bytea",
    datetime.date: "date",
    datetime.time: "time",
    datetime.datetime: "timestamp",
    datetime.timedelta: "interval",
    uuid.UUID: "uuid",
}


def inline_integers(sql: str, params: Sequence[Any]) -> str | None:
    """``sql`` with its ``%s`` replaced by integer ``params`` (and ``%%`` by ``%``), as psycopg2 would.

    None unless every parameter is an int and there is one ``%s`` each: psycopg2
    then adapts them (and reports a mismatch). Unprepared statements (behind a
    pooler, say) skip its adaptation this way (7 µs a statement, measured).
    """
    if integer_types(params) is None:
        return None
    inlined = _substitute(sql, lambda n: _integer(params[n - 1]) if n <= len(params) else None)
    return None if inlined is None or inlined[1] != len(params) else inlined[0]


def _integer(value: int) -> str:
    # "-7::text" would be -(7::text), and "1-%s" would become "1--7", a comment.
    return str(value) if value >= 0 else f"({value})"


class PreparedStatements:
    """One connection's prepared statements: a name for each text and parameters' types, ``limit`` at most
    (each holds its plan in the backend for the connection's life), and the texts PREPARE could not type.

    A parameter typed ``unknown`` (a str, None) is typed by PostgreSQL from where it stands, as its literal
    would be; where nothing tells (``SELECT %s IS NULL``) the PREPARE fails and the literal does not, so
    such a text is not prepared: outside a transaction it is tried once and then refused (``failed``),
    inside one not tried at all (a failed statement would abort the transaction).
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.names: dict[_Key, str] = {}
        self._refused: set[_Key] = set()
        self._made = 0  # names given, each once: a PREPARE cancelled with its task may have run all the same

    def find(self, sql: str, params: Params) -> tuple[_Key, str, str | None] | None:
        """The statement's key, its parameters' types and its name if prepared; None: never prepared."""
        types = parameter_types(params)
        if types is None:
            return None
        key = sql if params is None else (sql, types)
        return key, types, self.names.get(key)

    def plan(self, key: _Key, sql: str, params: Params, types: str, in_transaction: bool) -> tuple[str, str] | None:
        """The name and the PREPARE to run for a statement not prepared yet; None: run it unprepared."""
        if key in self._refused or self._made >= self.limit or ("unknown" in types and in_transaction):
            return None
        dollar = to_dollar(sql, params)
        if dollar is None:
            return None
        name = f"aiorest_{self._made}"
        self._made += 1
        return name, f"PREPARE {name}{f' ({types})' if types else ''} AS {dollar}"

    def prepared(self, key: _Key, name: str) -> None:
        """The PREPARE of :meth:`plan` went: ``name`` runs the statement from now on."""
        self.names[key] = name

    def failed(self, key: _Key, types: str) -> bool:
        """The PREPARE of :meth:`plan` failed: True when only a parameter typed ``unknown`` can be why (the
        statement then runs unprepared, as from now on), False for an error of the statement's own."""
        if "unknown" not in types:
            return False
        if len(self._refused) < self.limit:
            self._refused.add(key)
        return True


def execute_prepared(name: str, params: Params) -> tuple[str, Params]:
    """The EXECUTE of the statement ``name`` with ``params``: integers (a tuple or a list of them) inlined,
    the others adapted by psycopg2."""
    if not params:
        return f"EXECUTE {name}", None
    if type(params) is tuple and len(params) == 1 and type(params[0]) is int:  # a row by its id: as below
        return f"EXECUTE {name} ({params[0]})", None
    if all(type(value) is int for value in params):
        return f"EXECUTE {name} ({', '.join(map(str, params))})", None
    return f"EXECUTE {name} ({', '.join(['%s'] * len(params))})", params


class Preparing:
    """How a connection runs a statement: prepared once and then EXECUTEd by name (``_statements``, when
    ``_prepare``), else with its integer parameters inlined, else as psycopg2 adapts it.

    The connection class gives ``raw`` (its psycopg2 connection) and ``_run(sql, params)``, which sends
    one statement and returns the cursor on its results.
    """

    raw: psycopg2.extensions.connection
    _prepare: bool
    _statements: PreparedStatements

    async def _run(self, sql: str, params: Params) -> Any:
        raise NotImplementedError

    async def execute(self, sql: str, params: Params = None, *, prepare: bool = True) -> Any:
        """Run one statement; returns psycopg2's cursor, positioned on the results."""
        if prepare and self._prepare and not isinstance(params, dict):
            found = self._statements.find(sql, params)
            if found is not None:
                key, types, name = found
                name = name or await self._prepare_statement(key, sql, params, types)
                if name is not None:
                    return await self._run(*execute_prepared(name, params))
        if params and not isinstance(params, dict):
            inlined = inline_integers(sql, params)
            if inlined is not None:
                return await self._run(inlined, None)
        return await self._run(sql, params)

    async def _prepare_statement(self, key: Any, sql: str, params: Params, types: str) -> str | None:
        """PREPARE the statement (see PreparedStatements); its name, or None to run it unprepared."""
        in_transaction = self.raw.get_transaction_status() != psycopg2.extensions.TRANSACTION_STATUS_IDLE
        if (plan := self._statements.plan(key, sql, params, types, in_transaction)) is None:
            return None
        name, statement = plan
        try:
            await self._run(statement, None)
        except psycopg2.ProgrammingError:
            if self.raw.closed or not self._statements.failed(key, types):
                raise
            return None  # run unprepared: it raises its own error, if it has one
        self._statements.prepared(key, name)
        return name

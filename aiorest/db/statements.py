"""Statements as the psycopg2 driver sends them: ``%s`` as ``$n`` for PREPARE, integers inlined.

What may be prepared (a statement without parameters, or with integer ones only, typed by
size), and the text psycopg2 would have made, so that a prepared or inlined statement
returns exactly what psycopg2 alone returns.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from .errors import Params

__all__ = ["inline_integers", "integer_types", "to_dollar"]

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
        types.append(
            "int4" if -0x8000_0000 <= value <= 0x7FFF_FFFF else "int8" if -(1 << 63) <= value < 1 << 63 else "numeric"
        )
    return ",".join(types)


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

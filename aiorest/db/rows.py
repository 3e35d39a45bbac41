"""Rows straight into the objects a handler answers with: no dict per row on the way.

``fetchall(sql, params, into=Note)`` makes each row a ``Note`` from the tuple psycopg2 gives:
with the columns in the Struct's field order, ``itertools.starmap`` calls the Struct's own
``__init__`` (C) with the row as it is. The values are psycopg2's, as ``fetchall`` gives them
(no conversion, no validation: the same as ``Note(**row)``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from itertools import starmap
from typing import Any

__all__ = ["row_maker"]

_Maker = Callable[[Sequence[tuple[Any, ...]]], list[Any]]
_MAKERS: dict[tuple[type, tuple[str, ...]], _Maker] = {}
_MAKERS_KEPT = 512  # one a statement's columns and type: the program's, not a client's; a bound all the same


def row_maker(into: type[Any], description: Sequence[Any]) -> _Maker:
    """What turns rows of the columns ``description`` names (a cursor's) into ``into`` objects.

    - ``tuple``: the rows as they are;
    - a class (a msgspec ``Struct``, a dataclass, a NamedTuple, …): called with each row by position
      when the columns are its first positional parameters in order (the others have defaults),
      else with the columns by name; for a Struct, a column that is not a field is a TypeError, named.

    Made once for each type and list of column names, then kept.
    """
    names = tuple(column.name for column in description)
    key = (into, names)
    maker = _MAKERS.get(key)
    if maker is None:
        if len(_MAKERS) >= _MAKERS_KEPT:
            _MAKERS.clear()
        maker = _MAKERS[key] = _make(into, names)
    return maker


def _make(into: type[Any], names: tuple[str, ...]) -> _Maker:
    if into is tuple:
        return list
    fields: tuple[str, ...] | None = getattr(into, "__struct_fields__", None)
    if fields is not None:
        unknown = [name for name in names if name not in fields]
        if unknown:
            raise TypeError(f"{into.__name__} has no field for the column(s) {', '.join(unknown)}")
    try:
        parameters = list(inspect.signature(into).parameters.values())
    except (TypeError, ValueError):  # no signature to read: by name it is
        parameters = []
    positional = tuple(p.name for p in parameters if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if positional[: len(names)] == names:
        return lambda rows: list(starmap(into, rows))
    if len(set(names)) != len(names):
        raise TypeError(f"the columns {names} repeat a name: {into.__name__} cannot take them by name")
    return lambda rows: [into(**dict(zip(names, row, strict=True))) for row in rows]

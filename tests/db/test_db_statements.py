"""aiorest.db runs a statement as psycopg2's own cursor.execute does, prepared or not.

Each (sql, params) goes through a plain synchronous psycopg2 cursor, then
through Database, on each driver, with prepare on, off, and as behind PgBouncer in transaction
mode; the rows, and the Python type of every value, must be the same. A
statement is run twice on each pool (the first run prepares it, the second
executes the prepared statement), and the texts are run again with parameters
of other types, which must not reuse a statement prepared for the first ones.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import uuid
from typing import Any

import msgspec
import psycopg2
import psycopg2.extras
import pytest

from aiorest.db import Database

NOW = datetime.datetime(2024, 2, 29, 13, 14, 15, 123456)
STATEMENTS: list[tuple[str, Any]] = [
    # The text is left alone without parameters, formatted with them (even empty ones).
    ("SELECT 'sale' AS body WHERE 'on sale now' LIKE '%sale%'", None),
    ("SELECT '100%%'", None),
    ("SELECT '100%%'", ()),
    ("SELECT '100%%', %s", (1,)),
    ("SELECT '%s'", None),
    ("SELECT %s", (5,)),
    ("SELECT %s, %s, %s", (-5, 2**31, -(2**31))),
    ("SELECT %s", (2**63,)),
    ("SELECT %s + 1, %s / 2", (5, 5)),
    ("SELECT %s", (1.5,)),
    ("SELECT %s, %s", (float("inf"), float("nan"))),
    ("SELECT %s / 2", (5.0,)),
    ("SELECT %s", (decimal.Decimal("1.10"),)),
    ("SELECT %s, %s", (True, False)),
    ("SELECT %s", (None,)),
    ("SELECT %s IS NULL", ("x",)),
    ("SELECT %s || %s", ("a", "b")),
    ("SELECT %s", ("it's 100%",)),
    ("SELECT %s", (b"\x00\xff",)),
    ("SELECT %s, %s, %s", (NOW.date(), NOW.time(), NOW)),
    ("SELECT %s", (NOW.replace(tzinfo=datetime.UTC),)),
    ("SELECT %s", (datetime.timedelta(days=1, seconds=5),)),
    ("SELECT %s", (uuid.UUID("12345678-1234-5678-1234-567812345678"),)),
    ("SELECT %s, %s", ([1, 2], ["a", None])),
    ("SELECT %s, %s, %s", ([2**40, 1], [], [None, None])),
    ("SELECT %s, %s, %s", ([True, False], [1.5, 2], [NOW.date()])),
    ("SELECT %s = ANY(%s), %s", ("a", ["a", "b"], [[1, 2], [3, 4]])),
    ("SELECT %s", (psycopg2.extras.Json({"a": 1}),)),
    ("SELECT %s::jsonb", (psycopg2.extras.Json({"a": [1, "b"]}),)),
    ("SELECT %s::json", (psycopg2.extras.Json([1.5, None]),)),
    ("SELECT %(x)s, %(y)s", {"x": 1, "y": "two"}),
    ("SELECT n FROM generate_series(1, 5) AS n WHERE n > %s ORDER BY n LIMIT %s", (2, 2)),
    ("VALUES (%s, '%%'), (%s, 'b')", (1, 2)),
    # What psycopg2 refuses, it refuses the same way here.
    ("SELECT 'a%b', %s", (1,)),
    ("SELECT %s, %s", (1,)),
    ("SELECT %s", ()),
]


@pytest.fixture(scope="module")
def reference(shared_database_url: str):
    connection = psycopg2.connect(shared_database_url)
    connection.autocommit = True
    psycopg2.extras.register_uuid(conn_or_curs=connection)  # as aiorest's connections do
    yield connection
    connection.close()


def _typed(rows: list[tuple[Any, ...]]) -> list[list[tuple[type, Any]]]:
    """Each value with its type; memoryviews as bytes, so that they compare; NaN as its text."""
    return [
        [
            (type(value), bytes(value) if isinstance(value, memoryview) else repr(value) if value != value else value)
            for value in row
        ]
        for row in rows
    ]


def _expected(reference, sql: str, params: Any) -> Any:
    with reference.cursor() as cursor:
        try:
            cursor.execute(sql, params)
        except Exception as exc:
            return type(exc)
        return _typed(cursor.fetchall())


async def _got(db: Database, sql: str, params: Any, *, into_tuples: bool = False) -> Any:
    try:
        rows = await (db.fetchall(sql, params, into=tuple) if into_tuples else db.fetchrows(sql, params))
        return _typed(rows)
    except Exception as exc:
        return type(exc)


@pytest.mark.parametrize("driver", ["psycopg2", "aiopg"])
@pytest.mark.parametrize("mode", ["prepared", "unprepared", "pgbouncer-transaction"])
async def test_statements_give_what_psycopg2_gives(shared_database_url, reference, mode: str, driver: str) -> None:
    options: dict[str, Any] = {
        "prepared": {"prepare": True},
        "unprepared": {"prepare": False},
        "pgbouncer-transaction": {"pooler": "transaction"},
    }[mode]
    db = Database(shared_database_url, min_size=1, max_size=1, driver=driver, **options)
    await db.open()
    try:
        for sql, params in STATEMENTS:
            expected = _expected(reference, sql, params)
            for attempt in ("first", "again"):
                assert await _got(db, sql, params) == expected, (sql, params, attempt)
            assert await _got(db, sql, params, into_tuples=True) == expected, (sql, params, "into=tuple")
        # One text, parameters of other types each time: each answer is psycopg2's.
        for params in [(5,), ("5",), (True,), (2**40,), (None,), (5,)]:
            assert await _got(db, "SELECT %s", params) == _expected(reference, "SELECT %s", params), params
        async with db.transaction():  # in a transaction too
            assert await _got(db, "SELECT %s, '%%'", (7,)) == _expected(reference, "SELECT %s, '%%'", (7,))
            assert await _got(db, "SELECT %s::text", ("in",)) == _expected(reference, "SELECT %s::text", ("in",))
        if mode == "prepared":
            prepared = await db.fetchall("SELECT statement, parameter_types::text AS types FROM pg_prepared_statements")
            texts = [row["statement"] for row in prepared]
            types = " ".join(row["types"] for row in prepared)
            # a str is prepared typed unknown, as its literal is; a text PREPARE cannot type so is not (it runs
            # unprepared), and one with a str is not tried inside a transaction (a failure would abort it)
            assert any("$1 || $2" in text for text in texts) and any("WHERE n > $1" in text for text in texts)
            # Json is a quoted string (unknown), a flat list an ARRAY of its items' type; a list of lists is not
            assert any("$1::jsonb" in text for text in texts)
            assert all(name in types for name in ("bigint[]", "boolean[]", "numeric[]", "date[]", "text[]"))
            assert not any("= ANY($2)" in text for text in texts)
            assert not any("$1 IS NULL" in text or "$1::text" in text for text in texts)
    finally:
        await db.close()


class _Row(msgspec.Struct):
    id: int
    title: str
    done: bool
    price: decimal.Decimal
    at: datetime.datetime
    doc: Any
    tag: str = "default"


class _KeywordRow(msgspec.Struct, kw_only=True):
    title: str
    id: int


@dataclasses.dataclass
class _DataRow:
    id: int
    title: str


ROW = (
    "SELECT n AS id, 'note ' || n AS title, n % 2 = 0 AS done, 1.10::numeric * n AS price,"
    " '2024-02-29 13:14:15.123456+01'::timestamptz + n * interval '1 day' AS at,"
    """ ('{"a": [' || n || ']}')::jsonb AS doc FROM generate_series(1, 3) AS n ORDER BY n"""
)


@pytest.mark.parametrize("driver", ["psycopg2", "aiopg"])
async def test_rows_go_straight_into_objects_with_the_values_and_types_of_the_dicts(shared_database_url, driver):
    db = Database(shared_database_url, min_size=1, max_size=1, driver=driver)
    await db.open()
    try:
        dicts = await db.fetchall(ROW)
        structs = await db.fetchall(ROW, into=_Row)
        assert structs == [_Row(**row) for row in dicts]  # by position: the columns are the first fields
        assert [[type(value) for value in msgspec.structs.astuple(s)] for s in structs] == [
            [type(value) for value in row.values()] + [str] for row in dicts
        ]
        assert structs[0].at.tzinfo is not None and structs[1].doc == {"a": [2]}
        # by name: the columns in another order, a keyword-only Struct, a dataclass
        swapped = await db.fetchall("SELECT title, id FROM (" + ROW + ") AS r", into=_KeywordRow)
        assert swapped == [_KeywordRow(id=row["id"], title=row["title"]) for row in dicts]
        assert await db.fetchall("SELECT title, id FROM (" + ROW + ") AS r", into=_DataRow) == [
            _DataRow(row["id"], row["title"]) for row in dicts
        ]
        assert await db.fetchone(ROW, into=_Row) == structs[0]
        assert await db.fetchone(ROW + " LIMIT 0", into=_Row) is None
        with pytest.raises(TypeError, match="no field for the column.s. extra"):
            await db.fetchall("SELECT 1 AS id, 2 AS extra", into=_KeywordRow)
    finally:
        await db.close()

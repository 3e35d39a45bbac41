"""The database errors that become HTTP answers, and which psycopg2 error becomes which.

A failure the client caused or can wait out is an HTTPError: a unique
violation is a 409, a value PostgreSQL refuses (too long, out of range,
malformed, holding a NUL character) or a constraint it breaks is a 422, an
unreachable or overloaded database is a 503. Their messages name no table,
column, constraint or SQL: the client sees what was wrong with its request,
never the schema. What PostgreSQL said stays on the exception for the app
(``sqlstate``, ``constraint``, ``diagnostic``, and ``__cause__``, psycopg2's
error).

Any other database error is the code's: psycopg2's error goes on to the app,
which logs it in full (with the SQLSTATE and statement added as a note) and
answers a bare 500. That includes the data exceptions a client's value cannot
cause, such as a division by zero (see ``_CLIENT_VALUE``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import psycopg2
import psycopg2.errors

from .._support.errors import first_line
from ..http.exceptions import VALIDATION_MESSAGE, HTTPConflict, HTTPServiceUnavailable, HTTPUnprocessableEntity

if TYPE_CHECKING:
    from ..http.request import Request

Params = Sequence[Any] | dict[str, Any] | None

DISCONNECTS = (psycopg2.OperationalError, psycopg2.InterfaceError)
_NUL_REFUSED = "A string literal cannot contain NUL"  # psycopg2's ValueError, raised before sending
_NUL_MESSAGE = "holds a NUL character (U+0000), which the database cannot store"
_LOCATIONS_MAX = 8  # request inputs a NUL answer names at most


class DatabaseError(Exception):
    """Base of the database errors that become HTTP answers.

    ``sqlstate``, ``constraint`` and ``diagnostic`` keep what PostgreSQL said
    (None where it said nothing) for the app and its logs; none of them is
    sent to the client.
    """

    sqlstate: str | None = None
    constraint: str | None = None
    diagnostic: str | None = None


class DatabaseUnavailable(DatabaseError, HTTPServiceUnavailable):
    """503: PostgreSQL cannot be reached, or the connection died mid-request."""

    def __init__(self, message: str = "database unavailable") -> None:
        super().__init__(message, retry_after=1)


class PoolTimeout(DatabaseError, HTTPServiceUnavailable):
    """503: every connection stayed busy for longer than the acquire timeout."""

    def __init__(self, message: str = "database busy: no connection free in time") -> None:
        super().__init__(message, retry_after=1)


class StatementTimeout(DatabaseError, HTTPServiceUnavailable):
    """503: a statement ran longer than the statement timeout."""

    def __init__(self, message: str = "database statement timed out") -> None:
        super().__init__(message, retry_after=1)


class UniqueViolation(DatabaseError, HTTPConflict):
    """409: a row with the same unique key exists."""


class ConstraintViolation(DatabaseError, HTTPUnprocessableEntity):
    """422: a check, foreign-key or not-null constraint refused the data.

    Its body is a validation error's (see aiorest.typed): ``details`` lists the
    problem, at ``location`` ``"request"`` where PostgreSQL does not say which input.
    """

    def __init__(self, problem: str, location: str = "request") -> None:
        super().__init__(VALIDATION_MESSAGE, details=[{"location": location, "message": problem}])


class InvalidValue(ConstraintViolation):
    """422: PostgreSQL cannot take a value as given: too long, out of range, malformed, or holding a NUL.

    A ConstraintViolation, as such errors were before they had a class of their own.
    """


class NulCharacter(InvalidValue):
    """422: a text holds a NUL character (U+0000), which PostgreSQL's text types cannot store.

    psycopg2 refuses such a parameter before the statement is sent; ``details``
    names it: the request's input, when the app knows the request (Database.setup
    adds a handler that looks), else the statement's parameter.
    """


# The data exceptions (SQLSTATE class 22) a value the client sent can cause, with
# what the client is told. Every other code of the class (22012 division_by_zero,
# 2201B invalid_regular_expression, 22023 invalid_parameter_value, 22025
# invalid_escape_sequence, 2200H sequence_generator_limit_exceeded, …) is the
# code's: a 500. docs/database.rst has the table.
_CLIENT_VALUE = {
    "22001": "a value is too long",  # string_data_right_truncation
    "22003": "a number is out of range",  # numeric_value_out_of_range
    "22007": "a date or time is malformed",  # invalid_datetime_format
    "22008": "a date or time is out of range",  # datetime_field_overflow
    "22009": "a time zone is out of range",  # invalid_time_zone_displacement_value
    "22015": "an interval is out of range",  # interval_field_overflow
    "22018": "a value is not of the expected type",  # invalid_character_value_for_cast
    "22021": "a text holds a character the database cannot store",  # character_not_in_repertoire
    "22026": "a value has the wrong length",  # string_data_length_mismatch
    "2201W": "a limit is out of range",  # invalid_row_count_in_limit_clause
    "2201X": "an offset is out of range",  # invalid_row_count_in_result_offset_clause
    "22030": "a JSON object repeats a key",  # duplicate_json_object_key_value
    "22032": "a JSON text is malformed",  # invalid_json_text
    "22P02": "a value is not of the expected type",  # invalid_text_representation
    "22P05": "a text holds a character the database cannot store",  # untranslatable_character
}
_CONSTRAINTS = (psycopg2.errors.CheckViolation, psycopg2.errors.ForeignKeyViolation, psycopg2.errors.NotNullViolation)


def translate(exc: BaseException, sql: str) -> BaseException:
    """The HTTP-mapped error for a psycopg2 error, else ``exc`` itself, noted with its SQLSTATE and ``sql``."""
    error: DatabaseError
    if isinstance(exc, psycopg2.errors.UniqueViolation):
        error = UniqueViolation("conflict with an existing row")
    elif isinstance(exc, _CONSTRAINTS):
        error = ConstraintViolation("the data breaks a database constraint")
    elif isinstance(exc, psycopg2.Error) and exc.pgcode in _CLIENT_VALUE:
        error = InvalidValue(_CLIENT_VALUE[exc.pgcode])
    elif isinstance(exc, psycopg2.errors.QueryCanceled):
        error = StatementTimeout()
    elif isinstance(exc, DISCONNECTS):
        error = DatabaseUnavailable()
    else:
        if isinstance(exc, psycopg2.Error) and exc.pgcode:
            exc.add_note(f"SQLSTATE {exc.pgcode} in the statement: {sql}")
        return exc
    if isinstance(exc, psycopg2.Error):
        error.sqlstate = exc.pgcode
        error.constraint = exc.diag.constraint_name
        error.diagnostic = first_line(exc)
    return error


def nul_error(exc: Exception, params: Params) -> NulCharacter | None:
    """The 422 for psycopg2 refusing a str parameter holding NUL (its ValueError ``exc``), else None.

    Its location is the statement's parameter (``parameter 2``, ``parameter name``);
    ``locate_nul`` names the request's input instead, when the app knows the request.
    """
    if not isinstance(exc, ValueError) or not str(exc).startswith(_NUL_REFUSED):
        return None
    items = params.items() if isinstance(params, Mapping) else enumerate(params or (), 1)
    where = next((f"parameter {key}" for key, value in items if _holds_nul(value)), "a parameter")
    error = NulCharacter(_NUL_MESSAGE, where)
    error.diagnostic = f"{where} of the statement {_NUL_MESSAGE}"
    return error


def _holds_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, (list, tuple)):
        return any(_holds_nul(item) for item in value)
    return False


async def locate_nul(request: Request, exc: NulCharacter) -> None:
    """An exception handler (Database.setup adds it): a NUL's 422 names the request's inputs holding one.

    Raises ``exc`` again, its ``details`` naming each path parameter, query
    parameter, header or JSON body field of the request that holds a NUL (if
    any does: else the statement's parameter stays); the app answers it as usual.
    """
    try:
        body = await request.json() if request.content_type.endswith("json") else None
    except Exception:  # streamed, or not JSON: no field to name
        body = None
    found = [{"location": where, "message": _NUL_MESSAGE} for where in _nul_inputs(request, body)]
    if found:
        exc.details = found[:_LOCATIONS_MAX]
    raise exc


def _nul_inputs(request: Request, body: Any) -> Iterator[str]:
    for key, value in request.path_params.items():
        if isinstance(value, str) and "\x00" in value:
            yield f"path.{key}"
    for key, value in request.query.multi_items():
        if "\x00" in key or "\x00" in value:
            yield f"query.{key}"
    for key, value in request.headers.items():
        if "\x00" in value:
            yield f"header.{key.lower()}"
    yield from _nul_fields(body, "body")


def _nul_fields(value: Any, where: str) -> Iterator[str]:
    if isinstance(value, str):
        if "\x00" in value:
            yield where
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _nul_fields(item, f"{where}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _nul_fields(item, f"{where}[{index}]")

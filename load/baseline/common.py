"""What both threaded baselines share below the API: the command line, errors, JSON, the blocking pool.

flask_app and stdlib_app only adapt HTTP to the functions of users.py, notes.py
and techempower.py, so they answer alike, and alike to example_app (its users.py,
notes.py and techempower.py): the same statuses, JSON shapes and error details,
and the same SQL: the statements are example_app's own (example_app/queries.py).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http import HTTPStatus
from typing import Any

import psycopg2
import psycopg2.errors
import psycopg2.extensions

JSON_TYPE = "application/json"
TEXT_TYPE = "text/plain; charset=utf-8"
HTML_TYPE = "text/html; charset=utf-8"
MAX_BODY_SIZE = 1024 * 1024  # aiorest's Limits.max_body_size
NOTES_PATH = "/notes"

# -- command line --------------------------------------------------------------------


def add_server_arguments(parser: argparse.ArgumentParser, *, port: int) -> None:
    """The options both baselines take: where to listen, the pool size, the listen backlog."""
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=port)
    parser.add_argument("--pool", type=int, default=32, help="database connections, all opened at start (default 32)")
    # The load tool starts aiorest with a backlog of 16,384: the same here, so that a burst of
    # connections waits in the queue for every target alike instead of being dropped for one.
    parser.add_argument("--backlog", type=int, default=16384, help="listen backlog (default 16384)")


def database_url() -> str:
    url = os.environ.get("DATABASE_URL")
    if not url:
        raise SystemExit("set DATABASE_URL=postgresql://... (the database example_app's migrations were applied to)")
    return url


# -- errors and JSON ---------------------------------------------------------------


class ApiError(Exception):
    """An error answered as aiorest answers one: ``{"error": {"status", "message", "details"}}``."""

    def __init__(
        self, status: int, message: str | None = None, *, details: Any = None, headers: Mapping[str, str] | None = None
    ) -> None:
        self.status = status
        self.message = message or HTTPStatus(status).phrase
        self.details = details
        self.headers = dict(headers or {})
        super().__init__(self.message)

    def to_dict(self) -> dict[str, Any]:
        return {"error": {"status": self.status, "message": self.message, "details": self.details}}


def invalid(where: str, problems: dict[str, str]) -> ApiError:
    """A 422 in the shape of aiorest's typed handlers: every problem with its location (``body.title``)."""
    details = [
        {"location": f"{where}.{name}" if name else where, "message": message} for name, message in problems.items()
    ]
    return ApiError(422, "the request is not valid", details=details)


def not_found(path: str) -> ApiError:
    return ApiError(404, f"no route for {path}")


def method_not_allowed(method: str, path: str, allowed: set[str]) -> ApiError:
    """405 with every method of the path in ``Allow``, sorted, as aiorest's router lists them."""
    return ApiError(405, f"method {method} is not allowed for {path}", headers={"Allow": ", ".join(sorted(allowed))})


# aiorest's codec (ujson, compact, non-ASCII kept) writes the same bytes for this API's data.
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def dumps(obj: Any) -> str:
    return _ENCODER.encode(obj)


def parse_json_body(content_type: str | None, body: bytes) -> Any:
    """The request body as JSON, with the 415 and 400 answers of aiorest's typed handlers.

    A body with no Content-Type is refused as another type is: a browser sends
    either cross-site without a CORS preflight.
    """
    media_type = (content_type or "").partition(";")[0].strip().lower()
    if media_type != JSON_TYPE and not media_type.endswith("+json") and (media_type or body):
        got = media_type or "no Content-Type"
        problem = {"location": "header.content-type", "message": f"expected application/json, got {got}"}
        raise ApiError(415, f"expected a JSON body (application/json), got {got}", details=[problem])
    if not body:
        raise _bad_body("request body is empty; expected JSON")
    try:
        return json.loads(body.decode("utf-8"))
    except ValueError as exc:  # UnicodeDecodeError is a ValueError
        raise _bad_body(f"request body is not valid JSON: {exc}") from None


def _bad_body(message: str) -> ApiError:
    return ApiError(400, message, details=[{"location": "body", "message": message}])


# -- the blocking pool -------------------------------------------------------------

Connection = psycopg2.extensions.connection
Cursor = psycopg2.extensions.cursor

_IDLE = psycopg2.extensions.TRANSACTION_STATUS_IDLE
_DISCONNECTS = (psycopg2.OperationalError, psycopg2.InterfaceError)
_RETRY = {"Retry-After": "1"}


class Pool:
    """``size`` psycopg2 connections, all opened at start, handed to threads first come first served.

    psycopg2's ThreadedConnectionPool closes connections above ``minconn`` and
    raises when empty instead of waiting, so under load it would connect per
    request or fail. Here a thread waits up to ``acquire_timeout`` seconds for a
    connection, then gets 503, as with aiorest.db.Database. queue.Queue wakes
    the longest waiter first, though a thread arriving at that moment may take
    the connection before it: near first come first served, like aiorest's.
    """

    def __init__(self, dsn: str, size: int, *, acquire_timeout: float = 5.0, statement_timeout: float = 30.0) -> None:
        self._dsn = dsn
        self._statement_timeout_ms = int(statement_timeout * 1000)
        self._acquire_timeout = acquire_timeout
        # None is a slot whose connection died: it is reopened by the next thread that takes it.
        self._free: queue.Queue[Connection | None] = queue.Queue()
        self._closed = False
        try:
            for _ in range(size):
                self._free.put(self._connect())
        except BaseException:
            self.close()
            raise

    def _connect(self) -> Connection:
        conn = psycopg2.connect(
            self._dsn,
            connect_timeout=5,
            application_name="baseline",
            options=f"-c statement_timeout={self._statement_timeout_ms}",
        )
        conn.autocommit = True  # as aiorest's connections: a statement is its own transaction
        return conn

    @contextmanager
    def cursor(self) -> Iterator[Cursor]:
        """A cursor on a connection held for the block; database failures become 503s."""
        conn = self._acquire()
        try:
            with conn.cursor() as cur:
                yield cur
        except psycopg2.errors.QueryCanceled as exc:  # before _DISCONNECTS: it is an OperationalError
            raise ApiError(503, "database statement timed out", headers=_RETRY) from exc
        except _DISCONNECTS as exc:
            raise ApiError(503, "database unavailable", headers=_RETRY) from exc
        finally:
            self._release(conn)

    def _acquire(self) -> Connection:
        if self._closed:
            raise ApiError(503, "the database pool is closed", headers=_RETRY)
        try:
            conn = self._free.get(timeout=self._acquire_timeout)
        except queue.Empty:
            raise ApiError(503, "database busy: no connection free in time", headers=_RETRY) from None
        if conn is not None and not conn.closed:
            return conn
        try:
            return self._connect()
        except _DISCONNECTS as exc:
            self._free.put(None)
            raise ApiError(503, "database unavailable", headers=_RETRY) from exc

    def _release(self, conn: Connection) -> None:
        if self._closed or conn.closed or conn.get_transaction_status() != _IDLE:
            conn.close()
            if not self._closed:
                self._free.put(None)
            return
        self._free.put(conn)

    def close(self) -> None:
        """Close the free connections; those in use close when released."""
        self._closed = True
        while True:
            try:
                conn = self._free.get_nowait()
            except queue.Empty:
                return
            if conn is not None:
                conn.close()

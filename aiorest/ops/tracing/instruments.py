"""Spans for what a request waits on: database statements, the pool's waits, the stores.

As OpenTelemetry's instrumentors do, the methods where that work happens are
wrapped while tracing is on, and given back as they were when it stops (the
last server tracing in the process stops): one place per kind, whatever code
calls it, and nothing at all when tracing is off.

- **Statements**: ``execute`` of both drivers' connections, the one method every
  statement of the pool, a transaction, a store or a migration goes through
  (db/driver.py). A CLIENT span named ``{db.operation.name} {db.namespace}`` with
  ``db.system.name`` (``postgresql``), ``db.operation.name`` (the statement's first
  keyword), ``db.query.text`` (the statement as written, with its placeholders:
  never the parameters), ``db.namespace`` (the database), ``server.address`` and
  ``server.port``; a failure sets ERROR and ``error.type``.
- **The pool's wait**: ``Pool.acquire`` when no connection is idle, which opens
  one or waits for one (``db.pool.acquire``); taking an idle one is not a span.
- **The stores**: ``load``/``save``/``delete`` of the session stores,
  ``begin``/``finish``/``release`` of the idempotency stores and
  ``hit``/``refund``/``reset`` of the rate-limit stores (``session.load``,
  ``idempotency.begin``, ``ratelimit.hit``...), on every store class defined when
  tracing starts (aiorest's and the application's subclasses), with
  ``aiorest.store`` naming the class.

Only the modules already imported are instrumented: an app without a database
does not import psycopg2 because tracing is on.
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable, Iterator
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

__all__ = ["install", "uninstall"]

_CLIENT = SpanKind.CLIENT
_INTERNAL = SpanKind.INTERNAL

# (module, class, how to reach a connection's psycopg2 connection): both drivers' connections run their
# statements through Preparing.execute
_CONNECTIONS: tuple[tuple[str, str, Callable[[Any], Any]], ...] = (
    ("aiorest.db.statements", "Preparing", lambda connection: connection.raw),
)
# (module, base class, span name prefix, the methods that reach the store)
_STORES = (
    ("aiorest.middleware.sessions.stores", "SessionStore", "session", ("load", "save", "delete")),
    ("aiorest.middleware.idempotency.stores", "IdempotencyStore", "idempotency", ("begin", "finish", "release")),
    ("aiorest.security.limits.stores", "LimitStore", "ratelimit", ("hit", "refund", "reset")),
)


class _Installed:
    """What is wrapped, while servers trace: the tracer, and each (owner, name, original) to give back."""

    tracer: trace.Tracer | None = None
    users = 0
    originals: list[tuple[type, str, Any]] = []


def install(tracer: trace.Tracer) -> None:
    """Wrap the methods (the first server to trace); later ones share the wrapping, with this tracer."""
    _Installed.tracer = tracer
    _Installed.users += 1
    if _Installed.users > 1:
        return
    for module_name, class_name, raw_of in _CONNECTIONS:
        module = sys.modules.get(module_name)
        if module is not None:
            _wrap(getattr(module, class_name), "execute", functools.partial(_traced_execute, raw_of=raw_of))
    pool = sys.modules.get("aiorest.db.pool")
    if pool is not None:
        _wrap(pool.Pool, "acquire", _traced_acquire)
    for module_name, base_name, prefix, methods in _STORES:
        module = sys.modules.get(module_name)
        if module is None:
            continue
        for cls in _family(getattr(module, base_name)):
            for method in methods:
                if inspect.iscoroutinefunction(cls.__dict__.get(method)):
                    _wrap(cls, method, functools.partial(_traced_store_call, span_name=f"{prefix}.{method}"))


def uninstall() -> None:
    """The last server to trace stops: give every method back."""
    _Installed.users = max(0, _Installed.users - 1)
    if _Installed.users:
        return
    while _Installed.originals:
        owner, name, original = _Installed.originals.pop()
        setattr(owner, name, original)
    _Installed.tracer = None


def _family(cls: type) -> Iterator[type]:
    yield cls
    sub: type
    for sub in cls.__subclasses__():
        yield from _family(sub)


def _wrap(owner: type, name: str, make: Callable[..., Any]) -> None:
    original = owner.__dict__[name]
    wrapper = functools.wraps(original)(make(original))
    _Installed.originals.append((owner, name, original))
    setattr(owner, name, wrapper)


def _tracer() -> trace.Tracer:
    tracer = _Installed.tracer
    assert tracer is not None, "instrumented methods are given back when tracing stops"
    return tracer


def _failed(span: trace.Span, exc: BaseException) -> None:
    span.record_exception(exc)
    span.set_attribute("error.type", type(exc).__qualname__)
    span.set_status(Status(StatusCode.ERROR))


# -- statements ---------------------------------------------------------------------------


def _traced_execute(original: Any, *, raw_of: Callable[[Any], Any]) -> Any:
    async def execute(self: Any, sql: str, params: Any = None, *, prepare: bool = True) -> Any:
        operation = _operation(sql)
        info = raw_of(self).info
        namespace = info.dbname
        with _tracer().start_as_current_span(
            f"{operation} {namespace}", kind=_CLIENT, record_exception=False, set_status_on_exception=False
        ) as span:
            if span.is_recording():
                span.set_attributes(
                    {
                        "db.system.name": "postgresql",
                        "db.operation.name": operation,
                        "db.query.text": sql,
                        "db.namespace": namespace,
                        "server.address": info.host,
                        "server.port": int(info.port),
                    }
                )
            try:
                return await original(self, sql, params, prepare=prepare)
            except BaseException as exc:
                _failed(span, exc)
                raise

    return execute


def _operation(sql: str) -> str:
    """The statement's first keyword, upper case (``SELECT``, ``INSERT``, ``BEGIN``...)."""
    words = sql.split(None, 1)
    return words[0].rstrip(";").upper() if words else ""


def _traced_acquire(original: Any) -> Any:
    async def acquire(self: Any, fresh: bool = False) -> Any:
        if self.idle and not fresh:  # taken at once: no wait to show
            return await original(self, fresh)
        with _tracer().start_as_current_span(
            "db.pool.acquire", kind=_INTERNAL, record_exception=False, set_status_on_exception=False
        ) as span:
            if span.is_recording():
                span.set_attributes(
                    {
                        "db.system.name": "postgresql",
                        "aiorest.db.pool.size": self.size,
                        "aiorest.db.pool.max_size": self.max_size,
                    }
                )
            try:
                return await original(self, fresh)
            except BaseException as exc:
                _failed(span, exc)
                raise

    return acquire


# -- stores -------------------------------------------------------------------------------


def _traced_store_call(original: Any, *, span_name: str) -> Any:
    async def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        with _tracer().start_as_current_span(
            span_name, kind=_INTERNAL, record_exception=False, set_status_on_exception=False
        ) as span:
            if span.is_recording():
                span.set_attribute("aiorest.store", type(self).__qualname__)
            try:
                return await original(self, *args, **kwargs)
            except BaseException as exc:
                _failed(span, exc)
                raise

    return call

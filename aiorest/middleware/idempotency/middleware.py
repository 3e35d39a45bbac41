"""Idempotency keys: a write retried with the same ``Idempotency-Key`` runs once and answers the same.

As the IETF draft "The Idempotency-Key HTTP Header Field"
(draft-ietf-httpapi-idempotency-key-header) and Stripe's API describe it: the
first request with a key runs and its answer is kept; a repeat gets that answer
again (with ``Idempotent-Replayed: true``), 409 while the first still runs, 422
when it is another request (method, path, body, preconditions). Documented in
:doc:`idempotency`.
"""

from __future__ import annotations

import hashlib
import inspect
import re
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, TypeVar

from ...http.exceptions import HTTPBadRequest, HTTPConflict, HTTPUnprocessableEntity
from ...http.response import Response, StreamResponse
from ...routing.metadata import is_idempotency_exempt, mark_idempotency_exempt
from .fingerprint import fingerprint as request_fingerprint
from .stores import IdempotencyStore, Stored

if TYPE_CHECKING:
    from ...http.request import Request
    from ...routing.route import Handler, Middleware, Route

__all__ = ["Idempotency", "KEPT_HEADERS", "REPLAYED_HEADER", "SECRET_HEADERS", "idempotency_exempt"]

#: The response headers kept with an answer and replayed: what describes the representation
#: and the resource, as the handler made them. Never ``Set-Cookie``: an answer that sets a
#: cookie is not kept at all (see :data:`~aiorest.middleware.idempotency.SECRET_HEADERS`).
KEPT_HEADERS = (
    "content-type",
    "content-encoding",
    "content-language",
    "location",
    "etag",
    "last-modified",
    "cache-control",
    "vary",
)
#: The header a replayed answer carries, as Stripe's does.
REPLAYED_HEADER = "Idempotent-Replayed"
#: An answer with one of these response headers carries a credential: it is never kept, so
#: that no store holds it and no replay hands it out again (the key is let go, the writes stand).
SECRET_HEADERS = frozenset({"set-cookie", "authentication-info", "proxy-authentication-info"})

# The draft makes the field an sf-string: a quoted string of printable ASCII. A bare token (what
# most clients send: a UUID) is accepted too. Neither may hold a quote or a backslash here.
_KEY_RE = re.compile(r'^"?([\x20\x21\x23-\x5b\x5d-\x7e]+)"?$')

Scope = Callable[["Request"], Awaitable[str | None] | str | None]
_F = TypeVar("_F", bound=Callable[..., object])


def idempotency_exempt(handler: _F) -> _F:
    """Never key this handler's routes: :class:`Idempotency` around them lets their requests through.

    Under the route decorator, as ``raises`` and ``login_required`` go: for a write whose
    answer must not be kept (it hands out a secret), or that is idempotent by itself.
    """
    return mark_idempotency_exempt(handler)


class _Pending:
    """One keyed request between the middleware's two places: what to replay, or what was kept."""

    __slots__ = ("fingerprint", "replay", "kept", "captured")

    def __init__(self, fingerprint: str, replay: Stored | None) -> None:
        self.fingerprint = fingerprint
        self.replay = replay
        self.kept: Stored | None = None
        self.captured = False


class Idempotency:
    """Middleware that runs a request with an ``Idempotency-Key`` at most once and replays its answer.

    Only ``methods`` (POST and PATCH) with the header are concerned; other requests
    pass through untouched, and the App chains it only on routes of those methods
    whose handler is not :func:`~aiorest.middleware.idempotency.idempotency_exempt`. The key is scoped by
    ``scope(request)`` — the user's id, say: the same key from another user is
    another key. ``scope`` returning None leaves the request alone (not
    deduplicated). A key is 1 to ``max_key_length`` printable ASCII characters,
    else 400. The request's fingerprint is the SHA-256 of its method, its route and
    resolved path parameters (``/notes/07`` is ``/notes/7``), its query, its body
    with its Content-Type and Content-Encoding (a multipart form: its fields and
    files, read as a form, whatever its boundary), and its precondition headers
    (``If-Match``...): the same key on another request is 422.

    A key is claimed in ``store`` before the handler runs, and the answer kept for
    ``ttl`` seconds after as the handler made it — before the middleware inside
    this one (compression, CORS, sessions) changed it; a replay goes through those
    middleware again, for the request at hand: compressed for its
    ``Accept-Encoding``, allowed for its ``Origin``. What is kept: status, the
    headers in ``kept_headers``, the body if at most ``max_body`` bytes (else an
    empty body, and no Content-Type). Answers of 500 and over, and exceptions, keep
    nothing: the key is let go and a retry runs again. Answers that carry a
    credential (:data:`~aiorest.middleware.idempotency.SECRET_HEADERS`, ``Set-Cookie`` among them) or say
    ``Cache-Control: no-store`` are not kept either: the key is let go, the writes
    stand. A claim whose request never finished (its process died) is free again
    after ``lease`` seconds, in the stores that cannot roll it back (memory,
    Redis); :class:`PostgresIdempotencyStore` commits the key with the handler's
    writes instead, and leaves nothing in flight.
    """

    def __init__(
        self,
        store: IdempotencyStore,
        *,
        scope: Scope | None = None,
        methods: Iterable[str] = ("POST", "PATCH"),
        ttl: float = 24 * 3600.0,
        lease: float = 30.0,
        max_key_length: int = 255,
        max_body: int = 64 * 1024,
        kept_headers: Iterable[str] = KEPT_HEADERS,
    ) -> None:
        if not ttl > 0 or not lease > 0:
            raise ValueError(f"ttl and lease are positive numbers of seconds, not {ttl!r} and {lease!r}")
        if max_key_length < 1 or max_body < 0:
            raise ValueError("max_key_length is at least 1 and max_body at least 0")
        self.store = store
        self.scope = scope
        self.methods = frozenset(method.upper() for method in methods)
        self.ttl = ttl
        self.lease = lease
        self.max_key_length = max_key_length
        self.max_body = max_body
        self.kept_headers = frozenset(name.lower() for name in kept_headers) - SECRET_HEADERS
        # The keyed requests between this middleware's two places (see for_route): as many as run.
        self._pending: dict[Request, _Pending] = {}

    def readiness_checks(self) -> dict[str, Callable[[], Awaitable[object]]]:
        """What ``/readyz`` checks for this middleware (the app collects it): its store, if it has a service."""
        ping = getattr(self.store, "ping", None)
        return {} if ping is None else {"idempotency store": ping}

    def for_route(self, route: Route) -> tuple[Middleware | None, Middleware | None]:
        """What the App chains on ``route``: this middleware in its place, and its part next to the handler.

        Nothing on a route of another method or an exempt handler: those pay nothing.
        """
        if route.method not in self.methods or is_idempotency_exempt(route.handler):
            return None, None
        return self._outer, self._inner

    async def __call__(self, request: Request, handler: Handler) -> Response:
        # Chained without a route (or called by hand): no part next to the handler; what it sees is kept.
        if request.method not in self.methods:
            return await handler(request)  # type: ignore[no-any-return]
        return await self._keyed(request, handler, inner=False)

    async def _outer(self, request: Request, handler: Handler) -> Response:
        return await self._keyed(request, handler, inner=True)

    async def _inner(self, request: Request, handler: Handler) -> Response:
        """Next to the handler: answer a replay in its stead, or keep its answer as it made it."""
        pending = self._pending.get(request)
        if pending is None:  # not keyed
            return await handler(request)  # type: ignore[no-any-return]
        if pending.replay is not None:
            return _replay(pending.replay)
        response = self._rendered(request, await handler(request))
        pending.captured = True
        pending.kept = self._stored(pending.fingerprint, response)
        return response

    async def _keyed(self, request: Request, handler: Handler, *, inner: bool) -> Response:
        values = request.header_values("idempotency-key")  # one scan; no Headers built
        if not values:
            return await handler(request)  # type: ignore[no-any-return]
        scope = "" if self.scope is None else self.scope(request)
        if inspect.isawaitable(scope):
            scope = await scope
        if scope is None:
            return await handler(request)  # type: ignore[no-any-return]
        key = self._key(values)
        fingerprint = await request_fingerprint(request)
        # Scoped by the scope alone, as Stripe's keys are by account: the same key on another
        # route is the same key, and its other fingerprint answers 422.
        scoped = hashlib.sha256(f"{scope}\0{key}".encode()).hexdigest()
        claim = await self.store.begin(scoped, fingerprint, self.lease)
        if claim.fingerprint is not None and claim.fingerprint != fingerprint:
            if claim.outcome == "started":  # not ours: begin never starts on another request
                raise AssertionError("a store started a claim with another fingerprint")
            raise HTTPUnprocessableEntity(
                "this Idempotency-Key was used with another request (method, path, query, body or preconditions)"
            )
        if claim.outcome == "in_flight":
            raise HTTPConflict("a request with this Idempotency-Key is still being processed; retry later")
        if claim.outcome == "done":
            assert claim.stored is not None
            if not inner:
                return _replay(claim.stored)
            # Through the middleware inside, as a handler's answer: compressed, CORS... for this request.
            self._pending[request] = _Pending(fingerprint, claim.stored)
            try:
                return await handler(request)  # type: ignore[no-any-return]
            finally:
                del self._pending[request]
        pending = _Pending(fingerprint, None)
        if inner:
            self._pending[request] = pending
        try:
            response: Response = await handler(request)
        except BaseException:  # an HTTPError too: PostgreSQL rolls the handler's writes back with the key
            await self.store.finish(scoped, claim, None, self.ttl)
            raise
        finally:
            if inner:
                del self._pending[request]
        if response.status >= 500:
            await self.store.finish(scoped, claim, None, self.ttl)
            return response
        if not pending.captured:  # no part next to the handler, or a middleware inside answered itself
            response = self._rendered(request, response)
            pending.kept = self._stored(fingerprint, response)
        if pending.kept is None or _secret(response):
            await self.store.release(scoped, claim)
        else:
            await self.store.finish(scoped, claim, pending.kept, self.ttl)
        return response

    @staticmethod
    def _rendered(request: Request, response: Response) -> Response:
        if isinstance(response, StreamResponse):
            return response
        return response.with_body(response.render(request.app.json))  # a JSONResponse is encoded here, once

    def _key(self, values: list[str]) -> str:
        if len(values) > 1:
            raise HTTPBadRequest("send one Idempotency-Key")
        match = _KEY_RE.match(values[0].strip())
        if match is None or values[0].strip().count('"') not in (0, 2) or len(match.group(1)) > self.max_key_length:
            raise HTTPBadRequest(
                f"Idempotency-Key is 1 to {self.max_key_length} printable ASCII characters,"
                " without quotes or backslashes inside, e.g. a UUID"
            )
        return match.group(1)

    def _stored(self, fingerprint: str, response: Response) -> Stored | None:
        """What is kept of ``response``; None when it may not be kept (it carries a secret)."""
        if _secret(response):
            return None
        body = b"" if isinstance(response, StreamResponse) else bytes(response.body)
        headers = [(name, value) for name, value in response.headers.items() if name.lower() in self.kept_headers]
        if len(body) > self.max_body or isinstance(response, StreamResponse):
            body = b""
        elif body or response.media_type != "application/octet-stream":
            headers.insert(0, ("content-type", response.media_type))
        return Stored(fingerprint, response.status, tuple(headers), body)


def _secret(response: Response) -> bool:
    """Whether ``response`` carries a credential, or asks that nobody store it."""
    headers = response.headers
    if any(name.lower() in SECRET_HEADERS for name in headers.keys()):
        return True
    return any("no-store" in value.lower() for value in headers.getall("cache-control"))


def _replay(stored: Stored) -> Response:
    media_type = None
    headers = [(REPLAYED_HEADER, "true")]
    for name, value in stored.headers:
        if name == "content-type":
            media_type = value
        else:
            headers.append((name, value))
    response = Response(stored.body, stored.status, media_type=media_type)
    for name, value in headers:
        response.headers.add(name, value)
    return response

"""Idempotency keys: a write retried with the same ``Idempotency-Key`` runs once and answers the same.

As the IETF draft "The Idempotency-Key HTTP Header Field"
(draft-ietf-httpapi-idempotency-key-header) and Stripe's API describe it: the
first request with a key runs and its answer is kept; a repeat gets that answer
again (with ``Idempotent-Replayed: true``), 409 while the first still runs, 422
when its body differs. Documented in :doc:`idempotency`.
"""

from __future__ import annotations

import hashlib
import inspect
import re
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING

from ...http.exceptions import HTTPBadRequest, HTTPConflict, HTTPUnprocessableEntity
from ...http.response import Response, StreamResponse
from .stores import IdempotencyStore, Stored

if TYPE_CHECKING:
    from ...http.request import Request
    from ...routing.route import Handler

__all__ = ["Idempotency", "KEPT_HEADERS", "REPLAYED_HEADER"]

#: The response headers kept with an answer and replayed (never ``Set-Cookie``: a replay logs nobody in).
KEPT_HEADERS = ("content-type", "content-language", "location", "etag", "last-modified", "cache-control", "vary")
#: The header a replayed answer carries, as Stripe's does.
REPLAYED_HEADER = "Idempotent-Replayed"

# The draft makes the field an sf-string: a quoted string of printable ASCII. A bare token (what
# most clients send: a UUID) is accepted too. Neither may hold a quote or a backslash here.
_KEY_RE = re.compile(r'^"?([\x20\x21\x23-\x5b\x5d-\x7e]+)"?$')

Scope = Callable[["Request"], Awaitable[str | None] | str | None]


class Idempotency:
    """Middleware that runs a request with an ``Idempotency-Key`` at most once and replays its answer.

    Only ``methods`` (POST and PATCH) with the header are concerned; other requests
    pass through untouched. The key is scoped by ``scope(request)`` — the user's
    id, say — and by the method and path: the same key from another user or for
    another resource is another key. ``scope`` returning None leaves the request
    alone (not deduplicated). A key is 1 to ``max_key_length`` printable ASCII
    characters, else 400. The body's SHA-256 is the request's fingerprint.

    A key is claimed in ``store`` before the handler runs, and the answer kept
    for ``ttl`` seconds after: status, the headers in ``kept_headers``, the body
    if at most ``max_body`` bytes (else an empty body, and no Content-Type).
    Answers of 500 and over, and exceptions, keep nothing: the key is let go and
    a retry runs again. A claim whose request never finished (its process died)
    is free again after ``lease`` seconds, in the stores that cannot roll it back
    (memory, Redis); :class:`PostgresIdempotencyStore` commits the key with the
    handler's writes instead, and leaves nothing in flight.
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
        self.kept_headers = frozenset(name.lower() for name in kept_headers)

    async def __call__(self, request: Request, handler: Handler) -> Response:
        if request.method not in self.methods:
            return await handler(request)  # type: ignore[no-any-return]
        values = request.header_values("idempotency-key")  # one scan; no Headers built
        if not values:
            return await handler(request)  # type: ignore[no-any-return]
        scope = "" if self.scope is None else self.scope(request)
        if inspect.isawaitable(scope):
            scope = await scope
        if scope is None:
            return await handler(request)  # type: ignore[no-any-return]
        key = self._key(values)
        fingerprint = hashlib.sha256(await request.read()).hexdigest()
        scoped = hashlib.sha256(f"{scope}\0{request.method}\0{request.path}\0{key}".encode()).hexdigest()
        claim = await self.store.begin(scoped, fingerprint, self.lease)
        if claim.fingerprint is not None and claim.fingerprint != fingerprint:
            if claim.outcome == "started":  # not ours: begin never starts on another body
                raise AssertionError("a store started a claim with another fingerprint")
            raise HTTPUnprocessableEntity("this Idempotency-Key was used with another request body")
        if claim.outcome == "in_flight":
            raise HTTPConflict("a request with this Idempotency-Key is still being processed; retry later")
        if claim.outcome == "done":
            assert claim.stored is not None
            return _replay(claim.stored)
        try:
            response: Response = await handler(request)
        except BaseException:  # an HTTPError too: PostgreSQL rolls the handler's writes back with the key
            await self.store.finish(scoped, claim, None, self.ttl)
            raise
        if response.status >= 500:
            await self.store.finish(scoped, claim, None, self.ttl)
        else:
            if not isinstance(response, StreamResponse):  # a JSONResponse is encoded here, once
                response = response.with_body(response.render(request.app.json))
            await self.store.finish(scoped, claim, self._stored(fingerprint, response), self.ttl)
        return response

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

    def _stored(self, fingerprint: str, response: Response) -> Stored:
        body = b"" if isinstance(response, StreamResponse) else bytes(response.body)
        headers = [(name, value) for name, value in response.headers.items() if name.lower() in self.kept_headers]
        if len(body) > self.max_body or isinstance(response, StreamResponse):
            body = b""
        elif body or response.media_type != "application/octet-stream":
            headers.insert(0, ("content-type", response.media_type))
        return Stored(fingerprint, response.status, tuple(headers), body)


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

"""Conditional requests (RFC 9110, 13): entity-tags, 304 Not Modified and 412 Precondition Failed.

A handler states what the client's copy is compared with: an ``ETag`` (and a
``Last-Modified``) on its response, which the server compares with
``If-None-Match``/``If-Modified-Since`` of a GET or HEAD once the handler has
answered (:func:`answer_conditional`), or the same validators given to
:func:`check_preconditions` before the handler does its work, the way a write
checks ``If-Match`` before it changes anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Literal

from .exceptions import HTTPBadRequest, HTTPError, HTTPPreconditionFailed
from .files import FileResponse
from .response import Response, error_response
from .validators import ETag, check_etag, format_http_date, parse_etags, parse_http_date

if TYPE_CHECKING:
    from .request import Request

__all__ = ["HTTPNotModified", "check_preconditions", "answer_conditional"]


class HTTPNotModified(HTTPError):
    """304 Not Modified: the client's copy is current; sent without a body.

    Raised by :func:`check_preconditions` for a GET or HEAD whose ``If-None-Match``
    (or ``If-Modified-Since``) the validators given satisfy; its ``headers`` are
    those a 304 carries (RFC 9110, 15.4.5): the ``ETag``, ``Last-Modified``, and
    any given, such as ``Cache-Control`` and ``Vary``.
    """

    status = 304

    def __init__(self, *, headers: Mapping[str, str] | None = None) -> None:
        # HTTPError takes only 4xx and 5xx, the errors; this is the one answer of
        # another class that a handler raises, so that it can stop before its work.
        Exception.__init__(self, "Not Modified")
        self.message = "Not Modified"
        self.details = None
        self.headers = headers or {}


def _field(request: Request, name: str) -> list[ETag] | Literal["*"] | None:
    values = request.headers.getall(name)
    if not values:
        return None
    try:
        return parse_etags(", ".join(values))
    except ValueError as exc:
        raise HTTPBadRequest(f"{name}: {exc}") from None


def _date(request: Request, name: str) -> datetime | None:
    """The date of header ``name``; None without one, or with one that is not a date (RFC 9110 13.1.3-4: ignored)."""
    value = request.headers.get(name)
    if value is None:
        return None
    try:
        return parse_http_date(value, name)
    except ValueError:
        return None


def _matches(tags: list[ETag] | Literal["*"], etag: ETag | None, *, weak: bool) -> bool:
    """Whether a field's ``tags`` match the current ``etag``: weak or strong comparison (RFC 9110, 8.8.3.2)."""
    if tags == "*":
        return True  # the representation exists: the caller asked about it
    if etag is None or (etag.weak and not weak):
        return False
    return any(tag.tag == etag.tag and (weak or not tag.weak) for tag in tags)


def _moment(last_modified: datetime | float | None) -> datetime | None:
    if last_modified is None or isinstance(last_modified, datetime):
        if last_modified is not None and last_modified.utcoffset() is None:
            raise ValueError("last_modified has no time zone; give it one, as datetime.now(UTC) has")
        moment = last_modified
    else:
        moment = datetime.fromtimestamp(last_modified, UTC)
    # HTTP dates have whole seconds: a resource changed 0.5 s after the date sent is not newer.
    return None if moment is None else moment.replace(microsecond=0)


def evaluate(request: Request, etag: ETag | None, last_modified: datetime | None) -> Literal[200, 304, 412]:
    """The answer RFC 9110, 13.2.2 gives ``request`` for a representation with these validators.

    200: go on and answer; 304: not modified (GET and HEAD only); 412: a precondition failed.
    """
    method = request.method
    safe = method == "GET" or method == "HEAD"
    if_match = _field(request, "If-Match")
    if if_match is not None:  # step 1, strong comparison
        if not _matches(if_match, etag, weak=False):
            return 412
    else:  # step 2, If-Unmodified-Since counts only without If-Match
        since = _date(request, "If-Unmodified-Since") if last_modified is not None else None
        if since is not None and last_modified is not None and last_modified > since:
            return 412
    if_none_match = _field(request, "If-None-Match")
    if if_none_match is not None:  # step 3, weak comparison
        if _matches(if_none_match, etag, weak=True):
            return 304 if safe else 412
    elif safe and last_modified is not None:  # step 4, If-Modified-Since only without If-None-Match
        since = _date(request, "If-Modified-Since")
        if since is not None and last_modified <= since:
            return 304
    return 200


def check_preconditions(
    request: Request,
    *,
    etag: str | ETag | None = None,
    last_modified: datetime | float | None = None,
    headers: Mapping[str, str] | None = None,
) -> None:
    """Check the request's conditional headers against the current validators, before the work is done.

    ``etag`` is the current representation's entity-tag (as sent, ``'"3"'``, or an
    :class:`ETag`); ``last_modified`` its modification time (an aware datetime or
    a Unix timestamp). Raises :class:`HTTPPreconditionFailed` (412) when ``If-Match``
    or ``If-Unmodified-Since`` fails, or ``If-None-Match`` matches on a write;
    :class:`HTTPNotModified` (304, with the validators and ``headers``) when a GET
    or HEAD's client copy is current; :class:`HTTPBadRequest` for an entity-tag
    list that does not parse. Returns when the handler should go on.
    """
    current = check_etag(etag) if isinstance(etag, str) else etag
    moment = _moment(last_modified)
    answer = evaluate(request, current, moment)
    if answer == 412:
        raise HTTPPreconditionFailed("a precondition of the request failed")
    if answer == 304:
        raise HTTPNotModified(headers=_not_modified_headers(current, moment, headers))


def _not_modified_headers(
    etag: ETag | None, last_modified: datetime | None, headers: Mapping[str, str] | None
) -> dict[str, str]:
    kept = dict(headers or {})
    if etag is not None:
        kept["ETag"] = str(etag)
    if last_modified is not None:
        kept["Last-Modified"] = format_http_date(last_modified)
    return kept


# Representation metadata a 304 does not repeat (RFC 9110, 15.4.5): it describes a body not sent.
_BODY_FIELDS = ("Content-Type", "Content-Encoding", "Content-Language", "Content-Length", "Content-Range")


def answered_as_sent(request: Request, response: Response) -> Response:
    """What the server sends for a handler's ``response``: the 304 or 412 of :func:`answer_conditional`
    for a 2xx to a GET or HEAD with headers of its own, else ``response`` itself.

    A :class:`~aiorest.FileResponse` is left alone: it answers its own validators once it
    has stat'ed its file. The server (driving.py) and the metrics (which count what is
    sent) decide alike through this one function.
    """
    # (answer_conditional reads the validators with response.header(), which makes no headers table)
    if 200 <= response.status < 300 and request.method in ("GET", "HEAD") and not isinstance(response, FileResponse):
        return answer_conditional(request, response)
    return response


def answer_conditional(request: Request, response: Response) -> Response:
    """``response`` (a 2xx to a GET or HEAD), or the 304 or 412 its validators and the request's headers call for.

    A response without an ``ETag`` or ``Last-Modified`` has nothing to compare: it is
    given back as it is.
    """
    etag_value = response.header("ETag")
    modified_value = response.header("Last-Modified")
    if etag_value is None and modified_value is None:
        return response
    headers = request.headers
    if not any(name in headers for name in _CONDITIONAL_FIELDS):
        return response
    etag = None if etag_value is None else check_etag(etag_value)  # checked when set: it parses
    moment = None if modified_value is None else parse_http_date(modified_value, "Last-Modified")
    try:
        answer = evaluate(request, etag, moment)
    except HTTPBadRequest as exc:
        return error_response(exc)
    if answer == 412:
        return error_response(HTTPPreconditionFailed("a precondition of the request failed"))
    if answer == 304:
        not_modified = Response(b"", 304)
        not_modified.headers.extend(response.headers)
        not_modified.headers.discard(_BODY_FIELDS)
        return not_modified
    return response


_CONDITIONAL_FIELDS = ("If-None-Match", "If-Modified-Since", "If-Match", "If-Unmodified-Since")

"""Broken bytes: what llhttp's errors and our limits mean, and how the connection answers them.

A parser callback that finds a head or a body it cannot take raises ParseAbort (answer an
error, then close) or StopParsing (read nothing more); llhttp wraps either in an
HttpParserCallbackError, which ``parse_failure`` reads back beside llhttp's own errors.
BrokenBytes acts on what it means, through the state machine's methods (``Stopping``): the
reading stops, and the error is answered after what is queued, by a stand-in request.
"""

from __future__ import annotations

import logging
from typing import Protocol

import httptools

from ...http.exceptions import HTTPBadRequest, HTTPError
from ...http.request import AppInterface, BodySource, Request

__all__ = ["BrokenBytes", "ParseAbort", "StopParsing", "Stopping", "is_head", "parse_failure", "broken_request"]

logger = logging.getLogger("aiorest.error")


class ParseAbort(Exception):
    """Raised in a parser callback: answer ``error`` and close."""

    def __init__(self, error: HTTPError) -> None:
        self.error = error


class StopParsing(Exception):
    """Raised in a parser callback: the request is queued; read nothing more."""


class Stopping(Protocol):
    """What BrokenBytes needs of the state machine (H1Connection)."""

    def stop_reading(self) -> None: ...
    def upgrade_asked(self, rest: bytes | memoryview) -> None: ...
    def answer_broken(self, request: Request, error: HTTPError) -> None: ...


class EndingBody(Protocol):
    """The body arriving, as BrokenBytes ends it (BodyIntake)."""

    def complete(self, error: BaseException | None = None) -> Request | None: ...


class BrokenBytes:
    """What to do when the bytes on the wire are broken, or a limit is crossed while parsing them."""

    __slots__ = ("_conn", "_parser", "_body", "_app", "_body_source")

    def __init__(
        self,
        conn: Stopping,
        parser: httptools.HttpRequestParser,
        body: EndingBody,
        app: AppInterface,
        body_source: BodySource | None,
    ) -> None:
        self._conn = conn
        self._parser = parser
        self._body = body
        self._app = app
        self._body_source = body_source  # the stand-in requests' (they have no body to pull)

    def parse_error(self, exc: Exception) -> None:
        """llhttp's ``feed_data`` raised ``exc``."""
        error, method_known = parse_failure(exc)
        if error is not None:
            self.abort(error, method_known)
        elif isinstance(exc, httptools.HttpParserUpgrade):
            self._conn.upgrade_asked(b"")  # inside a body: refused (see upgrade_refused)
        else:
            self._conn.stop_reading()

    def abort(self, error: HTTPError, method_known: bool = True) -> None:
        """Answer ``error`` after what is queued, then close."""
        self._conn.stop_reading()
        if self._body.complete(error) is not None:
            # A handler reading this body gets the error; one that answered already: the connection closes.
            return
        method = "HEAD" if is_head(self._parser, method_known) else "GET"
        self._conn.answer_broken(broken_request(method, self._app, self._body_source), error)


def parse_failure(exc: Exception) -> tuple[HTTPError | None, bool]:
    """What llhttp's ``exc`` means: the error to answer before closing (None: stop reading, answer
    what is queued), and whether the parser got as far as the method of the head it failed in."""
    if isinstance(exc, httptools.HttpParserCallbackError):
        cause = exc.__context__
        if isinstance(cause, StopParsing):
            return None, True
        if isinstance(cause, ParseAbort):
            return cause.error, True
        logger.error("parser callback failed", exc_info=cause)
        return HTTPBadRequest("malformed request"), True
    if isinstance(exc, httptools.HttpParserUpgrade):
        return None, True
    # Before its method is complete, the parser still reports the previous request's.
    return HTTPBadRequest(f"malformed request: {exc}"), not isinstance(exc, httptools.HttpParserInvalidMethodError)


def is_head(parser: httptools.HttpRequestParser, method_known: bool) -> bool:
    """Whether the head being parsed is a HEAD request's, as far as the parser got."""
    return method_known and parser.get_method() == b"HEAD"


def broken_request(method: str, app: AppInterface, body_source: BodySource | None) -> Request:
    """A stand-in for a request whose head could not be parsed, to answer an error for and close.

    A HEAD keeps its method when the parser got that far, so that its answer has
    no body: the client would read the body as the start of the next response.
    """
    request = Request(method, "", b"", "", "1.1", [], app, body_source, keep_alive=False)
    request.end_body()
    return request

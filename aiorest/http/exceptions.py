"""HTTP errors as exceptions, rendered as JSON of one shape.

Every error response body is::

    {"error": {"status": 404, "message": "Not Found", "details": null}}

``details`` is whatever JSON-serialisable value the raiser attached (a list of
field errors, say), or ``null``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from http import HTTPStatus
from typing import Any

from .datastructures import _TCHAR, _check_header

__all__ = [
    "HTTPError",
    "HTTPBadRequest",
    "HTTPUnauthorized",
    "HTTPForbidden",
    "HTTPNotFound",
    "HTTPMethodNotAllowed",
    "HTTPNotAcceptable",
    "HTTPRequestTimeout",
    "HTTPConflict",
    "HTTPGone",
    "HTTPLengthRequired",
    "HTTPPreconditionFailed",
    "HTTPPayloadTooLarge",
    "HTTPURITooLong",
    "HTTPUnsupportedMediaType",
    "HTTPUnprocessableEntity",
    "HTTPTooManyRequests",
    "HTTPRequestHeaderFieldsTooLarge",
    "HTTPInternalServerError",
    "HTTPNotImplemented",
    "HTTPBadGateway",
    "HTTPServiceUnavailable",
    "HTTPGatewayTimeout",
    "HTTPVersionNotSupported",
    "ClientDisconnected",
]

#: The ``message`` of a 422 answer that lists the request's problems in ``details``
#: (typed handlers' validation, a NUL character the database refuses).
VALIDATION_MESSAGE = "the request is not valid"


class HTTPError(Exception):
    """An error that becomes an HTTP response with a JSON body.

    Raise a subclass (``HTTPNotFound``) or this class with any 4xx/5xx status.
    ``headers`` are added to the response (``Retry-After``, ``WWW-Authenticate``);
    each is checked when set, here or later, as ``Headers`` checks them.
    """

    status: int = 500

    def __init__(
        self,
        message: str | None = None,
        *,
        status: int | None = None,
        details: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        if status is not None:
            self.status = status
        if not isinstance(self.status, int) or isinstance(self.status, bool):
            raise TypeError(f"HTTPError status must be an int, not {type(self.status).__name__}")
        if not 400 <= self.status <= 599:
            raise ValueError(f"HTTPError status must be 4xx or 5xx, got {self.status}")
        self.status = int(self.status)  # HTTPStatus.CONFLICT is 409
        if message is None:
            try:
                message = HTTPStatus(self.status).phrase
            except ValueError:
                message = f"HTTP error {self.status}"
        super().__init__(message)
        self.message = message
        self.details = details
        self.headers = headers or {}

    @property
    def headers(self) -> MutableMapping[str, str]:
        """Headers of the error's response; each is checked when set, assigned anew or added."""
        return self._headers

    @headers.setter
    def headers(self, headers: Mapping[str, str]) -> None:
        self._headers: MutableMapping[str, str] = _CheckedHeaders(headers)

    def to_dict(self) -> dict[str, Any]:
        """The JSON body of this error."""
        return {"error": {"status": self.status, "message": self.message, "details": self.details}}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(status={self.status}, message={self.message!r})"


class _CheckedHeaders(MutableMapping[str, str]):
    """``HTTPError.headers``: a dict-like mapping that refuses an invalid header when it is set."""

    def __init__(self, headers: Mapping[str, str] | None = None) -> None:
        self._headers: dict[str, str] = {}
        if headers:
            self.update(headers)

    def __setitem__(self, name: str, value: str) -> None:
        _check_header(name, value)  # update() and setdefault() come through here too
        lname = name.lower()
        for other in [key for key in self._headers if key.lower() == lname and key != name]:
            del self._headers[other]  # one value a name, whatever its case: Retry-After is retry-after
        self._headers[name] = value

    def __getitem__(self, name: str) -> str:
        return self._headers[name]

    def __delitem__(self, name: str) -> None:
        del self._headers[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._headers)

    def __len__(self) -> int:
        return len(self._headers)

    def __repr__(self) -> str:
        return repr(self._headers)


class HTTPBadRequest(HTTPError):
    status = 400


class HTTPUnauthorized(HTTPError):
    status = 401


class HTTPForbidden(HTTPError):
    status = 403


class HTTPNotFound(HTTPError):
    status = 404


class HTTPMethodNotAllowed(HTTPError):
    """405; ``allowed`` (method names, or one as a string) becomes the ``Allow`` header."""

    status = 405

    def __init__(self, allowed: Iterable[str] | str, message: str | None = None, **kwargs: Any) -> None:
        if isinstance(allowed, str):
            allowed = (allowed,)  # one method, not its letters
        elif isinstance(allowed, (bytes, bytearray, memoryview)):
            raise TypeError("HTTPMethodNotAllowed takes method names as str, not bytes")
        methods = set(allowed)
        for method in methods:
            if not isinstance(method, str):
                raise TypeError(f"HTTPMethodNotAllowed takes method names as str, got {method!r}")
            if not method or not _TCHAR.issuperset(method):
                raise ValueError(f"{method!r} is not a method name (RFC 9110, 9.1: a token)")
        super().__init__(message, **kwargs)
        self.allowed = sorted(methods)
        self.headers["Allow"] = ", ".join(self.allowed)


class HTTPNotAcceptable(HTTPError):
    status = 406


class HTTPRequestTimeout(HTTPError):
    status = 408


class HTTPConflict(HTTPError):
    status = 409


class HTTPGone(HTTPError):
    status = 410


class HTTPLengthRequired(HTTPError):
    status = 411


class HTTPPreconditionFailed(HTTPError):
    status = 412


class HTTPPayloadTooLarge(HTTPError):
    status = 413


class HTTPURITooLong(HTTPError):
    status = 414


class HTTPUnsupportedMediaType(HTTPError):
    status = 415


class HTTPUnprocessableEntity(HTTPError):
    status = 422


class _RetryAfter(HTTPError):
    def __init__(self, message: str | None = None, *, retry_after: int | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        if retry_after is not None:
            self.headers["Retry-After"] = str(int(retry_after))


class HTTPTooManyRequests(_RetryAfter):
    """429; ``retry_after`` (seconds) becomes the ``Retry-After`` header."""

    status = 429


class HTTPRequestHeaderFieldsTooLarge(HTTPError):
    status = 431


class HTTPInternalServerError(HTTPError):
    status = 500


class HTTPNotImplemented(HTTPError):
    status = 501


class HTTPBadGateway(HTTPError):
    status = 502


class HTTPServiceUnavailable(_RetryAfter):
    """503; ``retry_after`` (seconds) becomes the ``Retry-After`` header."""

    status = 503


class HTTPGatewayTimeout(HTTPError):
    status = 504


class HTTPVersionNotSupported(HTTPError):
    status = 505


class ClientDisconnected(ConnectionError):
    """The client went away while the request body was read or the response written."""

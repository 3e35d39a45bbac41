"""Responses: bytes or text, JSON, and streamed (chunked) bodies."""

from __future__ import annotations

from collections.abc import AsyncIterable, Mapping, MutableMapping
from datetime import datetime
from typing import Any

from .cookies import SameSite, format_set_cookie
from .datastructures import Headers, check_header_value
from .exceptions import HTTPError
from .jsoncodec import JSONCodec

__all__ = ["Response", "JSONResponse", "StreamResponse", "add_vary", "to_response", "error_response"]


class Response:
    """A response with a body held in memory.

    ``body`` may be bytes or str (encoded as UTF-8). Without ``media_type``, str is
    sent as ``text/plain`` and bytes as ``application/octet-stream``; a ``text/*``
    type gets ``; charset=utf-8`` unless it names a charset. ``Content-Length`` is
    always computed by the server; do not set it yourself.

    ``status`` (an int from 200 to 599) and ``media_type`` are checked when set,
    in the constructor or later, so that nothing a handler sets can inject a header.
    """

    # The server reads _status and _media_type directly: checked when set, not when sent.
    __slots__ = ("_status", "body", "_media_type", "_headers")

    def __init__(
        self,
        body: bytes | str = b"",
        status: int = 200,
        headers: Mapping[str, str] | None = None,
        media_type: str | None = None,
    ) -> None:
        if type(body) is not bytes:
            if isinstance(body, str):
                body = body.encode()
                if media_type is None:
                    media_type = "text/plain"
            elif not isinstance(body, (bytes, bytearray, memoryview)):
                raise TypeError(
                    f"Response body must be bytes or str, not {type(body).__name__}; use JSONResponse for data"
                )
        self._status = status if type(status) is int and 200 <= status <= 599 else _checked_status(status)
        self.body: bytes | bytearray | memoryview = body
        if media_type is None:
            media_type = "application/octet-stream"
        self._media_type = _MEDIA_TYPES.get(media_type) or _with_charset(media_type)
        self._headers = Headers(headers) if headers else None

    # status and media_type have no docstring: docs/api.rst describes them as attributes.
    @property
    def status(self) -> int:
        return self._status

    @status.setter
    def status(self, status: int) -> None:
        self._status = status if type(status) is int and 200 <= status <= 599 else _checked_status(status)

    @property
    def media_type(self) -> str:
        return self._media_type

    @media_type.setter
    def media_type(self, media_type: str) -> None:
        self._media_type = _MEDIA_TYPES.get(media_type) or _with_charset(media_type)

    @property
    def headers(self) -> Headers:
        """Extra response headers (case-insensitive, multi-valued)."""
        if self._headers is None:
            self._headers = Headers()
        return self._headers

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (any case), None when absent; an answer with
        no extra header pays for no :attr:`headers` table."""
        return None if self._headers is None else self._headers.get(name)

    def render(self, codec: JSONCodec) -> bytes | bytearray | memoryview:
        """The body bytes; JSON responses encode with the app's codec here."""
        return self.body

    def with_body(self, body: bytes | bytearray | memoryview) -> Response:
        """This response sending ``body`` (already rendered) instead: a plain :class:`Response`
        with the same status, media type and headers; a plain one is changed in place."""
        if type(self) is Response:
            self.body = body
            return self
        plain = Response(b"", self._status)
        plain.body = body
        plain._media_type = self._media_type
        plain._headers = self._headers
        return plain

    def set_cookie(
        self,
        key: str,
        value: str = "",
        *,
        max_age: int | None = None,
        expires: datetime | float | str | None = None,
        path: str | None = "/",
        domain: str | None = None,
        secure: bool = False,
        httponly: bool = False,
        samesite: SameSite | None = "lax",
    ) -> None:
        """Add a ``Set-Cookie`` header; an invalid name, value or attribute raises ValueError.

        ``expires`` is an aware datetime, a Unix timestamp or an HTTP date
        (``"Wed, 21 Oct 2037 07:28:00 GMT"``, or one of its two obsolete forms);
        it is sent as an IMF-fixdate, the first of these forms.
        """
        self.headers.add(
            "Set-Cookie",
            format_set_cookie(
                key,
                value,
                max_age=max_age,
                expires=expires,
                path=path,
                domain=domain,
                secure=secure,
                httponly=httponly,
                samesite=samesite,
            ),
        )

    def delete_cookie(
        self,
        key: str,
        *,
        path: str | None = "/",
        domain: str | None = None,
        secure: bool = False,
        httponly: bool = False,
        samesite: SameSite | None = "lax",
    ) -> None:
        """Tell the client to drop a cookie (empty value, ``Max-Age=0``, expired)."""
        self.set_cookie(
            key,
            "",
            max_age=0,
            expires=0,
            path=path,
            domain=domain,
            secure=secure,
            httponly=httponly,
            samesite=samesite,
        )

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.status} {self.media_type}>"


#: The fields of a response the server writes itself (a handler's Content-Type replaces the media type)
SERVER_WRITTEN = frozenset({"content-type", "content-length", "transfer-encoding", "x-request-id"})
# ... and those it also compares with the request's (a 304 or 412): a JSONResponse with one is no plain answer
_SERVER_FIELDS = SERVER_WRITTEN | {"etag", "last-modified"}


class JSONResponse(Response):
    """``data`` serialised with the app's JSON codec when the response is sent."""

    __slots__ = ("data",)

    def __init__(self, data: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> None:
        self._status = status if type(status) is int and 200 <= status <= 599 else _checked_status(status)
        self.data = data
        self.body = b""
        self._media_type = "application/json"
        self._headers = Headers(headers) if headers else None

    def render(self, codec: JSONCodec) -> bytes:
        return codec.dumps(self.data)

    def plain_answer(self) -> tuple[dict[Any, Any] | list[Any], bytes] | None:
        """:attr:`data` and the head lines of this response's own fields, when the server can send it as it
        sends a handler's dict: a 200 of a dict or a list, with no field the server writes or compares itself
        (``Content-Type``, ``Content-Length``, ``Transfer-Encoding``, ``X-Request-ID``, ``ETag``,
        ``Last-Modified``); else None. The usual answer under a middleware that adds a ``Vary`` or CORS fields."""
        data = self.data
        if self._status != 200 or (type(data) is not dict and type(data) is not list):
            return None
        if self._headers is None:
            return data, b""
        lines = self._headers.field_lines_unless(_SERVER_FIELDS)
        return None if lines is None else (data, lines.encode("latin-1"))


class StreamResponse(Response):
    """A body sent as it is produced, with chunked transfer encoding.

    ``content`` is an async iterable of bytes or str (an async generator, say).
    The server pulls the next chunk only once the previous one has been handed
    to the socket without exceeding its write buffer, so a producer never runs
    ahead of a slow client.
    """

    __slots__ = ("content",)

    def __init__(
        self,
        content: AsyncIterable[bytes | str],
        status: int = 200,
        headers: Mapping[str, str] | None = None,
        media_type: str | None = "application/octet-stream",
    ) -> None:
        if not hasattr(content, "__aiter__"):
            raise TypeError("StreamResponse content must be an async iterable of bytes or str")
        super().__init__(b"", status, headers, media_type)
        self.content = content


def _checked_status(status: object) -> int:
    """``status`` as a plain int; anything but an int from 200 to 599 is refused.

    A 1xx is an interim answer, followed by the real one: as a handler's response
    its body would be read as the next response's head. The server sends its
    own ``100 Continue`` when a handler reads the body.
    """
    # An IntEnum such as HTTPStatus.CREATED is welcome; True is not a status.
    if not isinstance(status, int) or isinstance(status, bool):
        raise TypeError(f"status must be an int from 200 to 599, not {type(status).__name__}")
    if not 200 <= status <= 599:
        raise ValueError(f"status must be from 200 to 599 (a 1xx is not a final response), got {status}")
    return int(status)


# media type as given -> as sent; only checked types are kept
_MEDIA_TYPES: dict[str, str] = {}


def _with_charset(media_type: str) -> str:
    # Cached: a handler builds a Response per request with the same few types.
    full = _MEDIA_TYPES.get(media_type)
    if full is None:
        check_header_value(media_type, "media type")
        if not media_type:
            raise ValueError("media type is empty; leave it out for the default")
        full = media_type
        if media_type.startswith("text/") and "charset" not in media_type:
            full = media_type + "; charset=utf-8"
        if len(_MEDIA_TYPES) < 256:  # bounded: the types come from user code
            _MEDIA_TYPES[media_type] = full
    return full


def to_response(result: Any) -> Response:
    """What a handler returned, as a Response: dict/list → JSON 200, None → 204."""
    if isinstance(result, Response):
        return result
    if isinstance(result, (dict, list)):
        return JSONResponse(result)
    if result is None:
        return Response(status=204)
    raise TypeError(f"a handler returned {type(result).__name__}; return a dict, a list, a Response or None")


def response_status(result: Any) -> int:
    """The status of the response :func:`to_response` makes of ``result`` (500: it raises for that result)."""
    if isinstance(result, dict):  # the usual answer first
        return 200
    if isinstance(result, Response):
        return result.status
    if isinstance(result, list):
        return 200
    return 204 if result is None else 500


def error_response(exc: HTTPError) -> JSONResponse:
    """The JSON response for an HTTPError."""
    return JSONResponse(exc.to_dict(), status=exc.status, headers=exc.headers or None)


def add_vary(headers: Headers | MutableMapping[str, str], *names: str) -> None:
    """Add ``names`` to the ``Vary`` of a response's ``headers`` (or an :class:`HTTPError`'s).

    Every writer of ``Vary`` goes through here, so that none drops another's
    tokens whatever their order: the field names already there are kept (from
    every ``Vary`` field, in their order), a name is added only if it is not
    there in any case, and the result is one ``Vary`` field. ``*`` (the answer
    varies on more than headers) absorbs everything: it stays ``*`` alone.
    """
    if isinstance(headers, Headers):
        values = headers.getall("Vary")
        if not values and len(names) == 1 and names[0] and names[0] != "*":  # the usual case: the first Vary
            headers.add("Vary", names[0])
            return
    else:  # HTTPError.headers: one value a name, in whatever case it was given
        values = [value for key, value in headers.items() if key.lower() == "vary"]
    tokens: dict[str, str] = {}  # lower case -> as first written
    for name in (*(part.strip() for value in values for part in value.split(",")), *names):
        if name:
            tokens.setdefault(name.lower(), name)
    merged = "*" if "*" in tokens else ", ".join(tokens.values())
    if values != [merged]:
        headers["Vary"] = merged

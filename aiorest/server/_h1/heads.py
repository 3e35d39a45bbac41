"""Reading a request's head: the Host check and the general path's Request (RFC 9112's rules).

HeadReader (reader.py) builds the common request itself; these are the rules
for the rest, as functions of what the head said, so that they read without the
connection's state around them.
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import unquote

import httptools

from ...http.exceptions import (
    HTTPBadRequest,
    HTTPError,
    HTTPNotImplemented,
    HTTPPayloadTooLarge,
    HTTPVersionNotSupported,
)
from ...http.request import AppInterface, BodySource, Request
from ..wire import origin_form

__all__ = [
    "Framing",
    "NO_FRAMING",
    "framing_header",
    "host_error",
    "general_request",
    "upgrade_refused",
    "wants_websocket",
]

# RFC 9112, 3.2: one Host line, whose value is RFC 9110's  Host = uri-host [ ":" port ],  from RFC 3986, 3.2.2:
#   host       = IP-literal / IPv4address / reg-name     (an IPv4address is also a reg-name)
#   IP-literal = "[" ( IPv6address / IPvFuture ) "]"
#   IPvFuture  = "v" 1*HEXDIG "." 1*( unreserved / sub-delims / ":" )
#   reg-name   = *( unreserved / pct-encoded / sub-delims )
#   port       = *DIGIT
# llhttp leaves the trailing OWS on a value: allowed after it.
_REG_CHARS = rb"A-Za-z0-9\-._~!$&'()*+,;="
_HOST = re.compile(
    rb"(?:(?:[%s]|%%[0-9A-Fa-f]{2})*|\[(?:([0-9A-Fa-f:.]+)|v[0-9A-Fa-f]+\.[%s:]+)\])(?::[0-9]*)?[ \t]*"
    % (_REG_CHARS, _REG_CHARS)
)


def upgrade_refused(request: Request, head_errors: dict[Request, HTTPError]) -> None:
    """``request`` asked to upgrade: answer it, then close; a 400 if it has a body, which llhttp
    hands over to the new protocol unread (its handler would read b"", or a part of it)."""
    request.keep_alive = False
    if request in head_errors:
        return
    for name, value in request.raw_headers:
        name = name.lower()
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip(b" \t") != b"0"):
            head_errors[request] = HTTPBadRequest("a request asking to upgrade cannot have a body here")
            return


def wants_websocket(request: Request) -> bool:
    """Whether ``request`` asks for a WebSocket (RFC 6455, 4.1): a GET with ``Upgrade: websocket``
    and no body. Its key and version are the handshake's to check (server/websocket.py)."""
    if request.method != "GET":
        return False
    asked = False
    for name, value in request.raw_headers:
        name = name.lower()
        if name == b"upgrade":
            asked = asked or any(token.strip(b" \t").lower() == b"websocket" for token in value.split(b","))
        elif name == b"transfer-encoding" or (name == b"content-length" and value.strip(b" \t") != b"0"):
            return False
    return asked


def host_error(value: bytes) -> HTTPError | None:
    """The 400 for a Host value that is not RFC 3986's host[:port], else None."""
    found = _HOST.fullmatch(value)
    if found is None or (found[1] is not None and not _is_ipv6(found[1])):
        shown = value[:64].decode("latin-1")
        return HTTPBadRequest(f"the Host header {shown!r} is not a valid host[:port]")
    return None


class Framing:
    """What a head's framing headers said (Content-Length, Transfer-Encoding, Expect, Connection), if it had any."""

    __slots__ = ("content_length", "transfer_encoding", "expect_continue", "connection")

    def __init__(self) -> None:
        self.content_length: int | None = None
        # Repeated lines make one list (RFC 9110, 5.3): "gzip" then "chunked" is "gzip, chunked".
        self.transfer_encoding: bytes | None = None
        self.expect_continue = False
        self.connection = False


NO_FRAMING = Framing()  # never changed: for a head without those headers


def framing_header(framing: Framing | None, name: bytes, value: bytes) -> Framing | None:
    """Note a header (its name lowercased) in ``framing``, made if need be; None if it is not a framing header."""
    if name == b"content-length":
        framing = framing or Framing()
        framing.content_length = int(value)  # llhttp accepts digits only
    elif name == b"connection":
        framing = framing or Framing()
        framing.connection = True
    elif name == b"expect":
        if value.lower() != b"100-continue":
            return None
        framing = framing or Framing()
        framing.expect_continue = True
    elif name == b"transfer-encoding":
        framing = framing or Framing()
        previous = framing.transfer_encoding
        framing.transfer_encoding = value if previous is None else previous + b"," + value
    else:
        return None
    return framing


def general_request(
    parser: httptools.HttpRequestParser,
    method: str,
    target: bytes,
    app: AppInterface,
    body_source: BodySource | None,
    raw_headers: list[tuple[bytes, bytes]],
    max_body_size: int,
    *,
    has_host: bool,
    framing: Framing,
    refusal: HTTPError | None,
) -> tuple[Request, HTTPError | None, bool]:
    """The Request for a head off the common path, the error to answer instead of running its
    handler (None: the head can be served), and whether to read nothing more after it.

    A head that cannot be served gives an error and, if the connection must not go
    on, a Request whose ``keep_alive`` is False.
    """
    content_length = framing.content_length
    transfer_encoding = framing.transfer_encoding
    keep_alive = parser.should_keep_alive()
    # Formatting the version costs 0.2 µs; without a Connection header, only
    # HTTP/1.1 is kept alive, so the common case needs no formatting.
    http_version = "1.1" if keep_alive and not framing.connection else parser.get_http_version()
    if not target.startswith(b"/"):
        target = origin_form(target)
    if b"?" in target:
        raw_path, _, query_bytes = target.partition(b"?")
        query = query_bytes.decode("latin-1")
    else:
        raw_path, query = target, ""
    path = raw_path.decode("latin-1")
    bad_path = False
    if "%" in path:
        try:
            path = unquote(path, errors="strict")
        except UnicodeDecodeError:
            bad_path = True
    own_limit = None
    if content_length or transfer_encoding is not None:
        own_limit = app.body_limit(method, path)  # a route of its own size (uploads); None: the server's
        if own_limit is not None:
            max_body_size = own_limit
    error, keep_alive, stop = _head_error(
        http_version, content_length, transfer_encoding, max_body_size, has_host, refusal, keep_alive
    )
    if bad_path:
        error = error or HTTPBadRequest("request path is not valid UTF-8 after percent-decoding")
    request = Request(
        method,
        path,
        raw_path,
        query,
        http_version,
        raw_headers,
        app,
        body_source,
        keep_alive=keep_alive,
        expect_continue=framing.expect_continue and http_version == "1.1",
    )
    if own_limit is not None:
        request.body_limit = own_limit
    return request, error, stop


def _head_error(
    http_version: str,
    content_length: int | None,
    transfer_encoding: bytes | None,
    max_body_size: int,
    has_host: bool,
    refusal: HTTPError | None,
    keep_alive: bool,
) -> tuple[HTTPError | None, bool, bool]:
    """What RFC 9112 and the limits say of a head: the error to answer (None: none), whether the
    connection may stay open after it, and whether to read nothing more (its body's length is unknown)."""
    if content_length is not None and content_length > max_body_size:
        message = f"request body of {content_length} bytes exceeds the limit of {max_body_size}"
        return HTTPPayloadTooLarge(message), False, True
    error: HTTPError | None = None
    if http_version == "1.1" and not has_host:
        error = HTTPBadRequest("an HTTP/1.1 request needs a Host header")  # RFC 9112, 3.2
        keep_alive = False
    if transfer_encoding is not None:
        codings = [coding.strip().lower() for coding in transfer_encoding.split(b",")]
        if codings[-1] != b"chunked":
            # RFC 9112, 6.3: the body's length cannot be known; 400, and read no more.
            message = "the last transfer coding of a request must be chunked; its body length cannot be known"
            return HTTPBadRequest(message), False, True
        if len(codings) > 1:
            # llhttp accepts "gzip, chunked"; we would hand the handler a still-encoded body.
            error = HTTPNotImplemented("only the chunked transfer coding is supported")
            keep_alive = False
        elif http_version == "1.0":
            keep_alive = False  # RFC 9112, 6.1: its framing is suspect; close after it
    if http_version != "1.1" and http_version != "1.0":  # llhttp also takes 0.9 and 2.0
        error = HTTPVersionNotSupported(f"HTTP/{http_version} is not supported; this server speaks HTTP/1.1")
        keep_alive = False
    if refusal is not None:
        error = refusal
        keep_alive = False
    return error, keep_alive, False


def _is_ipv6(text: bytes) -> bool:
    try:
        ipaddress.IPv6Address(text.decode("ascii"))
    except ValueError:
        return False
    return True

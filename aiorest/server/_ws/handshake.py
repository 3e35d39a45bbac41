"""The WebSocket opening handshake (RFC 6455, 4.2), by the ``websockets`` library's sans-IO ServerProtocol.

``handshake`` checks the client's key and version, agrees on permessage-deflate
(RFC 7692) and the subprotocol the handler chose, and gives the protocol object, now
OPEN, whose ``data_to_send`` holds the 101 answer; a handshake it refuses becomes the
HTTPError to answer instead (400, or 426 with the version we speak).
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence

from websockets.datastructures import Headers
from websockets.extensions.permessage_deflate import ServerPerMessageDeflateFactory
from websockets.frames import Frame, Opcode
from websockets.http11 import Request as WSRequest
from websockets.server import ServerProtocol
from websockets.typing import Subprotocol

from ...http.exceptions import HTTPBadRequest, HTTPError
from ...http.request import Request
from ...http.websocket import WebSocketLimits

__all__ = ["handshake"]

# The websockets library's defaults for a server (enable_server_permessage_deflate): 4 KiB windows,
# memLevel 5, about 64 KiB of zlib state a connection instead of 256 KiB.
_DEFLATE = ServerPerMessageDeflateFactory(
    server_max_window_bits=12, client_max_window_bits=12, compress_settings={"memLevel": 5}
)

_utf8 = codecs.getincrementaldecoder("utf-8")
# What ServerProtocol.accept reads of a request (the Origin is checked before, by the route).
_HANDSHAKE_HEADERS = frozenset(
    {
        b"connection",
        b"upgrade",
        b"sec-websocket-key",
        b"sec-websocket-version",
        b"sec-websocket-extensions",
        b"sec-websocket-protocol",
    }
)
_DATA = (Opcode.TEXT, Opcode.BINARY, Opcode.CONT)


class CheckedProtocol(ServerProtocol):
    """ServerProtocol that checks a text message's UTF-8 as each frame is parsed (RFC 6455, 8.1: close 1007).

    Checked here, in the library's parser, and not once its frames are events: a close frame read in the
    same ``receive_data`` would otherwise be answered (1000) before the bad text was seen.

    A close frame in the middle of a fragmented message (a control frame may come between fragments, RFC
    6455, 5.4) drops the unfinished message and is answered with the client's code, as Autobahn's case 7.1.5
    expects: the library alone fails it with 1002 ("incomplete fragmented message")."""

    _text: codecs.IncrementalDecoder | None = None

    def recv_frame(self, frame: Frame) -> None:
        opcode = frame.opcode
        # a data frame the framing allows (else the library fails the connection with 1002)
        if opcode in _DATA and (opcode is Opcode.CONT) == (self.current_size is not None):
            if opcode is not Opcode.CONT:
                self._text = _utf8() if opcode is Opcode.TEXT else None
            if self._text is not None:
                self._text.decode(frame.data, frame.fin)  # UnicodeDecodeError: the parser fails it, 1007
        elif opcode is Opcode.CLOSE and self.current_size is not None:
            self.current_size = None  # the unfinished message is dropped
        super().recv_frame(frame)


def handshake(
    request: Request, limits: WebSocketLimits, subprotocol: str | None, headers: Sequence[tuple[str, str]]
) -> ServerProtocol:
    """The sans-IO protocol of the WebSocket ``request`` asks for, its 101 answer queued; HTTPError if refused."""
    protocol = CheckedProtocol(
        extensions=[_DEFLATE] if limits.compression else None,
        subprotocols=[Subprotocol(subprotocol)] if subprotocol is not None else None,
        max_size=(limits.max_message, limits.max_frame),
    )
    # The request as the library reads it, made from the head parsed already, with only the headers its
    # handshake reads: the handler has the whole head in its Request. Not fed to the library's parser:
    # that parser would keep the request it parsed, in its frame, as long as the WebSocket lives.
    target = request.raw_path + (b"?" + request.query_string.encode("latin-1") if request.query_string else b"")
    try:
        asked = WSRequest(
            target.decode("ascii"),
            Headers(
                (name.decode("ascii"), value.strip(b" \t").decode("iso-8859-1"))
                for name, value in request.raw_headers
                if name.lower() in _HANDSHAKE_HEADERS
            ),
        )
    except UnicodeDecodeError:
        raise HTTPBadRequest("malformed WebSocket handshake") from None
    response = protocol.accept(asked)
    if response.status_code != 101:
        status = response.status_code if 400 <= response.status_code <= 599 else 400
        message = response.body.decode("utf-8", "replace").strip() or None
        if status == 400 and asked.headers.get("Sec-WebSocket-Version") != "13":
            # RFC 6455, 4.4: a version we do not speak is answered 426 with the one we do
            raise HTTPError(message, status=426, headers={"Sec-WebSocket-Version": "13"})
        raise HTTPError(message, status=status)
    for extra_name, extra_value in headers:
        response.headers[extra_name] = extra_value
    protocol.send_response(response)
    # OPEN now: its parser, started on a request line in __init__, starts again on frames (as the library
    # itself replaces its parser when a connection fails)
    protocol.parser = protocol.parse()
    next(protocol.parser)
    return protocol

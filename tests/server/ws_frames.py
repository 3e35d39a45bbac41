"""WebSocket frame streams for the frame fuzzer, the reference that reads them, and a client that sends them.

* ``streams``: Hypothesis strategies of client frame streams, each a list of items (a message,
  maybe fragmented with pings between its fragments, a ping, a pong) and at most one broken item
  (``KINDS``: reserved opcodes and bits, unmasked, oversize, long or fragmented control frames,
  invalid UTF-8, interleaved fragments, a continuation of nothing, bad close codes and reasons,
  a 64-bit length with its top bit set, input cut short), then the client's close or its EOF.
* ``reference``: the same bytes, frame by frame, to the ``websockets`` library's own sans-IO
  ServerProtocol (what aiorest wraps, used here apart from aiorest), with the UTF-8 of text
  messages checked as it arrives: the messages an echo server sends back, its pongs, its close.
* ``exchange``: a blocking socket sends the stream to an aiorest echo route, one message at a
  time (waiting for each echo, so that no echo races the close), and reads what comes back.
* ``problems``: what is wrong with aiorest's answer: a difference from the reference, a close
  code RFC 6455 (7.4.1) does not give for the first broken item, a traceback, a hang.
"""

from __future__ import annotations

import codecs
import os
import socket
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from hypothesis import strategies as st
from websockets.frames import Close, Opcode
from websockets.protocol import OPEN
from websockets.server import ServerProtocol

from aiorest import App, WebSocket, WebSocketLimits
from aiorest.testing import TestClient

MAX_MESSAGE = 2048
MAX_FRAME = 1024
LIMITS = WebSocketLimits(
    max_message=MAX_MESSAGE, max_frame=MAX_FRAME, compression=False, ping_interval=None, close_timeout=2
)
WAIT = 5.0  # seconds for an answer: past it, the server hangs

# the close codes RFC 6455 (7.4.1) gives for each broken item
KINDS: dict[str, frozenset[int]] = {
    "bad_opcode": frozenset({1002}),
    "rsv_bits": frozenset({1002}),
    "unmasked": frozenset({1002}),
    "oversize_frame": frozenset({1009}),
    "oversize_message": frozenset({1009}),
    "long_control": frozenset({1002}),
    "fragmented_control": frozenset({1002}),
    "bad_utf8": frozenset({1007}),
    "interleaved": frozenset({1002}),
    "orphan_continuation": frozenset({1002}),
    "close_bad_code": frozenset({1002}),
    "close_one_byte": frozenset({1002}),
    "close_bad_reason": frozenset({1007, 1002}),
    "length_top_bit": frozenset({1002, 1009}),
}
BAD_CLOSE_CODES = (0, 999, 1004, 1005, 1006, 1015, 1016, 1100, 2000, 2999, 5000, 65535)
GOOD_CLOSE_CODES = (1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014, 3000, 3999, 4000, 4999)


def frame(
    opcode: int, payload: bytes, fin: bool = True, rsv: int = 0, masked: bool = True, length: int | None = None
) -> bytes:
    """One frame as a client writes it (RFC 6455, 5.2), any field as given: ``length`` overrides the real one."""
    size = len(payload) if length is None else length
    head = bytes([(0x80 if fin else 0) | (rsv & 7) << 4 | (opcode & 0x0F)])
    mask_bit = 0x80 if masked else 0
    if size < 126:
        head += bytes([mask_bit | size])
    elif size < 65536:
        head += bytes([mask_bit | 126]) + size.to_bytes(2, "big")
    else:
        head += bytes([mask_bit | 127]) + size.to_bytes(8, "big")
    if not masked:
        return head + payload
    key = os.urandom(4)
    return head + key + bytes(byte ^ key[at % 4] for at, byte in enumerate(payload))


def close_frame(code: int, reason: bytes = b"") -> bytes:
    return frame(Opcode.CLOSE, code.to_bytes(2, "big") + reason)


def _fragments(data: bytes, draw: st.DrawFn) -> list[bytes]:
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=3)))
    return [data[start:end] for start, end in zip([0, *cuts], [*cuts, len(data)], strict=True)]


@st.composite
def valid_item(draw: st.DrawFn) -> list[bytes]:
    """A message (maybe fragmented, pings between its fragments), a ping or a pong: one frame a list entry."""
    what = draw(st.sampled_from(["text", "binary", "ping", "pong"]))
    if what in ("ping", "pong"):
        return [frame(Opcode.PING if what == "ping" else Opcode.PONG, draw(st.binary(max_size=125)))]
    if what == "text":
        data = draw(st.text(max_size=200)).encode()
    else:
        data = draw(st.binary(max_size=MAX_FRAME))
    parts = _fragments(data, draw)
    frames = []
    for at, part in enumerate(parts):
        frames.append(
            frame(
                Opcode.CONT if at else (Opcode.TEXT if what == "text" else Opcode.BINARY),
                part,
                fin=at == len(parts) - 1,
            )
        )
        if at < len(parts) - 1 and draw(st.booleans()):
            frames.append(frame(Opcode.PING, draw(st.binary(max_size=20))))
    return frames


@st.composite
def broken_item(draw: st.DrawFn, kind: str) -> list[bytes]:
    payload = draw(st.binary(max_size=40))
    data_opcode = draw(st.sampled_from([Opcode.TEXT, Opcode.BINARY]))
    if kind == "bad_opcode":
        return [frame(draw(st.sampled_from([3, 4, 5, 6, 7, 11, 12, 13, 14, 15])), payload)]
    if kind == "rsv_bits":
        return [
            frame(
                draw(st.sampled_from([Opcode.BINARY, Opcode.PING, Opcode.CONT])), payload, rsv=draw(st.integers(1, 7))
            )
        ]
    if kind == "unmasked":
        return [frame(draw(st.sampled_from([Opcode.BINARY, Opcode.PING, Opcode.CLOSE])), b"", masked=False)]
    if kind == "oversize_frame":
        return [frame(Opcode.BINARY, b"x" * draw(st.integers(MAX_FRAME + 1, MAX_FRAME + 50)))]
    if kind == "oversize_message":
        count = MAX_MESSAGE // MAX_FRAME + 1
        return [frame(Opcode.CONT if at else data_opcode, b"a" * MAX_FRAME, fin=at == count - 1) for at in range(count)]
    if kind == "long_control":
        return [frame(draw(st.sampled_from([Opcode.PING, Opcode.PONG])), b"p" * draw(st.integers(126, 200)))]
    if kind == "fragmented_control":
        return [frame(draw(st.sampled_from([Opcode.PING, Opcode.PONG, Opcode.CLOSE])), b"", fin=False)]
    if kind == "bad_utf8":
        good = draw(st.text(max_size=20)).encode()
        bad = draw(st.sampled_from([b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe2\x82"]))
        return [
            frame(Opcode.CONT if at else Opcode.TEXT, part, fin=at == len(parts) - 1)
            for parts in [_fragments(good + bad + b"!", draw)]
            for at, part in enumerate(parts)
        ]
    if kind == "interleaved":  # a text or binary frame while a message is fragmented (valid UTF-8: not 1007)
        first = frame(data_opcode, payload.hex().encode(), fin=False)
        return [first, frame(draw(st.sampled_from([Opcode.TEXT, Opcode.BINARY])), b"x")]
    if kind == "orphan_continuation":
        return [frame(Opcode.CONT, payload, fin=draw(st.booleans()))]
    if kind == "close_bad_code":
        return [close_frame(draw(st.sampled_from(BAD_CLOSE_CODES)), b"bye")]
    if kind == "close_one_byte":
        return [frame(Opcode.CLOSE, b"\x03")]
    if kind == "close_bad_reason":
        return [close_frame(1000, b"ok\xff")]
    assert kind == "length_top_bit"
    return [frame(Opcode.BINARY, b"", length=(1 << 63) + draw(st.integers(0, 100)))]


@dataclass
class Stream:
    """The client's frames (one a chunk), then its ``tail``: a close frame, or b"" for EOF."""

    chunks: list[bytes]
    tail: bytes
    kind: str  # the broken item's, or "valid", or "truncated"

    def allowed(self) -> frozenset[int] | None:
        """The close codes RFC 6455 gives for this stream's first broken item (None: a valid stream)."""
        return KINDS.get(self.kind)


@st.composite
def streams(draw: st.DrawFn) -> Stream:
    items = draw(st.lists(valid_item(), max_size=4))
    chunks = [chunk for item in items for chunk in item]
    kind = draw(st.sampled_from(["valid", "truncated", *KINDS]))
    if kind in KINDS:
        chunks += draw(broken_item(kind))
        chunks += [chunk for item in draw(st.lists(valid_item(), max_size=2)) for chunk in item]  # never read
    if kind == "truncated":
        chunks += draw(valid_item())
        last = chunks[-1]
        chunks[-1] = last[: draw(st.integers(1, len(last) - 1))]
        return Stream(chunks, b"", kind)
    code = draw(st.sampled_from(GOOD_CLOSE_CODES))
    tail = draw(st.sampled_from([close_frame(code, draw(st.text(max_size=20)).encode()), frame(Opcode.CLOSE, b"")]))
    return Stream(chunks, tail, kind)


# -- the reference: the websockets library's ServerProtocol, apart from aiorest ---------------------------


@dataclass
class Answer:
    """What an echo server answers a stream."""

    echoes: list[str | bytes] = field(default_factory=list)
    optional: int = 0  # the last ``optional`` echoes may be missing: their message came with the close
    pongs: list[bytes] = field(default_factory=list)
    close: tuple[int, str] | None = None  # None: no close frame came
    waits: dict[int, int] = field(default_factory=dict)  # after chunk i, this many echoes have come
    raw: bytes = b""  # the bytes the server sent

    def summary(self) -> str:
        close = self.close if self.close is None else (self.close[0], self.close[1][:40])
        echoes = [
            message if len(message) < 20 else f"{type(message).__name__}[{len(message)}]" for message in self.echoes
        ]
        return f"echoes {echoes} pongs {len(self.pongs)} close {close}"


def server_frames(data: bytes) -> tuple[list[tuple[int, bytes]], bytes]:
    """The whole (unmasked) frames at the start of ``data``, and the rest."""
    frames = []
    while len(data) >= 2:
        length, at = data[1] & 0x7F, 2
        if length == 126:
            length, at = int.from_bytes(data[2:4], "big"), 4
        elif length == 127:
            length, at = int.from_bytes(data[2:10], "big"), 10
        if len(data) < at + length:
            break
        frames.append((data[0] & 0x0F, data[at : at + length]))
        data = data[at + length :]
    return frames, data


def reference(stream: Stream) -> Answer:
    protocol = ServerProtocol(state=OPEN, max_size=(MAX_MESSAGE, MAX_FRAME))
    answer = Answer()
    decoder: codecs.IncrementalDecoder | None = None
    parts: list[str | bytes] = []
    for at, chunk in enumerate([*stream.chunks, stream.tail]):
        if chunk:
            protocol.receive_data(chunk)
        else:
            protocol.receive_eof()
        before = len(answer.echoes)
        for event in protocol.events_received():
            if event.opcode not in (Opcode.TEXT, Opcode.BINARY, Opcode.CONT):
                continue
            if event.opcode is not Opcode.CONT:
                decoder = codecs.getincrementaldecoder("utf-8")() if event.opcode is Opcode.TEXT else None
            try:
                parts.append(decoder.decode(event.data, event.fin) if decoder else bytes(event.data))
            except UnicodeDecodeError:
                protocol.fail(1007, "invalid UTF-8")
                break
            if event.fin:
                answer.echoes.append("".join(parts) if decoder else b"".join(parts))  # type: ignore[arg-type]
                parts = []
        for opcode, payload in server_frames(b"".join(protocol.data_to_send()))[0]:
            if opcode == Opcode.PONG:
                answer.pongs.append(payload)
            elif opcode == Opcode.CLOSE and answer.close is None:
                close = Close.parse(payload)
                answer.close = (close.code, close.reason)
        if protocol.state is not OPEN:
            answer.optional = len(answer.echoes) - before
            break
        if len(answer.echoes) > before:
            answer.waits[at] = len(answer.echoes)
    return answer


# -- aiorest, over a socket -------------------------------------------------------------------------------


def echo_app(limits: WebSocketLimits = LIMITS, path: str = "/echo") -> App:
    """An app echoing each message back as it came, at ``path`` (the fuzzers' and Autobahn's server)."""
    app = App()

    @app.websocket(path, limits=limits)
    async def echo(ws: WebSocket) -> None:
        await ws.accept()
        async for message in ws:
            await ws.send(message)

    return app


class ServerThread:
    """An aiorest echo server on its own thread and event loop, for blocking clients (Hypothesis's tests)."""

    def __init__(self) -> None:
        import asyncio

        self.loop = asyncio.new_event_loop()
        self.client = TestClient(echo_app())
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> ServerThread:
        import asyncio

        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.client.start(), self.loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        import asyncio

        asyncio.run_coroutine_threadsafe(self.client.close(), self.loop).result(15)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()

    @property
    def port(self) -> int:
        return self.client.port


class Hang(Exception):
    pass


class _Reader:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""
        self.raw = b""  # everything the server sent
        self.eof = False

    def more(self) -> None:
        try:
            data = self.sock.recv(65536)
        except TimeoutError as exc:
            raise Hang(f"no answer within {WAIT} s") from exc
        except ConnectionResetError:
            data = b""
        if not data:
            self.eof = True
        self.raw += data
        self.buffer += data


def exchange(port: int, stream: Stream, expected: Answer, splits: Sequence[int] = ()) -> Answer:
    """Send ``stream`` to aiorest's echo route, waiting for the echoes where the reference has them; what came back.

    ``splits``: offsets in each chunk where it is written in two sends. Raises Hang."""
    answer = Answer()
    sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    reader = _Reader(sock)
    try:
        sock.sendall(
            b"GET /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        while b"\r\n\r\n" not in reader.buffer and not reader.eof:
            reader.more()
        head, _, reader.buffer = reader.buffer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 101 "), head

        def take() -> None:
            frames, reader.buffer = server_frames(reader.buffer)
            for opcode, payload in frames:
                if opcode == Opcode.TEXT:
                    answer.echoes.append(payload.decode())
                elif opcode == Opcode.BINARY:
                    answer.echoes.append(payload)
                elif opcode == Opcode.PONG:
                    answer.pongs.append(payload)
                elif opcode == Opcode.CLOSE and answer.close is None:
                    close = Close.parse(payload)
                    answer.close = (close.code, close.reason)

        sent_close = False
        for at, chunk in enumerate([*stream.chunks, stream.tail]):
            if answer.close is not None or reader.eof:
                break
            try:
                if not chunk:
                    sock.shutdown(socket.SHUT_WR)
                else:
                    cut = splits[at % len(splits)] % len(chunk) if splits else 0
                    sock.sendall(chunk[:cut])
                    sock.sendall(chunk[cut:])
                    sent_close = chunk is stream.tail
            except (BrokenPipeError, ConnectionResetError):
                break
            wanted = expected.waits.get(at, 0)  # the reference echoed a message here: wait for aiorest's echo
            while len(answer.echoes) < wanted and answer.close is None and not reader.eof:
                reader.more()
                take()
        while answer.close is None and not reader.eof:
            reader.more()
            take()
        if answer.close is not None and not sent_close:  # answer the server's close, as a client must
            try:
                sock.sendall(close_frame(answer.close[0] if answer.close[0] not in (1005, 1006) else 1000))
            except (BrokenPipeError, ConnectionResetError):
                pass
        while not reader.eof:  # then the server ends the TCP connection
            reader.more()
        take()
    finally:
        sock.close()
    answer.raw = reader.raw
    return answer


def problems(stream: Stream, ours: Answer, theirs: Answer) -> list[str]:
    """What is wrong with aiorest's answer ``ours`` to ``stream``, ``theirs`` the reference's."""
    found = []
    required = theirs.echoes[: len(theirs.echoes) - theirs.optional]
    if ours.echoes[: len(required)] != required or ours.echoes != theirs.echoes[: len(ours.echoes)]:
        found.append("echoes differ")
    if ours.pongs != theirs.pongs:
        found.append("pongs differ")
    ours_code = None if ours.close is None else ours.close[0]
    theirs_code = None if theirs.close is None else theirs.close[0]
    if ours_code != theirs_code:
        found.append(f"close {ours_code}, the reference's {theirs_code}")
    elif stream.allowed() is None and ours.close != theirs.close:
        found.append(f"close {ours.close}, the reference's {theirs.close}")  # the client's close: its reason too
    allowed = stream.allowed()
    if allowed is not None and ours_code not in allowed:
        found.append(f"close {ours_code} for {stream.kind}: RFC 6455 gives {sorted(allowed)}")
    if b"Traceback" in ours.raw or b'File "' in ours.raw:
        found.append("a traceback reached the client")
    return found

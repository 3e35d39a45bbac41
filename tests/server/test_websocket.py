"""WebSockets on aiorest's server, over real sockets: aiohttp's client, and raw sockets speaking
frames by the websockets library's client-side sans-IO protocol (for the frames a good client never sends)."""

from __future__ import annotations

import asyncio
import base64
import os
import zlib
from typing import Any

import aiohttp
import pytest
from websockets.frames import Close, Frame, Opcode
from websockets.utils import apply_mask

from aiorest import (
    CORS,
    App,
    CookieSessionStore,
    HTTPUnauthorized,
    Limits,
    SessionMiddleware,
    WebSocket,
    WebSocketDisconnect,
    WebSocketLimits,
)
from aiorest.testing import AiorestTestServer, TestClient

KEY = base64.b64encode(b"0123456789abcdef").decode()


def make_app(limits: WebSocketLimits | None = None, **options: Any) -> tuple[App, dict[str, Any]]:
    app = App()
    seen: dict[str, Any] = {}

    @app.websocket("/echo", limits=limits, **options)
    async def echo(ws: WebSocket) -> None:
        await ws.accept()
        try:
            async for message in ws:
                await ws.send(message)
        finally:
            seen["close"] = ws.close_code

    @app.websocket("/json")
    async def json_echo(ws: WebSocket) -> None:
        await ws.accept()
        value = await ws.receive_json()
        await ws.send_json({"got": value})
        await ws.send_json([1, 2], binary=True)

    @app.websocket("/chat")
    async def chat(ws: WebSocket) -> None:
        await ws.accept(subprotocol=(ws.subprotocols or [None])[-1], headers={"X-Room": "lobby"})
        await ws.send_text(ws.subprotocol or "")
        try:
            await ws.receive()
        except WebSocketDisconnect as gone:
            seen["client_close"] = (gone.code, gone.reason)

    @app.websocket("/bye")
    async def bye(ws: WebSocket) -> None:
        await ws.accept()
        await ws.close(4001, "bye now")

    @app.websocket("/flood", limits=limits)
    async def flood(ws: WebSocket) -> None:
        await ws.accept()
        seen["sent"] = 0
        try:
            while True:
                await ws.send_bytes(b"x" * 65536)
                seen["sent"] += 1
        except WebSocketDisconnect as gone:
            seen["flood_close"] = gone.code

    return app, seen


class RawWebSocket:
    """A client on a raw socket: frames written as given (masked, as a client must), frames read back."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(
        cls, port: int, path: str = "/echo", after_head: bytes = b"", **headers: str
    ) -> tuple[RawWebSocket, bytes]:
        """Connect and send the handshake (``headers`` change or add lines: ``Sec_WebSocket_Key="..."``)."""
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        lines = {"Sec-WebSocket-Key": KEY, "Sec-WebSocket-Version": "13"}
        lines.update({name.replace("_", "-"): value for name, value in headers.items()})
        head = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        head += "".join(f"{name}: {value}\r\n" for name, value in lines.items())
        writer.write(head.encode() + b"\r\n" + after_head)
        return cls(reader, writer), await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)

    def send(self, opcode: Opcode, data: bytes, fin: bool = True) -> None:
        self.writer.write(Frame(opcode, data, fin).serialize(mask=True, extensions=[]))

    def send_compressed(self, data: bytes) -> None:
        """A binary frame with RSV1 set (permessage-deflate), which the library's client writes only from a
        message it compressed itself: the header written here (RFC 6455, 5.2), the masking the library's."""
        length = len(data)
        size = bytes([0x80 | length]) if length < 126 else bytes([0x80 | 126]) + length.to_bytes(2, "big")
        mask = os.urandom(4)
        self.writer.write(bytes([0x80 | 0x40 | Opcode.BINARY]) + size + mask + apply_mask(data, mask))

    async def frame(self) -> Frame:
        first = await asyncio.wait_for(self.reader.readexactly(2), 10)
        length = first[1] & 0x7F
        if length == 126:
            length = int.from_bytes(await self.reader.readexactly(2), "big")
        elif length == 127:
            length = int.from_bytes(await self.reader.readexactly(8), "big")
        data = await self.reader.readexactly(length)
        return Frame(Opcode(first[0] & 0x0F), data, bool(first[0] & 0x80))

    async def close_frame(self) -> Close:
        """The server's close (pings skipped)."""
        while True:
            frame = await self.frame()
            if frame.opcode is Opcode.CLOSE:
                return Close.parse(frame.data)

    def close(self) -> None:
        self.writer.close()


async def test_echo_of_text_bytes_and_json_with_async_iteration():
    app, seen = make_app()
    async with TestClient(app) as client:
        async with client.ws_connect("/echo") as ws:
            await ws.send_str("héllo")
            assert (await ws.receive(timeout=5)).data == "héllo"
            await ws.send_bytes(b"\x00\xff")
            assert (await ws.receive(timeout=5)).data == b"\x00\xff"
            await ws.close()
        async with client.ws_connect("/json") as ws:
            await ws.send_json({"a": 1})
            assert await ws.receive_json(timeout=5) == {"got": {"a": 1}}
            message = await ws.receive(timeout=5)
            assert message.type is aiohttp.WSMsgType.BINARY and message.data == b"[1,2]"
    assert seen["close"] == 1000


async def test_subprotocol_extra_headers_and_the_clients_close_code_and_reason():
    app, seen = make_app()
    async with TestClient(app) as client:
        async with client.ws_connect("/chat", protocols=("v1.chat", "v2.chat")) as ws:
            assert ws.protocol == "v2.chat"
            assert (await ws.receive(timeout=5)).data == "v2.chat"
            await ws.close(code=4002, message=b"see you")
        for _ in range(100):
            if "client_close" in seen:
                break
            await asyncio.sleep(0.02)
    assert seen["client_close"] == (4002, "see you")


async def test_the_servers_close_code_and_reason_reach_the_client():
    app, _ = make_app()
    async with TestClient(app) as client:
        async with client.ws_connect("/bye") as ws:
            message = await ws.receive(timeout=5)
            assert message.type is aiohttp.WSMsgType.CLOSE
            assert (message.data, message.extra) == (4001, "bye now")


async def test_extra_headers_and_pipelined_frames_after_the_upgrade_head():
    app, _ = make_app()
    async with TestClient(app) as client:
        frame = Frame(Opcode.TEXT, b"early").serialize(mask=True, extensions=[])
        raw, head = await RawWebSocket.open(client.port, "/echo", after_head=frame)  # in the same write
        assert head.startswith(b"HTTP/1.1 101 ")
        echoed = await raw.frame()
        assert (echoed.opcode, echoed.data) == (Opcode.TEXT, b"early")
        raw.close()
        raw2, head = await RawWebSocket.open(client.port, "/chat")
        assert b"\r\nX-Room: lobby\r\n" in head
        raw2.close()


@pytest.mark.parametrize(
    ("change", "status"),
    [
        ({"Sec_WebSocket_Key": "short"}, 400),
        ({"Sec_WebSocket_Version": "8"}, 426),
        ({"Origin": "https://evil.example"}, 403),
    ],
)
async def test_a_bad_handshake_is_answered_as_http(change, status):
    app, _ = make_app()
    async with TestClient(app) as client:
        raw, head = await RawWebSocket.open(client.port, **change)
        assert head.startswith(b"HTTP/1.1 %d " % status)
        if status == 426:
            assert b"\r\nSec-WebSocket-Version: 13\r\n" in head
        raw.close()
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:  # as aiohttp's client sees it
            await client.ws_connect("/echo", origin="https://evil.example")
        assert refused.value.status == 403


async def test_origin_same_as_the_host_or_listed_is_allowed():
    app, _ = make_app(origins=["https://app.example"])
    async with TestClient(app) as client:
        for origin in (client.url.rstrip("/"), "https://app.example"):
            async with client.ws_connect("/echo", origin=origin) as ws:
                await ws.send_str("ok")
                assert (await ws.receive(timeout=5)).data == "ok"


async def test_a_plain_get_on_a_websocket_route_is_426():
    app, _ = make_app()
    async with TestClient(app) as client:
        async with client.get("/echo") as response:
            assert response.status == 426 and response.headers["Upgrade"] == "websocket"


async def test_middleware_runs_before_accept_a_missing_token_is_401():
    app, _ = make_app()

    async def bearer(request, handler):
        if request.headers.get("authorization") != "Bearer good":
            raise HTTPUnauthorized("a bearer token is needed", headers={"WWW-Authenticate": "Bearer"})
        return await handler(request)

    app.add_middleware(bearer)
    async with TestClient(app) as client:
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await client.ws_connect("/echo")
        assert refused.value.status == 401
        async with client.ws_connect("/echo", headers={"Authorization": "Bearer good"}) as ws:
            await ws.send_str("in")
            assert (await ws.receive(timeout=5)).data == "in"


async def test_a_message_larger_than_max_message_closes_1009():
    app, _ = make_app(WebSocketLimits(max_message=1024))
    async with TestClient(app) as client:
        async with client.ws_connect("/echo") as ws:
            await ws.send_bytes(b"x" * 2000)
            message = await ws.receive(timeout=5)
            assert message.type is aiohttp.WSMsgType.CLOSE and message.data == 1009


async def test_fragments_together_larger_than_max_message_close_1009():
    app, _ = make_app(WebSocketLimits(max_message=1024))
    async with TestClient(app) as client:
        raw, _ = await RawWebSocket.open(client.port)
        raw.send(Opcode.TEXT, b"a" * 600, fin=False)
        raw.send(Opcode.CONT, b"a" * 600, fin=True)
        assert (await raw.close_frame()).code == 1009
        raw.close()


async def test_a_client_still_sending_past_max_message_reads_the_1009_close_not_a_reset():
    # Autobahn 9.4.5: failing the connection, the server closed its socket while the client still
    # wrote; the kernel answered the client's next bytes with a reset, which could reach it before it
    # read the close frame. The server now half-closes and reads on until the client closes.
    app, _ = make_app(WebSocketLimits(max_message=64 * 1024))
    async with TestClient(app) as client:
        raw, _ = await RawWebSocket.open(client.port)
        raw.send(Opcode.BINARY, b"x" * 16384, fin=False)
        for _ in range(255):  # 4 MiB in 16 KiB frames, as Autobahn's case sends it
            raw.send(Opcode.CONT, b"x" * 16384, fin=False)
        raw.send(Opcode.CONT, b"x", fin=True)
        await asyncio.wait_for(raw.writer.drain(), 10)
        assert (await raw.close_frame()).code == 1009
        assert await asyncio.wait_for(raw.reader.read(), 5) == b""  # then the server's end of stream
        raw.close()


async def test_invalid_utf8_closes_1007_even_split_between_fragments():
    app, _ = make_app()
    async with TestClient(app) as client:
        raw, _ = await RawWebSocket.open(client.port)
        raw.send(Opcode.TEXT, "é".encode()[:1], fin=False)  # valid so far: the rest may come
        raw.send(Opcode.CONT, b"\xff", fin=True)
        assert (await raw.close_frame()).code == 1007
        raw.close()


async def test_invalid_utf8_followed_by_a_close_in_the_same_read_still_closes_1007():
    """Found by the frame fuzzer: the library answered the close (1000) before the text was checked."""
    app, _ = make_app()
    async with TestClient(app) as client:
        raw, _ = await RawWebSocket.open(client.port)
        bad = Frame(Opcode.TEXT, b"ok\xff").serialize(mask=True, extensions=[])
        ping = Frame(Opcode.PING, b"after").serialize(mask=True, extensions=[])
        close = Frame(Opcode.CLOSE, Close(1000, "bye").serialize()).serialize(mask=True, extensions=[])
        raw.writer.write(bad + ping + close)  # one write: one read on the server
        first = await raw.frame()
        assert first.opcode is Opcode.CLOSE and Close.parse(first.data).code == 1007  # no pong for the later ping
        raw.close()


async def test_a_protocol_error_closes_1002():
    app, _ = make_app()
    async with TestClient(app) as client:
        raw, _ = await RawWebSocket.open(client.port)
        raw.send(Opcode.CONT, b"nothing to continue")
        assert (await raw.close_frame()).code == 1002
        raw.close()


async def test_a_close_between_fragments_drops_the_message_and_is_answered_with_the_clients_code():
    """Autobahn's case 7.1.5: a control frame may come between fragments (RFC 6455, 5.4), a close too; the
    websockets library alone answered it 1002 (incomplete fragmented message)."""
    app, seen = make_app()
    async with TestClient(app) as client:
        raw, _ = await RawWebSocket.open(client.port)
        raw.send(Opcode.TEXT, b"fragment1", fin=False)
        raw.send(Opcode.CLOSE, Close(1000, "bye").serialize())
        raw.send(Opcode.CONT, b"fragment2", fin=True)  # after the close: ignored
        first = await raw.frame()
        assert first.opcode is Opcode.CLOSE and Close.parse(first.data).code == 1000  # no echo before it
        raw.close()
    assert seen["close"] == 1000


async def test_a_deflate_bomb_closes_1009():
    app, _ = make_app()  # max_message: 1 MiB
    async with TestClient(app) as client:
        raw, head = await RawWebSocket.open(client.port, Sec_WebSocket_Extensions="permessage-deflate")
        assert b"permessage-deflate" in head
        compressor = zlib.compressobj(wbits=-12)
        bomb = compressor.compress(b"\0" * (8 * 1024 * 1024)) + compressor.flush(zlib.Z_SYNC_FLUSH)
        assert len(bomb) < 16 * 1024  # 8 MiB inflated from a few KiB
        raw.send_compressed(bomb[:-4])  # RFC 7692, 7.2.1: the sync flush's last 4 bytes are left out
        assert (await raw.close_frame()).code == 1009
        raw.close()


async def test_a_client_that_does_not_read_is_closed_1008_and_the_server_holds_little():
    app, seen = make_app(WebSocketLimits(send_timeout=1.0, write_limit=64 * 1024, close_timeout=30))
    async with TestClient(app) as client:
        raw, _ = await RawWebSocket.open(client.port, "/flood")
        for _ in range(200):  # the client reads nothing until the server gave up on it
            if "flood_close" in seen:
                break
            await asyncio.sleep(0.05)
        assert seen["flood_close"] == 1008
        # what was sent waited for the client: the socket buffers, not a queue without end
        assert seen["sent"] < 300  # 300 x 64 KiB = 19 MiB
        while (frame := await raw.frame()).opcode is not Opcode.CLOSE:
            pass
        assert Close.parse(frame.data).code == 1008
        raw.close()


async def test_a_client_that_does_not_answer_pings_is_closed_1011():
    app, _ = make_app(WebSocketLimits(ping_interval=1, ping_timeout=1))
    async with TestClient(app) as client:
        raw, _ = await RawWebSocket.open(client.port)
        ping = await raw.frame()
        assert ping.opcode is Opcode.PING  # not answered
        assert (await raw.close_frame()).code == 1011
        raw.close()


async def test_an_answered_ping_keeps_the_connection_and_idle_timeout_closes_1001():
    app, _ = make_app(WebSocketLimits(ping_interval=1, ping_timeout=1, idle_timeout=3))
    async with TestClient(app) as client:
        raw, _ = await RawWebSocket.open(client.port)
        pings = 0
        while True:
            frame = await raw.frame()
            if frame.opcode is Opcode.PING:
                pings += 1
                raw.send(Opcode.PONG, frame.data)
            elif frame.opcode is Opcode.CLOSE:
                break
        assert pings >= 1 and Close.parse(frame.data).code == 1001
        raw.close()


async def test_past_max_websockets_accept_answers_503():
    app, _ = make_app()
    async with TestClient(app, limits=Limits(max_websockets=1)) as client:
        async with client.ws_connect("/echo") as first:
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await client.ws_connect("/echo")
            assert refused.value.status == 503
            await first.send_str("still here")
            assert (await first.receive(timeout=5)).data == "still here"
            async with client.get("/echo") as response:  # an HTTP request is not refused for it
                assert response.status == 426


async def test_a_stopping_server_closes_websockets_with_1001():
    app, _ = make_app()
    client = TestClient(app)
    await client.start()
    try:
        ws = await client.ws_connect("/echo")
        stopping = asyncio.create_task(client.server.stop(timeout=5))
        message = await ws.receive(timeout=5)
        assert message.type is aiohttp.WSMsgType.CLOSE and message.data == 1001
        await ws.close()
        await stopping
    finally:
        await client.close()


async def test_pytest_aiohttps_ws_connect_works_against_an_aiorest_app(aiohttp_client):
    app, _ = make_app()
    client = await aiohttp_client(AiorestTestServer(app))
    async with client.ws_connect("/echo") as ws:
        await ws.send_str(os.urandom(4).hex())
        assert len((await ws.receive(timeout=5)).data) == 8


async def test_typed_messages_are_decoded_by_msgspec_and_a_wrong_one_closes_1007():
    msgspec = pytest.importorskip("msgspec")

    class Move(msgspec.Struct):
        x: int
        y: int

    app = App()

    @app.websocket("/moves")
    async def moves(ws: WebSocket) -> None:
        await ws.accept()
        while True:
            move = await ws.receive_json(Move)
            await ws.send_json(Move(move.y, move.x))

    async with TestClient(app) as client:
        async with client.ws_connect("/moves") as ws:
            await ws.send_json({"x": 1, "y": 2})
            assert await ws.receive_json(timeout=5) == {"x": 2, "y": 1}
            await ws.send_json({"x": "one"})
            message = await ws.receive(timeout=5)
            assert message.type is aiohttp.WSMsgType.CLOSE and message.data == 1007


async def test_an_open_websocket_holds_no_request_slot(aiohttp_client):
    app, _ = make_app()

    @app.get("/ping")
    async def ping(request):
        return {"pong": True}

    client = await aiohttp_client(AiorestTestServer(app, max_concurrency=1, queue_timeout=0.5))
    async with client.ws_connect("/echo") as ws:  # the only slot, were it a request
        async with client.get("/ping") as response:
            assert response.status == 200
        await ws.send_str("still open")
        assert (await ws.receive(timeout=5)).data == "still open"


async def test_the_origins_the_apps_cors_middleware_allows_may_open_websockets():
    app, _ = make_app()
    app.add_middleware(CORS(allow_origins=["https://app.example"]))
    async with TestClient(app) as client:
        async with client.ws_connect("/echo", origin="https://app.example") as ws:
            await ws.send_str("ok")
            assert (await ws.receive(timeout=5)).data == "ok"
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await client.ws_connect("/echo", origin="https://other.example")
        assert refused.value.status == 403


async def test_a_handler_that_fails_after_accept_closes_1011(caplog):
    app = App()

    @app.websocket("/fails")
    async def fails(ws: WebSocket) -> None:
        await ws.accept()
        await ws.receive()
        raise RuntimeError("a bug")

    async with TestClient(app) as client:
        async with client.ws_connect("/fails") as ws:
            await ws.send_str("go")
            message = await ws.receive(timeout=5)
            assert message.type is aiohttp.WSMsgType.CLOSE and message.data == 1011
    assert "a bug" in caplog.text


async def test_a_handler_behind_on_its_messages_stops_the_server_reading_then_gets_them_all():
    app = App()
    release = asyncio.Event()
    received: list[int] = []

    @app.websocket("/slow", limits=WebSocketLimits(max_queue=4))
    async def slow(ws: WebSocket) -> None:
        await ws.accept()
        await release.wait()
        async for message in ws:
            received.append(len(message))
            if len(received) == 640:
                await ws.send_text("all")

    async with TestClient(app) as client:
        raw, _ = await RawWebSocket.open(client.port, "/slow")
        for _ in range(640):  # 40 MiB: more than the kernel's buffers on both sides hold
            raw.send(Opcode.BINARY, b"x" * 65536)
        with pytest.raises(TimeoutError):  # the server stopped reading: the client's sends wait
            await asyncio.wait_for(raw.writer.drain(), 1.0)
        release.set()
        await asyncio.wait_for(raw.writer.drain(), 30)
        reply = await raw.frame()
        assert reply.data == b"all" and received == [65536] * 640
        raw.close()


@pytest.mark.parametrize(
    "test",
    [
        test_echo_of_text_bytes_and_json_with_async_iteration,
        test_extra_headers_and_pipelined_frames_after_the_upgrade_head,
        test_a_client_that_does_not_read_is_closed_1008_and_the_server_holds_little,
        test_a_handler_behind_on_its_messages_stops_the_server_reading_then_gets_them_all,
        test_a_stopping_server_closes_websockets_with_1001,
    ],
    ids=lambda test: test.__name__.removeprefix("test_")[:40],
)
def test_on_uvloop(test):
    """The hand-over of the transport (set_protocol) and its flow control are each loop's own: uvloop's too."""
    uvloop = pytest.importorskip("uvloop")
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(test())


async def test_a_decorators_middleware_runs_before_accept():
    """``@login_required`` (a decorator that puts middleware on the handler) guards a WebSocket route as
    it guards an HTTP one: before, the WebSocket endpoint hid the handler's middleware, and the route ran open."""
    from aiorest.security import Auth, BearerTokenIdentity, login_required

    async def lookup(token: str) -> str | None:
        return "ada" if token == "ada-token" else None

    app = App(middleware=[Auth(BearerTokenIdentity(lookup))])

    @app.websocket("/me")
    @login_required
    async def me(ws: WebSocket) -> None:
        await ws.accept()
        await ws.send_text("in")

    async with TestClient(app) as client:
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await client.ws_connect("/me")
        assert refused.value.status == 401
        async with client.ws_connect("/me", headers={"Authorization": "Bearer ada-token"}) as ws:
            assert (await ws.receive(timeout=5)).data == "in"


async def test_the_session_is_read_before_accept():
    app = App(middleware=[SessionMiddleware(CookieSessionStore(secrets=["a-secret-of-32-bytes-or-more-here"]))])

    @app.post("/login")
    async def login(request):
        request.session["user"] = "ada"
        return {}

    @app.websocket("/me")
    async def me(ws: WebSocket) -> None:
        user = ws.request.session.get("user")
        if user is None:
            raise HTTPUnauthorized("log in first")
        await ws.accept()
        await ws.send_text(user)

    async with TestClient(app) as client:
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await client.ws_connect("/me")
        assert refused.value.status == 401
        async with client.post("/login") as response:
            assert response.status == 200
        async with client.ws_connect("/me") as ws:  # the session cookie goes with the handshake
            assert (await ws.receive(timeout=5)).data == "ada"


async def test_unmasked_frames_reserved_opcodes_and_reserved_bits_close_1002():
    app, _ = make_app()
    async with TestClient(app) as client:
        for frame in (
            Frame(Opcode.TEXT, b"hi").serialize(mask=False, extensions=[]),  # a client's frames are masked
            bytes([0x80 | 0x3, 0x80]) + os.urandom(4),  # opcode 3: reserved
            bytes([0x80 | 0x20 | Opcode.TEXT, 0x80]) + os.urandom(4),  # RSV2, with no extension to own it
        ):
            raw, _ = await RawWebSocket.open(client.port)
            raw.writer.write(frame)
            assert (await raw.close_frame()).code == 1002, frame
            raw.close()


async def test_a_frame_larger_than_max_frame_closes_1009_though_the_message_would_fit():
    app, _ = make_app(WebSocketLimits(max_message=4096, max_frame=1024))
    async with TestClient(app) as client:
        raw, _ = await RawWebSocket.open(client.port)
        raw.send(Opcode.BINARY, b"x" * 1000)  # under both
        assert (await raw.frame()).data == b"x" * 1000
        raw.send(Opcode.BINARY, b"x" * 2000)  # a message max_message allows, in a frame max_frame does not
        assert (await raw.close_frame()).code == 1009
        raw.close()


async def test_a_handler_that_returns_without_accepting_is_403_and_one_that_returns_open_closes_1000():
    app = App()

    @app.websocket("/refuse")
    async def refuse(ws: WebSocket) -> None:
        return None

    @app.websocket("/done")
    async def done(ws: WebSocket) -> None:
        await ws.accept()
        await ws.send_text("that is all")

    async with TestClient(app) as client:
        raw, head = await RawWebSocket.open(client.port, "/refuse")
        assert head.startswith(b"HTTP/1.1 403 ")
        raw.close()
        async with client.ws_connect("/done") as ws:
            assert (await ws.receive(timeout=5)).data == "that is all"
            message = await ws.receive(timeout=5)
            assert message.type is aiohttp.WSMsgType.CLOSE and message.data == 1000


async def test_a_client_gone_without_a_close_frame_is_1006_to_the_handler():
    app, seen = make_app()
    async with TestClient(app) as client:
        raw, _ = await RawWebSocket.open(client.port)
        raw.send(Opcode.TEXT, b"hello")
        assert (await raw.frame()).data == b"hello"
        raw.writer.transport.abort()  # no close frame: the TCP connection just ends
        for _ in range(100):
            if "close" in seen:
                break
            await asyncio.sleep(0.02)
        assert seen["close"] == 1006


async def test_a_client_that_never_answers_the_close_is_dropped_after_close_timeout():
    app = App()

    @app.websocket("/bye", limits=WebSocketLimits(close_timeout=0.5))
    async def bye(ws: WebSocket) -> None:
        await ws.accept()
        await ws.close(4001, "bye now")

    async with TestClient(app) as client:
        raw, _ = await RawWebSocket.open(client.port, "/bye")
        assert (await raw.close_frame()).code == 4001  # and never an answer from this client
        # Dropped once close_timeout is past (checked on the server's once-a-second tick).
        assert await asyncio.wait_for(raw.reader.read(), 5) == b""
        raw.close()

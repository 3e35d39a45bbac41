"""A handler that declares ``WebSocket[Model]``: its messages decoded into the model, over a real socket."""

import aiohttp
import msgspec
import pytest

from aiorest import App, WebSocket
from aiorest.testing import TestClient


class Move(msgspec.Struct):
    x: int
    y: int


def moves_app() -> App:
    app = App()

    @app.websocket("/moves")
    async def moves(ws: WebSocket[Move]) -> None:
        await ws.accept()
        async for move in ws.iter_json():
            assert isinstance(move, Move)
            await ws.send_json(Move(move.y, move.x))

    @app.websocket("/first")
    async def first(ws: WebSocket[Move]) -> None:
        await ws.accept()
        move = await ws.receive_json()
        await ws.send_json({"type": type(move).__name__, "sum": move.x + move.y})

    @app.websocket("/raw")
    async def raw(ws: WebSocket) -> None:  # no type declared: JSON as the app's codec gives it
        await ws.accept()
        await ws.send_json({"type": type(await ws.receive_json()).__name__})

    return app


async def test_the_declared_model_decodes_each_message_and_a_wrong_one_closes_1007():
    async with TestClient(moves_app()) as client:
        async with client.ws_connect("/moves") as ws:
            for x, y in [(1, 2), (3, 4)]:
                await ws.send_json({"x": x, "y": y})
                assert await ws.receive_json(timeout=5) == {"x": y, "y": x}
            await ws.send_json({"x": "one", "y": 2})
            message = await ws.receive(timeout=5)
            assert message.type is aiohttp.WSMsgType.CLOSE and message.data == 1007


async def test_receive_json_uses_the_declared_model_and_an_undeclared_one_gives_plain_json():
    async with TestClient(moves_app()) as client:
        async with client.ws_connect("/first") as ws:
            await ws.send_json({"x": 1, "y": 2})
            assert await ws.receive_json(timeout=5) == {"type": "Move", "sum": 3}
        async with client.ws_connect("/raw") as ws:
            await ws.send_json({"x": 1, "y": 2})
            assert await ws.receive_json(timeout=5) == {"type": "dict"}


def test_a_declared_model_that_does_not_resolve_is_refused_when_the_route_is_made():
    app = App()
    with pytest.raises(TypeError, match="does not resolve"):

        @app.websocket("/missing")
        async def missing(ws: "WebSocket[NoSuchModel]") -> None: ...  # noqa: F821

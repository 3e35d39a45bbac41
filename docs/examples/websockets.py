"""WebSockets: an echo, and a chat room whose messages are typed, behind a bearer token."""

import msgspec

from aiorest import App, HTTPUnauthorized, WebSocket, WebSocketLimits

app = App()


@app.websocket("/echo")
async def echo(ws: WebSocket) -> None:
    await ws.accept()
    async for message in ws:  # text arrives as str, binary as bytes; the loop ends when the client closes
        await ws.send(message)


class Say(msgspec.Struct):
    text: str


class Said(msgspec.Struct):
    user: str
    text: str


rooms: dict[str, set[WebSocket]] = {}


async def bearer(request, handler):
    """Runs before the handler, so before the upgrade: a refusal is an HTTP 401."""
    token = request.headers.get("authorization", "")
    if not token.startswith("Bearer "):
        raise HTTPUnauthorized("a bearer token is needed", headers={"WWW-Authenticate": "Bearer"})
    request.state.user = token.removeprefix("Bearer ")
    return await handler(request)


@app.websocket(
    "/rooms/{room}",
    middleware=[bearer],
    limits=WebSocketLimits(max_message=4096, idle_timeout=300),
    origins=["https://chat.example"],
)
async def chat(ws: WebSocket[Say]) -> None:  # its messages are Says
    await ws.accept(subprotocol="chat.v1" if "chat.v1" in ws.subprotocols else None)
    user = ws.request.state.user
    members = rooms.setdefault(ws.request.path_params["room"], set())
    members.add(ws)
    try:
        async for say in ws.iter_json():  # each a Say; a message that is not one closes with 1007
            for member in list(members):
                await member.send_json(Said(user, say.text))
    finally:
        members.discard(ws)

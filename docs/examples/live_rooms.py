"""Rooms, behind authentication: users are checked before the upgrade, and each room is a set of members."""

import asyncio

from aiorest import App, HTTPUnauthorized, WebSocket, WebSocketDisconnect

app = App()
TOKENS = {"t-ada": "ada", "t-bob": "bob"}  # in an app: sessions (a cookie) or a token store


async def authenticate(request, handler):
    """Before the handler, so before the upgrade: a refusal is an HTTP 401 the client can read.

    A browser cannot set headers on a WebSocket: it sends its cookies, so check the session
    cookie there (and keep the route's Origin check, which stops other sites from using them).
    Other clients send ``Authorization``. Not a token in the query string: URLs end up in logs.
    """
    token = request.headers.get("authorization", "").removeprefix("Bearer ") or request.cookies.get("session")
    user = TOKENS.get(token or "")
    if user is None:
        raise HTTPUnauthorized("log in first", headers={"WWW-Authenticate": "Bearer"})
    request.state.user = user
    return await handler(request)


class Member:
    def __init__(self, ws: WebSocket, user: str) -> None:
        self.ws, self.user = ws, user
        self.inbox: asyncio.Queue[dict[str, str] | None] = asyncio.Queue(32)

    def deliver(self, message: dict[str, str]) -> bool:
        """Queue ``message`` without waiting; a member 32 behind is told it is out (None) instead."""
        try:
            self.inbox.put_nowait(message)
            return True
        except asyncio.QueueFull:
            while not self.inbox.empty():
                self.inbox.get_nowait()
            self.inbox.put_nowait(None)
            return False


rooms: dict[str, set[Member]] = {}
MAX_MEMBERS = 100


@app.websocket("/rooms/{room}", middleware=[authenticate], origins=["https://chat.example"])
async def room(ws: WebSocket) -> None:
    name = ws.request.path_params["room"]
    if len(rooms.get(name, ())) >= MAX_MEMBERS:
        return  # returning before accept refuses the connection (403)
    await ws.accept()
    members = rooms.setdefault(name, set())
    me = Member(ws, ws.request.state.user)
    members.add(me)
    sender = asyncio.create_task(forward(me))  # sends what others say, while this task reads
    try:
        async for text in ws:
            for member in list(members):
                if not member.deliver({"user": me.user, "text": str(text)}):
                    members.discard(member)  # too slow: its sender closes it with 1008
    finally:
        sender.cancel()
        members.discard(me)
        if not members:
            rooms.pop(name, None)  # no empty room stays behind


async def forward(member: Member) -> None:
    try:
        while (message := await member.inbox.get()) is not None:
            await member.ws.send_json(message)
        await member.ws.close(1008, "too slow: reconnect")
    except WebSocketDisconnect:
        pass

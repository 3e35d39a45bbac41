"""A browser logs in to a session; an API client sends a bearer token; both reach /me."""

import os

from aiorest import App, CookieSessionStore, Request, Router, SessionMiddleware
from aiorest.security import (
    AnyIdentity,
    Auth,
    BearerTokenIdentity,
    SessionIdentity,
    identity,
    login_required,
    token_hash,
    unauthorized,
)

SECRETS = [os.environ.get("SESSION_SECRET", "change-me-to-32-random-bytes-or-more")]
USERS = {1: {"id": 1, "name": "ada"}}
TOKENS = {token_hash("ada-api-token"): 1}  # stored as hashes: a leaked table gives no usable token


async def load_user(user_id: int) -> dict[str, object] | None:
    return USERS.get(user_id)


async def user_by_token(token: str) -> dict[str, object] | None:
    user_id = TOKENS.get(token_hash(token))
    return None if user_id is None else await load_user(user_id)


api = Router(
    middleware=[
        SessionMiddleware(CookieSessionStore(secrets=SECRETS)),
        Auth(AnyIdentity(SessionIdentity(load_user), BearerTokenIdentity(user_by_token))),
    ]
)


@api.post("/login")
async def login(request: Request) -> dict[str, object]:
    credentials = await request.json()
    if credentials.get("password") != "open sesame":  # a real app: await verify_password(stored, password)
        raise unauthorized(request, "wrong name or password")  # with the policies' WWW-Authenticate
    request.session.rotate()  # a new session id at login, against fixation
    request.session["user_id"] = 1
    return USERS[1]


@api.get("/me")
@login_required
async def me(request: Request) -> dict[str, object]:
    user: dict[str, object] = await identity(request)
    return user


@api.post("/logout")
async def logout(request: Request) -> None:
    request.session.invalidate()


app = App()
app.include(api)

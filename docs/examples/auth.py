"""Log in with a password, then call the API with a bearer token."""

import secrets
from dataclasses import dataclass, field

from aiorest import App, HTTPUnauthorized, Request
from aiorest.security import (
    Auth,
    BearerTokenIdentity,
    LoginRateLimiter,
    hash_password,
    identity,
    login_required,
    needs_rehash,
    requires,
    token_hash,
    verify_password,
)


@dataclass
class User:
    name: str
    password_hash: str = ""
    permissions: frozenset[str] = field(default_factory=frozenset)


USERS: dict[str, User] = {}  # a database table in a real app
TOKENS: dict[str, User] = {}  # sha256 of the token -> its user; never the token itself


async def lookup(token: str) -> User | None:
    return TOKENS.get(token_hash(token))


async def create_users(app: App) -> None:
    USERS["ada"] = User("ada", await hash_password("analytical engine"), frozenset({"reports:read"}))
    USERS["bob"] = User("bob", await hash_password("difference engine"))


limiter = LoginRateLimiter(per_account=(5, 60), per_address=(20, 60))
app = App(middleware=[Auth(identity=BearerTokenIdentity(lookup, realm="example"))], on_startup=[create_users])


@app.post("/login")
async def login(request: Request) -> dict[str, str]:
    body = await request.json()
    name, password = str(body.get("name", "")), str(body.get("password", ""))
    client = request.client
    user = USERS.get(name)
    with limiter.check(name, client[0] if client else None):  # 429 before any hash is computed
        matches = await verify_password(user.password_hash if user else None, password)  # a 503 is taken back
    if not matches or user is None:
        raise HTTPUnauthorized("wrong name or password")
    limiter.reset(name)
    if needs_rehash(user.password_hash):
        user.password_hash = await hash_password(password)
    token = secrets.token_urlsafe(32)
    TOKENS[token_hash(token)] = user
    return {"token": token}


@app.get("/me")
@login_required
async def me(request: Request) -> dict[str, str]:
    user = await identity(request)
    return {"name": user.name}


@app.get("/reports")
@requires("reports:read")
async def reports(request: Request) -> dict[str, list[str]]:
    return {"reports": ["q1", "q2"]}

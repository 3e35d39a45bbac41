"""A login that remembers the user in a signed cookie session."""

import os

from aiorest import App, CookieSessionStore, HTTPUnauthorized, Request, SessionMiddleware

# At least 32 random bytes, from the environment in production; the new secret
# goes first, the previous one after it until its cookies have expired.
SECRETS = [os.environ.get("SESSION_SECRET", "change-me-to-32-random-bytes-or-more")]

app = App(middleware=[SessionMiddleware(CookieSessionStore(secrets=SECRETS), max_age=3600)])


@app.post("/login")
async def login(request: Request) -> dict[str, str]:
    credentials = await request.json()
    if credentials.get("password") != "open sesame":
        raise HTTPUnauthorized("wrong password")
    request.session.rotate()  # a new id at login: an id planted earlier is worthless
    request.session["user"] = credentials["user"]
    return {"user": credentials["user"]}


@app.get("/me")
async def me(request: Request) -> dict[str, str]:
    user = request.session.get("user")
    if user is None:
        raise HTTPUnauthorized("log in first")
    return {"user": user}


@app.post("/logout")
async def logout(request: Request) -> dict[str, bool]:
    request.session.invalidate()
    return {"logged_out": True}

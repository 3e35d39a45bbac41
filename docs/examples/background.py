"""Background tasks: a sign-up answered at once, its welcome mail and audit line written after the response."""

import msgspec

from aiorest import App, BackgroundTasksFull, Limits, Request

app = App(limits=Limits(max_background_tasks=500))  # pending at most per worker; past it, 503

MAILBOX: list[str] = []  # stands in for a mail server
AUDIT: list[str] = []  # stands in for a file


async def send_welcome(address: str, *, name: str) -> None:  # async def: awaited on the event loop
    MAILBOX.append(f"Welcome, {name} <{address}>")


def write_audit(line: str) -> None:  # a plain function: run in the loop's default executor (a thread)
    AUDIT.append(line)


@app.post("/signups", status=201)
async def sign_up(request: Request) -> dict[str, str]:
    signup = await request.json()
    request.background.add(send_welcome, signup["email"], name=signup["name"])
    request.background.add(write_audit, f"signup {signup['email']}")
    return {"email": signup["email"]}


class Newsletter(msgspec.Struct):
    email: str


@app.post("/newsletter", status=202)
async def subscribe(body: Newsletter, request: Request) -> dict[str, bool]:  # a typed handler takes the request too
    try:
        request.background.add(send_welcome, body.email, name="subscriber")
    except BackgroundTasksFull:  # at the limit: subscribe without the mail rather than answer 503
        return {"welcome_mail": False}
    return {"welcome_mail": True}

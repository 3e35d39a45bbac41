"""CORS for one route, and a stricter one for a group of routes."""

from aiorest import CORS, App, Request, Router

app = App()
# Pages served from this origin may call this route and read its answers.
public = CORS(["https://app.example.com"], allow_headers=["Content-Type"])


@app.get("/catalog", middleware=[public])
async def catalog(request: Request) -> dict[str, list[str]]:
    return {"items": ["tea", "coffee"]}


# The account routes: one origin, with cookies, and PUT allowed.
account = Router(
    middleware=[
        CORS(
            ["https://account.example.com"],
            allow_methods=["GET", "PUT"],
            allow_headers=["Content-Type", "X-CSRF-Token"],
            expose_headers=["X-Request-Id"],
            allow_credentials=True,
            max_age=3600,
        )
    ]
)


@account.put("/me")
async def update_me(request: Request) -> dict[str, bool]:
    return {"saved": True}


app.include(account, "/account")

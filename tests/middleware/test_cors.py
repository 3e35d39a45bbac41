"""CORS middleware against the fetch standard's cases, over real sockets, and in a real browser."""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import subprocess
import tempfile
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from aiorest import (
    CORS,
    App,
    Compression,
    CookieSessionStore,
    HTTPConflict,
    Request,
    Response,
    Router,
    SessionMiddleware,
)
from aiorest.http.datastructures import Headers
from aiorest.http.response import add_vary
from aiorest.testing import TestClient

Client = Callable[..., Awaitable[TestClient]]
SITE = "https://app.example.com"
EVIL = "https://evil.example.net"
PREFLIGHT = "Access-Control-Request-Method"


def make_app(cors: CORS) -> App:
    app = App(middleware=[cors])

    @app.get("/items")
    async def items(request: Request) -> dict[str, int]:
        return {"n": 1}

    @app.put("/items/{id:int}")
    async def put_item(request: Request) -> dict[str, int]:
        return {"id": request.path_params["id"]}

    @app.get("/conflict")
    async def conflict(request: Request) -> None:
        raise HTTPConflict("taken", headers={"Vary": "Accept"})

    return app


async def test_allowed_origin_gets_its_origin_back(aiorest_client: Client) -> None:
    client = await aiorest_client(make_app(CORS([SITE], expose_headers=["X-Total"])))
    async with client.get("/items", headers={"Origin": SITE}) as response:
        assert response.status == 200 and await response.json() == {"n": 1}
        assert response.headers["Access-Control-Allow-Origin"] == SITE
        assert response.headers["Vary"] == "Origin"
        assert response.headers["Access-Control-Expose-Headers"] == "X-Total"
        assert "Access-Control-Allow-Credentials" not in response.headers


async def test_disallowed_origin_gets_no_cors_headers_but_the_handler_runs(aiorest_client: Client) -> None:
    client = await aiorest_client(make_app(CORS([SITE])))
    for origin in (EVIL, "null", SITE + "/", "x" * 600):
        async with client.get("/items", headers={"Origin": origin}) as response:
            assert response.status == 200 and await response.json() == {"n": 1}
            assert not [name for name in response.headers if name.lower().startswith("access-control-")]
            assert response.headers["Vary"] == "Origin"  # so that a cache keeps the answers apart
    async with client.get("/items") as response:  # same-origin or no browser
        assert "Access-Control-Allow-Origin" not in response.headers and response.headers["Vary"] == "Origin"


async def test_wildcard_without_credentials_answers_star(aiorest_client: Client) -> None:
    client = await aiorest_client(make_app(CORS("*")))
    async with client.get("/items", headers={"Origin": EVIL}) as response:
        assert response.headers["Access-Control-Allow-Origin"] == "*"
        assert "Vary" not in response.headers


async def test_wildcard_with_credentials_echoes_the_origin(aiorest_client: Client) -> None:
    client = await aiorest_client(make_app(CORS("*", allow_credentials=True)))
    async with client.get("/items", headers={"Origin": EVIL}) as response:
        assert response.headers["Access-Control-Allow-Origin"] == EVIL
        assert response.headers["Access-Control-Allow-Credentials"] == "true"
        assert response.headers["Vary"] == "Origin"


async def test_origin_regex(aiorest_client: Client) -> None:
    client = await aiorest_client(make_app(CORS(allow_origin_regex=r"https://[a-z]+\.example\.com")))
    async with client.get("/items", headers={"Origin": SITE}) as response:
        assert response.headers["Access-Control-Allow-Origin"] == SITE
    for origin in (EVIL, "https://app.example.com.evil.net"):  # matched in full only
        async with client.get("/items", headers={"Origin": origin}) as response:
            assert "Access-Control-Allow-Origin" not in response.headers


async def test_each_origin_gets_its_own_answer_from_the_answers_made_once(aiorest_client: Client) -> None:
    cors = CORS("*", allow_credentials=True)  # any origin: more than the 256 whose answers are kept
    client = await aiorest_client(make_app(cors))
    origins = [f"https://site{n}.example.com" for n in range(300)]
    for origin in [*origins, *origins[:3], *origins[-3:]]:
        async with client.get("/items", headers={"Origin": origin}) as response:
            assert response.headers.getall("Access-Control-Allow-Origin") == [origin]
            assert response.headers.getall("Vary") == ["Origin"]
            assert response.headers["Access-Control-Allow-Credentials"] == "true"
    assert len(cors._answers) == 256


async def test_error_responses_carry_cors_headers(aiorest_client: Client) -> None:
    client = await aiorest_client(make_app(CORS([SITE], allow_credentials=True)))
    async with client.get("/conflict", headers={"Origin": SITE}) as response:
        assert response.status == 409 and (await response.json())["error"]["message"] == "taken"
        assert response.headers["Access-Control-Allow-Origin"] == SITE
        assert response.headers["Access-Control-Allow-Credentials"] == "true"
        assert response.headers["Vary"] == "Accept, Origin"
    async with client.get("/nowhere", headers={"Origin": SITE}) as response:
        assert response.status == 404 and response.headers["Access-Control-Allow-Origin"] == SITE
    async with client.get("/conflict", headers={"Origin": EVIL}) as response:
        assert response.status == 409 and "Access-Control-Allow-Origin" not in response.headers


async def test_preflight_allowed(aiorest_client: Client) -> None:
    cors = CORS([SITE], allow_methods=["GET", "put"], allow_headers=["Content-Type", "X-Token"], max_age=120)
    client = await aiorest_client(make_app(cors))
    headers = {"Origin": SITE, PREFLIGHT: "PUT", "Access-Control-Request-Headers": "x-token,content-type"}
    async with client.options("/items/3", headers=headers) as response:
        assert response.status == 204
        assert response.headers["Access-Control-Allow-Origin"] == SITE
        assert response.headers["Access-Control-Allow-Methods"] == "GET, PUT"
        assert response.headers["Access-Control-Allow-Headers"] == "x-token, content-type"
        assert response.headers["Access-Control-Max-Age"] == "120"
        assert "Origin" in response.headers["Vary"]
        assert "Allow" not in response.headers  # answered by CORS, not by the app's OPTIONS


async def test_preflight_never_runs_the_handler(aiorest_client: Client) -> None:
    app = make_app(CORS([SITE]))
    runs: list[str] = []

    @app.route("/items", methods=["OPTIONS"])
    async def options(request: Request) -> None:
        runs.append(request.method)

    client = await aiorest_client(app)
    async with client.options("/items", headers={"Origin": SITE, PREFLIGHT: "GET"}) as response:
        assert response.status == 204 and response.headers["Access-Control-Allow-Origin"] == SITE
    async with client.options("/items", headers={"Origin": EVIL, PREFLIGHT: "GET"}) as response:
        assert response.status == 403
    assert runs == []
    async with client.options("/items", headers={"Origin": SITE}) as response:  # no preflight: the handler
        assert response.status == 204 and response.headers["Access-Control-Allow-Origin"] == SITE
    assert runs == ["OPTIONS"]


async def test_preflight_refusals(aiorest_client: Client) -> None:
    client = await aiorest_client(make_app(CORS([SITE], allow_methods=["GET", "PUT"], allow_headers=["X-Token"])))
    cases = [
        ({"Origin": EVIL, PREFLIGHT: "PUT"}, 403, "origin"),
        ({"Origin": "null", PREFLIGHT: "PUT"}, 403, "origin"),
        ({"Origin": SITE, PREFLIGHT: "DELETE"}, 403, "method DELETE"),
        ({"Origin": SITE, PREFLIGHT: "PUT", "Access-Control-Request-Headers": "x-token, x-other"}, 403, "x-other"),
        ({"Origin": SITE, PREFLIGHT: "P(T"}, 400, "malformed"),
        ({"Origin": SITE, PREFLIGHT: "PUT", "Access-Control-Request-Headers": "x-token, a b"}, 400, "malformed"),
        ({"Origin": SITE, PREFLIGHT: "PUT", "Access-Control-Request-Headers": ",".join(["x"] * 65)}, 400, "more than"),
        ({"Origin": SITE, PREFLIGHT: "PUT", "Access-Control-Request-Headers": "x" * 5000}, 400, "longer"),
        ({"Origin": "https://" + "a" * 600, PREFLIGHT: "PUT"}, 400, "longer"),
    ]
    for headers, status, words in cases:
        async with client.options("/items/3", headers=headers) as response:
            assert response.status == status, headers
            assert words in (await response.json())["error"]["message"]
            assert not [name for name in response.headers if name.lower().startswith("access-control-")]


async def test_options_without_request_method_is_an_actual_request(aiorest_client: Client) -> None:
    client = await aiorest_client(make_app(CORS([SITE])))
    async with client.options("/items", headers={"Origin": SITE}) as response:
        assert response.status == 204 and "GET" in response.headers["Allow"]
        assert response.headers["Access-Control-Allow-Origin"] == SITE


async def test_any_method_and_header_echo_what_was_asked_but_not_authorization(aiorest_client: Client) -> None:
    client = await aiorest_client(make_app(CORS([SITE], allow_methods="*", allow_headers=["*"])))
    headers = {"Origin": SITE, PREFLIGHT: "PATCH", "Access-Control-Request-Headers": "x-a"}
    async with client.options("/items", headers=headers) as response:
        assert response.status == 204
        assert response.headers["Access-Control-Allow-Methods"] == "PATCH"
        assert response.headers["Access-Control-Allow-Headers"] == "x-a"
    headers["Access-Control-Request-Headers"] = "authorization"
    async with client.options("/items", headers=headers) as response:
        assert response.status == 403
    client = await aiorest_client(make_app(CORS([SITE], allow_headers=["*", "Authorization"])))
    async with client.options("/items", headers={**headers, PREFLIGHT: "GET"}) as response:
        assert response.status == 204 and response.headers["Access-Control-Allow-Headers"] == "authorization"


async def test_per_route_and_per_router_cors_answer_their_own_preflights(aiorest_client: Client) -> None:
    group = Router(middleware=[CORS([SITE], allow_methods=["POST"])])

    @group.post("/orders/{id:int}")
    async def order(request: Request) -> dict[str, bool]:
        return {"ok": True}

    app = App()
    app.include(group, "/api")

    @app.get("/open", middleware=[CORS("*")])
    async def open_(request: Request) -> dict[str, bool]:
        return {"ok": True}

    @app.get("/closed")
    async def closed(request: Request) -> dict[str, bool]:
        return {"ok": True}

    client = await aiorest_client(app)
    async with client.options("/api/orders/1", headers={"Origin": SITE, PREFLIGHT: "POST"}) as response:
        assert response.status == 204 and response.headers["Access-Control-Allow-Origin"] == SITE
        assert response.headers["Access-Control-Allow-Methods"] == "POST"
    async with client.options("/api/orders/1", headers={"Origin": EVIL, PREFLIGHT: "POST"}) as response:
        assert response.status == 403
    async with client.post("/api/orders/1", headers={"Origin": SITE}) as response:
        assert response.status == 200 and response.headers["Access-Control-Allow-Origin"] == SITE
    async with client.options("/open", headers={"Origin": EVIL, PREFLIGHT: "GET"}) as response:
        assert response.status == 204 and response.headers["Access-Control-Allow-Origin"] == "*"
    async with client.options("/open") as response:  # a plain OPTIONS still gets the app's answer
        assert response.status == 204 and response.headers["Allow"] == "GET, HEAD, OPTIONS"
    async with client.options("/closed", headers={"Origin": SITE, PREFLIGHT: "GET"}) as response:
        assert response.status == 204 and "Access-Control-Allow-Origin" not in response.headers
    async with client.get("/closed", headers={"Origin": SITE}) as response:
        assert "Access-Control-Allow-Origin" not in response.headers


async def test_cors_middleware_do_not_nest() -> None:
    group = Router(middleware=[CORS([SITE])])

    @group.get("/a")
    async def a(request: Request) -> None:
        return None

    app = App(middleware=[CORS("*")])
    app.include(group)
    with pytest.raises(ValueError, match="route '/a' has CORS middleware, and so has the app"):
        await app.startup()

    app = App()
    app.include(group)
    app.add_route("PUT", "/a", a, middleware=[CORS([EVIL])])
    with pytest.raises(ValueError, match="the routes of '/a' have 2 CORS middleware"):
        await app.startup()

    shared = CORS([SITE])  # one object on several routes of a path is fine
    app = App()
    app.add_route("GET", "/b", a, middleware=[shared])
    app.add_route("PUT", "/b", a, middleware=[shared])
    await app.startup()
    await app.shutdown()


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"allow_origins": ["https://a.com/"]}, "trailing"),
        ({"allow_origins": ["a.com"]}, "not an origin"),
        ({"allow_origins": ["null"]}, "not an origin"),
        ({"allow_origins": "https://a.com"}, "list of str"),
        ({"allow_headers": ["X-Ok", "Bad Header"]}, "not a header name"),
        ({"expose_headers": ["X\r\nSet-Cookie: a=b"]}, "not a header name"),
        ({"allow_methods": ["GET", "PO ST"]}, "not a header name"),
        ({"max_age": -1}, "max_age"),
        ({"allow_credentials": "yes"}, "bool"),
    ],
)
def test_configuration_is_checked(kwargs: dict[str, Any], error: str) -> None:
    with pytest.raises((ValueError, TypeError), match=error):
        CORS(**kwargs)


# -- in a real browser ---------------------------------------------------------------------

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
PAGE = """<!doctype html><html><body><pre id="out">pending</pre><script>
async function probe(url, init) {
  try { const r = await fetch(url, {credentials: "include", ...init}); return "ok " + JSON.stringify(await r.json()); }
  catch (e) { return "blocked " + e.name; }
}
const put = (header) => ({method: "PUT", headers: {"Content-Type": "application/json", [header]: "1"}, body: "{}"});
(async () => {
  const a = await probe("http://localhost:%(allowed)d/api");
  const b = await probe("http://localhost:%(denied)d/api");
  const c = await probe("http://localhost:%(allowed)d/api", put("X-Token"));
  const d = await probe("http://localhost:%(allowed)d/api", put("X-Other"));
  document.getElementById("out").textContent = `A=${a} B=${b} C=${c} D=${d}`;
})();
</script></body></html>"""


@pytest.mark.slow  # a browser or a process of its own: not in the fast tier
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")
async def test_a_real_browser_reads_only_what_cors_allows() -> None:
    # The page comes from http://127.0.0.1:PORT (origin A); the APIs are on http://localhost:*
    # (other origins): one allows A with credentials, the other allows another origin only.
    page_app = App()
    holder: dict[str, str] = {}

    @page_app.get("/")
    async def page(request: Request) -> Any:
        from aiorest import Response

        return Response(holder["page"].encode(), media_type="text/html")

    def api(origins: list[str]) -> App:
        app = App(middleware=[CORS(origins, allow_credentials=True)])

        @app.get("/api")
        async def answer(request: Request) -> dict[str, bool]:
            return {"secret": True}

        return app

    # the allowed API's CORS is its routes': the browser's preflights for PUT reach it too
    allowed_api = App()
    cors = CORS(
        allow_origin_regex=r"http://127\.0\.0\.1:[0-9]+",  # the page's port is known once it listens
        allow_methods=["GET", "PUT"],
        allow_headers=["Content-Type", "X-Token"],
        allow_credentials=True,
    )

    @allowed_api.get("/api", middleware=[cors])
    async def read(request: Request) -> dict[str, bool]:
        return {"secret": True}

    @allowed_api.put("/api", middleware=[cors])
    async def write(request: Request) -> dict[str, bool]:
        return {"written": True}

    async with TestClient(page_app) as pages:
        origin = f"http://127.0.0.1:{pages.port}"
        async with TestClient(allowed_api) as allowed, TestClient(api(["http://127.0.0.1:1"])) as denied:
            holder["page"] = PAGE % {"allowed": allowed.port, "denied": denied.port}
            dom = await _dump_dom(f"{origin}/")
    assert 'A=ok {"secret":true}' in dom, dom
    assert "B=blocked TypeError" in dom, dom
    assert 'C=ok {"written":true}' in dom, dom  # after a preflight the route's CORS answered
    assert "D=blocked TypeError" in dom, dom  # X-Other refused by the preflight


async def _dump_dom(url: str) -> str:
    """Chromium's DOM of ``url`` once its scripts ran (--dump-dom), killed by pid if it hangs."""
    assert CHROMIUM is not None
    with tempfile.TemporaryDirectory() as profile:
        args = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
        args += [f"--user-data-dir={profile}", "--virtual-time-budget=5000", "--dump-dom", url]
        process = await asyncio.create_subprocess_exec(
            *args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env={**os.environ, "HOME": profile}
        )
        try:
            out, _ = await asyncio.wait_for(process.communicate(), timeout=15)
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
    return out.decode()


# -- Vary, whatever writes it and in whatever order ---------------------------------------

SECRET = "s" * 32
MIDDLEWARE: dict[str, Callable[[], Any]] = {
    "compression": lambda: Compression(minimum_size=100),
    "cors": lambda: CORS([SITE], allow_credentials=True),
    "sessions": lambda: SessionMiddleware(CookieSessionStore([SECRET])),
}


def vary_tokens(response: Any) -> list[str]:
    return [token.strip() for value in response.headers.getall("Vary", []) for token in value.split(",")]


@pytest.mark.parametrize("own", [None, "Cookie", "accept-encoding, X-Tenant", "*"], ids=str)
@pytest.mark.parametrize("order", list(itertools.permutations(MIDDLEWARE)), ids="-".join)
async def test_every_writer_adds_to_vary_in_any_order(aiorest_client: Client, order: tuple[str, ...], own: Any) -> None:
    app = App()
    group = Router(middleware=[MIDDLEWARE[name]() for name in order])

    @group.get("/page")
    async def page(request: Request) -> Response:
        request.session["seen"] = request.session.get("seen", 0) + 1
        return Response("words " * 200, headers={"Vary": own} if own else None)

    app.include(group)
    client = await aiorest_client(app)
    headers = {"Origin": SITE, "Accept-Encoding": "gzip"}
    async with client.get("/page", headers=headers, auto_decompress=False) as response:
        assert response.status == 200
        assert response.headers["Access-Control-Allow-Origin"] == SITE
        assert response.headers["Content-Encoding"] == "gzip" and "Set-Cookie" in response.headers
        tokens = vary_tokens(response)
    if own == "*":
        assert tokens == ["*"]
        return
    expected = {"origin", "accept-encoding", *(token.strip().lower() for token in (own or "").split(",") if token)}
    assert len(tokens) == len({token.lower() for token in tokens}), tokens  # no name twice
    assert {token.lower() for token in tokens} == expected, tokens


async def test_an_error_s_vary_keeps_its_names_in_any_case(aiorest_client: Client) -> None:
    app = App(middleware=[CORS([SITE])])

    @app.get("/conflict")
    async def conflict(request: Request) -> None:
        raise HTTPConflict("taken", headers={"vary": "Accept"})  # lower case: still the same field

    client = await aiorest_client(app)
    async with client.get("/conflict", headers={"Origin": SITE}) as response:
        assert response.status == 409 and response.headers.getall("Vary") == ["Accept, Origin"]


def test_add_vary_merges_names_once_and_star_absorbs_them() -> None:
    headers = Headers([("Vary", "Cookie"), ("vary", "origin, cookie")])
    add_vary(headers, "Origin", "Accept-Encoding")
    assert headers.getall("Vary") == ["Cookie, origin, Accept-Encoding"]
    add_vary(headers, "ACCEPT-ENCODING")
    assert headers.getall("Vary") == ["Cookie, origin, Accept-Encoding"]
    star = Headers({"Vary": "Cookie, *"})
    add_vary(star, "Origin")
    assert star.getall("Vary") == ["*"]
    empty = Headers()
    add_vary(empty, "Origin")
    assert empty.items() == [("Vary", "Origin")]

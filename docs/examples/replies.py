"""What a handler can return."""

from collections.abc import AsyncIterator

from aiorest import App, JSONResponse, Request, Response, StreamResponse

app = App()


@app.get("/dict")
async def as_dict(request: Request) -> dict[str, int]:
    return {"answer": 42}  # 200, application/json


@app.get("/list")
async def as_list(request: Request) -> list[int]:
    return [1, 2, 3]  # 200, application/json


@app.put("/nothing")
async def nothing(request: Request) -> None:
    return None  # 204, no body


@app.post("/created")
async def created(request: Request) -> JSONResponse:
    return JSONResponse({"id": 7}, status=201, headers={"Location": "/things/7"})


@app.get("/text")
async def text(request: Request) -> Response:
    return Response("plain text")  # text/plain; charset=utf-8


@app.get("/csv")
async def csv(request: Request) -> Response:
    return Response("a,b\n1,2\n", media_type="text/csv", headers={"Cache-Control": "no-store"})


@app.get("/numbers")
async def numbers(request: Request) -> StreamResponse:
    async def lines() -> AsyncIterator[str]:
        for n in range(3):
            yield f"{n}\n"

    return StreamResponse(lines(), media_type="text/plain")


@app.post("/login")
async def login(request: Request) -> Response:
    response = Response(status=204)
    response.set_cookie("session", "abc123", max_age=3600, httponly=True, secure=True)
    return response


@app.post("/logout")
async def logout(request: Request) -> Response:
    response = Response(status=204)
    response.delete_cookie("session")
    return response

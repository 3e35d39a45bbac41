"""Raising HTTP errors and mapping your own exceptions to responses."""

from typing import Any

from aiorest import App, HTTPError, HTTPForbidden, HTTPServiceUnavailable, JSONResponse, Request

app = App()


class OutOfStock(Exception):
    def __init__(self, sku: str) -> None:
        super().__init__(sku)
        self.sku = sku


@app.exception_handler(OutOfStock)
async def out_of_stock(request: Request, exc: OutOfStock) -> JSONResponse:
    body = {"error": {"status": 409, "message": "out of stock", "details": {"sku": exc.sku}}}
    return JSONResponse(body, status=409)


@app.get("/admin")
async def admin(request: Request) -> dict[str, Any]:
    raise HTTPForbidden("admins only", headers={"WWW-Authenticate": 'Bearer realm="admin"'})


@app.post("/orders/{sku}")
async def order(request: Request) -> dict[str, Any]:
    raise OutOfStock(request.path_params["sku"])


@app.get("/maintenance")
async def maintenance(request: Request) -> dict[str, Any]:
    raise HTTPServiceUnavailable("back soon", retry_after=120)


@app.get("/teapot")
async def teapot(request: Request) -> dict[str, Any]:
    raise HTTPError("short and stout", status=418, details={"capacity_ml": 500})


@app.get("/bug")
async def bug(request: Request) -> dict[str, Any]:
    return {"ratio": 1 / 0}  # ZeroDivisionError: logged, generic 500 to the client

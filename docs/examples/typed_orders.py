"""Typed handlers: inputs declared and validated by their types, a response model out."""

from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from aiorest import App, Cookie, Header, HTTPNotFound, Query, Request

app = App()


class Line(msgspec.Struct):
    sku: Annotated[str, Meta(pattern="^[A-Z]{3}-[0-9]+$")]
    quantity: Annotated[int, Meta(ge=1, le=99)] = 1


class NewOrder(msgspec.Struct):
    customer: Annotated[str, Meta(min_length=1, max_length=80)]
    lines: Annotated[list[Line], Meta(min_length=1)]
    note: str | None = None


class Order(msgspec.Struct):
    id: int
    customer: str
    lines: list[Line]
    status: Literal["open", "shipped"] = "open"


ORDERS: dict[int, Order] = {}


@app.post("/orders", status=201, headers={"Cache-Control": "no-store"})
async def place_order(order: NewOrder, x_client: Annotated[str | None, Header()] = None) -> Order:
    placed = Order(id=len(ORDERS) + 1, customer=order.customer, lines=order.lines)
    ORDERS[placed.id] = placed
    return placed


@app.get("/orders/{order_id:int}")
async def get_order(order_id: Annotated[int, Meta(ge=1)]) -> Order:
    try:
        return ORDERS[order_id]
    except KeyError:
        raise HTTPNotFound(f"no order {order_id}") from None


@app.get("/orders")
async def list_orders(
    status: Literal["open", "shipped"] | None = None,
    ids: list[int] | None = None,
    limit: Annotated[int, Meta(ge=1, le=100)] = 20,
) -> list[Order]:
    found = [order for order in ORDERS.values() if status is None or order.status == status]
    if ids is not None:
        found = [order for order in found if order.id in ids]
    return found[:limit]


class Page(msgspec.Struct):
    limit: Annotated[int, Meta(ge=1, le=100)] = 20
    offset: Annotated[int, Meta(ge=0)] = 0


@app.get("/customers")
async def list_customers(
    request: Request,
    page: Annotated[Page, Query()],
    session: Annotated[str | None, Cookie("session")] = None,
) -> dict[str, object]:
    names = sorted({order.customer for order in ORDERS.values()})
    return {
        "customers": names[page.offset : page.offset + page.limit],
        "signed_in": session is not None,
        "self": request.url_for("list_customers"),
    }

"""Orders that a client may send again: the same Idempotency-Key makes one order, answered alike."""

import itertools

from aiorest import App, Idempotency, MemoryIdempotencyStore, Request

app = App()
# One process: keys in its memory. Several processes or hosts: PostgresIdempotencyStore.
app.add_middleware(Idempotency(MemoryIdempotencyStore(), scope=lambda request: request.headers.get("X-Customer")))
orders: list[dict[str, object]] = []
numbers = itertools.count(1)


@app.post("/orders", status=201)
async def place(request: Request) -> dict[str, object]:
    order = {"number": next(numbers), **(await request.json())}
    orders.append(order)
    return order

"""A stock counter on PostgreSQL: the pool, row helpers, a transaction, errors as answers."""

from aiorest import App, HTTPNotFound, Request
from aiorest.db import Database

app = App()
db = Database(min_size=1, max_size=8)  # the DSN comes from $DATABASE_URL
db.setup(app)  # opened at startup, closed at shutdown; also app.state.db


async def create_table(app: App) -> None:
    await db.execute("CREATE TABLE IF NOT EXISTS stock (sku text PRIMARY KEY, qty int NOT NULL CHECK (qty >= 0))")


app.on_startup.append(create_table)  # after db.setup(app): the pool is open by then


@app.post("/stock/{sku}")
async def add_item(request: Request) -> dict[str, object]:
    # A second insert of the same sku is a unique violation: 409, not a 500.
    return await db.fetchone("INSERT INTO stock VALUES (%s, 0) RETURNING sku, qty", (request.path_params["sku"],))


@app.get("/stock/{sku}")
async def get_item(request: Request) -> dict[str, object]:
    row = await db.fetchone("SELECT sku, qty FROM stock WHERE sku = %s", (request.path_params["sku"],))
    if row is None:
        raise HTTPNotFound("no such item")
    return row


@app.post("/stock/{sku}/move/{to}")
async def move_one(request: Request) -> dict[str, int]:
    sku, to = request.path_params["sku"], request.path_params["to"]
    async with db.transaction():  # both updates, or neither
        # Going below zero breaks the CHECK constraint: 422, and the transaction rolls back.
        await db.execute("UPDATE stock SET qty = qty - 1 WHERE sku = %s", (sku,))
        moved = await db.execute("UPDATE stock SET qty = qty + 1 WHERE sku = %s", (to,))
        if not moved:
            raise HTTPNotFound("no such destination")  # rolls back the first update too
    return {"moved": 1}

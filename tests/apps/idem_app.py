"""An app that dies mid-request, for the crash tests of the idempotency keys (tests/middleware/test_idempotency.py).

POST /notes inserts a row into ``idem_crash`` through the request's transaction
(PostgresIdempotencyStore on ``$DATABASE_URL``). ``X-Die: before-commit`` kills
the process after the insert, before anything commits; ``X-Die: after-commit``
once the key and the row have committed, before the answer is sent.
"""

import os
import signal
from typing import Any

from aiorest import App, Request, Response
from aiorest.db import Database
from aiorest.middleware.idempotency import Idempotency, PostgresIdempotencyStore

db = Database(os.environ["DATABASE_URL"], min_size=1, max_size=4)
app = App()
db.setup(app)


async def die_after_commit(request: Request, handler: Any) -> Response:
    response: Response = await handler(request)
    if request.headers.get("x-die") == "after-commit":
        os.kill(os.getpid(), signal.SIGKILL)
    return response


app.add_middleware(die_after_commit)
app.add_middleware(Idempotency(PostgresIdempotencyStore(db)))


@app.post("/notes", status=201)
async def create(request: Request) -> dict[str, Any]:
    title = (await request.json())["title"]
    row = await db.fetchone("INSERT INTO idem_crash (title) VALUES (%s) RETURNING id", (title,))
    if request.headers.get("x-die") == "before-commit":
        os.kill(os.getpid(), signal.SIGKILL)
    assert row is not None
    return {"id": row["id"], "pid": os.getpid()}


@app.get("/ready")
async def ready(request: Request) -> dict[str, bool]:
    return {"ready": True}

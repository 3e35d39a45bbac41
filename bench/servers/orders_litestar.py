"""The Litestar contender of the typed benchmark (bench/typed.py): msgspec Structs, uvicorn (httptools, uvloop)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Annotated

import uvicorn
from litestar import Litestar, get, post
from litestar.params import Parameter

sys.path.insert(0, str(Path(__file__).resolve().parent))
from orders_models import Accepted, Order  # noqa: E402


@post("/orders", status_code=200)
async def create_order(data: Order, source: Annotated[str, Parameter(max_length=16)] = "web") -> Accepted:
    return Accepted(source=source, order=data)


@get("/ready")
async def ready() -> dict[str, bool]:
    return {"ready": True}


app = Litestar([create_order, ready])

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    port = parser.parse_args().port
    uvicorn.run(
        app, host="127.0.0.1", port=port, loop="uvloop", http="httptools", log_level="warning", access_log=False
    )

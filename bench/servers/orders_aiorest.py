"""The aiorest contender of the typed benchmark (bench/typed.py): POST /orders, a typed handler."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Annotated

from msgspec import Meta

sys.path.insert(0, str(Path(__file__).resolve().parent))
from orders_models import Accepted, Order  # noqa: E402

from aiorest import App  # noqa: E402

app = App()


@app.post("/orders")
async def create_order(order: Order, source: Annotated[str, Meta(max_length=16)] = "web") -> Accepted:
    return Accepted(source=source, order=order)


@app.get("/ready")
async def ready() -> dict[str, bool]:
    return {"ready": True}


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    app.run(host="127.0.0.1", port=parser.parse_args().port, log_level="warning")

"""The FastAPI contender of the typed benchmark (bench/typed.py): pydantic models, uvicorn (httptools, uvloop)."""

from __future__ import annotations

import argparse
from typing import Annotated

import uvicorn
from fastapi import FastAPI, Query
from pydantic import BaseModel, Field

app = FastAPI()


class Line(BaseModel):
    sku: Annotated[str, Field(max_length=32)]
    quantity: Annotated[int, Field(ge=1)]
    price_cents: Annotated[int, Field(ge=0)]


class Order(BaseModel):
    customer: Annotated[str, Field(min_length=1)]
    email: Annotated[str, Field(max_length=254)]
    street: Annotated[str, Field(max_length=128)]
    city: Annotated[str, Field(max_length=64)]
    country: Annotated[str, Field(min_length=2)]
    postcode: Annotated[str, Field(max_length=16)]
    note: Annotated[str, Field(max_length=500)]
    priority: Annotated[int, Field(le=9)]
    total_cents: Annotated[int, Field(ge=0)]
    lines: Annotated[list[Line], Field(min_length=1)]


class Accepted(BaseModel):
    source: str
    order: Order


@app.post("/orders")
async def create_order(order: Order, source: Annotated[str, Query(max_length=16)] = "web") -> Accepted:
    return Accepted(source=source, order=order)


@app.get("/ready")
async def ready() -> dict[str, bool]:
    return {"ready": True}


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    port = parser.parse_args().port
    uvicorn.run(
        app, host="127.0.0.1", port=port, loop="uvloop", http="httptools", log_level="warning", access_log=False
    )

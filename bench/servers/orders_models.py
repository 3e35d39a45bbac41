"""The typed benchmark's order (bench/typed.py): ten fields, one constraint each, as msgspec Structs.

aiorest and Litestar validate these same Structs; FastAPI's pydantic models in
``orders_fastapi.py`` declare the same constraints.
"""

from __future__ import annotations

from typing import Annotated

import msgspec
from msgspec import Meta


class Line(msgspec.Struct):
    sku: Annotated[str, Meta(max_length=32)]
    quantity: Annotated[int, Meta(ge=1)]
    price_cents: Annotated[int, Meta(ge=0)]


class Order(msgspec.Struct):
    customer: Annotated[str, Meta(min_length=1)]
    email: Annotated[str, Meta(max_length=254)]
    street: Annotated[str, Meta(max_length=128)]
    city: Annotated[str, Meta(max_length=64)]
    country: Annotated[str, Meta(min_length=2)]
    postcode: Annotated[str, Meta(max_length=16)]
    note: Annotated[str, Meta(max_length=500)]
    priority: Annotated[int, Meta(le=9)]
    total_cents: Annotated[int, Meta(ge=0)]
    lines: Annotated[list[Line], Meta(min_length=1)]


class Accepted(msgspec.Struct):
    """The answer: the order as validated, with the query parameter."""

    source: str
    order: Order

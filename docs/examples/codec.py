"""A custom JSON codec: the standard library's json, taught dates, UUIDs and decimals."""

import datetime
import decimal
import json
import uuid
from typing import Any

from aiorest import App, JSONCodec, Request
from aiorest.http import get_codec


def default(value: Any) -> Any:
    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()
    if isinstance(value, (uuid.UUID, decimal.Decimal)):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def dumps(value: Any) -> bytes:
    return json.dumps(value, default=default, separators=(",", ":"), ensure_ascii=False).encode()


# The built-in json codec's loads: strict (no NaN, no 1e999, no lone surrogate); ValueError → 400.
loads = get_codec("json").loads


app = App(json=JSONCodec("json+dates", dumps, loads))


@app.get("/invoice")
async def invoice(request: Request) -> dict[str, Any]:
    return {
        "id": uuid.UUID("12345678-1234-5678-1234-567812345678"),
        "due": datetime.date(2030, 1, 31),
        "total": decimal.Decimal("19.90"),
    }

"""Path parameter converters: a regex, ``convert`` for matching, ``to_string`` for url_for.

A converter's regex must not contain capturing groups: the router combines all
dynamic routes into one pattern and relies on the group numbering.
"""

from __future__ import annotations

import math
import uuid
from decimal import Decimal
from typing import Any, Protocol

__all__ = [
    "Convertor",
    "StringConvertor",
    "IntConvertor",
    "FloatConvertor",
    "UUIDConvertor",
    "PathConvertor",
    "DEFAULT_CONVERTORS",
]


class Convertor(Protocol):
    regex: str

    def convert(self, value: str) -> Any:
        """Turn the matched text into a Python value; raise ValueError to refuse the match."""

    def to_string(self, value: Any) -> str:
        """Turn a value back into path text (for url_for)."""


class StringConvertor:
    regex = "[^/]+"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: Any) -> str:
        text = str(value)
        if not text or "/" in text:
            raise ValueError(f"a str path parameter must be non-empty and hold no '/', got {text!r}")
        return text


class IntConvertor:
    regex = "[0-9]+"

    def convert(self, value: str) -> int:
        return int(value)

    def to_string(self, value: Any) -> str:
        number = int(value)
        if number < 0:
            raise ValueError(f"an int path parameter must not be negative, got {number}")
        return str(number)


class FloatConvertor:
    regex = r"[0-9]+(?:\.[0-9]+)?"

    def convert(self, value: str) -> float:
        return float(value)

    def to_string(self, value: Any) -> str:
        number = float(value)
        if number < 0 or not math.isfinite(number):
            raise ValueError(f"a float path parameter must be finite and not negative, got {number}")
        text = repr(number)
        if "e" in text:  # the regex has no exponent: write 1e-05 as 0.00001
            text = format(Decimal(text), "f")
        return text


class UUIDConvertor:
    regex = "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"

    def convert(self, value: str) -> uuid.UUID:
        return uuid.UUID(value)

    def to_string(self, value: Any) -> str:
        return str(uuid.UUID(str(value)))


class PathConvertor:
    regex = ".*"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: Any) -> str:
        return str(value)


DEFAULT_CONVERTORS: dict[str, Convertor] = {
    "str": StringConvertor(),
    "int": IntConvertor(),
    "float": FloatConvertor(),
    "uuid": UUIDConvertor(),
    "path": PathConvertor(),
}

"""Path parameter converters: a regex, ``convert`` for matching, ``to_string`` for url_for.

The router combines all dynamic routes into one pattern and relies on its group
numbering: a converter's groups are made non-capturing (:func:`route_regex`).
"""

from __future__ import annotations

import functools
import math
import re
import typing
import uuid
from collections.abc import Iterator
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
    "route_regex",
    "python_type",
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


def python_type(convertor: Convertor) -> Any:
    """The type ``convertor.convert`` gives, read from its return annotation; None when it has none.

    Typed handlers check a path parameter's annotation against it, and the
    OpenAPI document describes the parameter with it.
    """
    try:
        return typing.get_type_hints(type(convertor).convert).get("return")
    except Exception:  # an annotation that does not resolve says nothing
        return None


def route_regex(name: str, convertor: Convertor) -> str:
    """``convertor.regex`` as the route table uses it: every group non-capturing.

    ``(en|fr)`` and ``(?P<lang>en|fr)`` become ``(?:en|fr)``. Raises ValueError naming
    the converter for a regex that does not compile inside a route's pattern, or
    that needs its groups (a backreference, a conditional group).
    """
    return _non_capturing(name, type(convertor).__name__, convertor.regex)


@functools.lru_cache(maxsize=256)
def _non_capturing(name: str, kind: str, regex: str) -> str:
    where = f"converter {name!r} ({kind}): regex {regex!r}"
    try:
        groups = re.compile(regex).groups
    except re.error as exc:
        raise ValueError(f"{where} does not compile: {exc}") from None
    converted = regex
    if groups:
        converted = "".join(_without_groups(regex))
        try:
            # Alone, so that a reference to a group it had fails here instead of
            # finding another route's group in the route table's pattern.
            left = re.compile(converted).groups
        except re.error as exc:
            raise ValueError(
                f"{where} refers to its own groups ({exc}): the route table makes them non-capturing, "
                "so it cannot hold a backreference or a conditional group"
            ) from None
        if left:  # a group _without_groups did not see (in a verbose-mode comment, say)
            raise ValueError(f"{where}: write its groups as non-capturing ones, (?:...)")
    try:
        re.compile(f"/({converted})/")  # as a route's pattern holds it: global flags only work at its start
    except re.error as exc:
        raise ValueError(f"{where} does not compile inside a route's pattern: {exc}") from None
    return converted


def _without_groups(regex: str) -> Iterator[str]:
    """The pieces of ``regex`` with ``(`` and ``(?P<name>`` written ``(?:``.

    Escapes, character classes (where ``(`` is a character), ``(?#...)`` comments
    and the ``(?(1)`` of a conditional are kept as they are; other ``(?``
    extensions are not groups that capture.
    """
    i, end = 0, len(regex)
    while i < end:
        char = regex[i]
        if char == "\\":
            yield regex[i : i + 2]
            i += 2
        elif char == "[":
            close = _class_end(regex, i)
            yield regex[i:close]
            i = close
        elif regex.startswith("(?P<", i):
            yield "(?:"
            i = regex.index(">", i) + 1
        elif regex.startswith(("(?#", "(?("), i):  # a comment; a condition's group name or number
            close = regex.index(")", i) + 1
            yield regex[i:close]
            i = close
        elif regex.startswith("(?", i):
            yield "(?"
            i += 2
        elif char == "(":
            yield "(?:"
            i += 1
        else:
            yield char
            i += 1


def _class_end(regex: str, start: int) -> int:
    """The index after the ``]`` that closes the character class opened at ``start``."""
    i = start + 1
    if regex.startswith("^", i):
        i += 1
    if regex.startswith("]", i):  # a ``]`` first in the class is a character
        i += 1
    while i < len(regex) and regex[i] != "]":
        i += 2 if regex[i] == "\\" else 1
    return i + 1

"""Pluggable JSON codecs. ujson is the default; orjson is one setting away.

What they write is JSON: ujson and json refuse a float that is not finite
(the response is a 500), orjson writes it as ``null``.

A codec is two functions: ``dumps(obj) -> bytes`` and ``loads(bytes) -> object``.
``loads`` raises ``ValueError`` (or a subclass) on malformed input, including
input that is not valid UTF-8, and on JSON that no codec could send back: a
number that is not finite (``NaN``, ``Infinity``, or ``1e999``, which parsers
read as infinity) or a string with a lone surrogate (``"\\ud800"``).
"""

from __future__ import annotations

import json as _stdlib_json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["JSONCodec", "get_codec"]


@dataclass(frozen=True, slots=True)
class JSONCodec:
    """A named pair of JSON functions."""

    name: str
    dumps: Callable[[Any], bytes]
    loads: Callable[[bytes], Any]


def _stdlib() -> JSONCodec:
    encoder = _stdlib_json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)

    def dumps(obj: Any) -> bytes:
        return encoder.encode(obj).encode()

    def loads(data: bytes) -> Any:
        text = data.decode("utf-8")
        try:
            value = _stdlib_json.loads(text)
        except RecursionError:
            raise ValueError("JSON nested too deeply") from None
        if _may_be_unsendable(data, text):
            _check_sendable(value)
        return value

    return JSONCodec("json", dumps, loads)


def _ujson() -> JSONCodec:
    import ujson

    ujson_dumps = ujson.dumps
    ujson_loads = ujson.loads

    def dumps(obj: Any) -> bytes:
        # Positional (ensure_ascii, encode_html_chars, escape_forward_slashes,
        # sort_keys, indent, allow_nan): ujson parses keyword arguments slowly,
        # 0.3 µs a call (measured). allow_nan off: NaN and Infinity are not JSON.
        return ujson_dumps(obj, False, False, False, False, 0, False).encode()

    def loads(data: bytes) -> Any:
        # ujson accepts some invalid UTF-8; decoding first makes it strict.
        text = data.decode("utf-8")
        value = ujson_loads(text)
        if _may_be_unsendable(data, text):
            _check_sendable(value)
        return value

    return JSONCodec("ujson", dumps, loads)


def _orjson() -> JSONCodec:
    import orjson

    # orjson.loads already refuses NaN, Infinity, numbers out of range and lone surrogates.
    return JSONCodec("orjson", orjson.dumps, orjson.loads)


# ujson and json read NaN, Infinity and -Infinity, numbers past the double range
# (as infinity), and \ud800 escapes without their other half (as lone surrogates):
# values that no codec encodes back to JSON. Finding them in the decoded value
# means walking all of it, so a few scans of the body first decide whether it
# can hold one at all; ordinary bodies stop there.
#
# A number is past the double range (1.8e308) only if its exponent has three
# digits or more, or its integer part 210 digits or more (10**209 * 1e99 is
# still below the limit). In the skeleton every digit and "+" is "0" and "E"
# is "e": "e000" covers 1e999, 1E+400 and 1e0400, a run of 210 "0" the rest.
_SKELETON = bytes.maketrans(b"0123456789+E", b"00000000000e")
_LONG_MANTISSA = b"0" * 210
_SURROGATE = re.compile(r"[\ud800-\udfff]")


def _may_be_unsendable(data: bytes, text: str) -> bool:
    """False if ``text`` (``data`` decoded) surely holds no value ``_check_sendable`` refuses."""
    # Single characters first: a one-character search is a memchr, several times faster.
    if "\\" in text and ("\\ud" in text or "\\uD" in text):
        return True
    if ("N" in text and "NaN" in text) or ("I" in text and "Infinity" in text):
        return True
    skeleton = data.translate(_SKELETON)
    # find(), not "in": bytes.__contains__ costs about 50 ns more a call (measured).
    return skeleton.find(b"e000") >= 0 or (len(skeleton) >= len(_LONG_MANTISSA) and skeleton.find(_LONG_MANTISSA) >= 0)


def _check_sendable(value: Any) -> None:
    """Raise ValueError if ``value`` holds a number that is not finite or a lone surrogate."""
    pending = [value]  # a list, not recursion: ujson nests up to 1024 deep
    while pending:
        item = pending.pop()
        if type(item) is float:
            if not math.isfinite(item):
                raise ValueError(f"numbers must be finite, got {item} (NaN, Infinity or past the double range)")
        elif type(item) is str:
            if not item.isascii() and (match := _SURROGATE.search(item)) is not None:
                raise ValueError(f"strings must be valid Unicode, got a lone surrogate \\u{ord(match[0]):04x}")
        elif type(item) is dict:
            pending.extend(item)
            pending.extend(item.values())
        elif type(item) is list:
            pending.extend(item)


_FACTORIES: dict[str, Callable[[], JSONCodec]] = {
    "ujson": _ujson,
    "orjson": _orjson,
    "json": _stdlib,
}


def get_codec(codec: str | JSONCodec) -> JSONCodec:
    """Resolve ``"ujson"``, ``"orjson"``, ``"json"`` or a ``JSONCodec`` to a codec."""
    if isinstance(codec, JSONCodec):
        return codec
    try:
        factory = _FACTORIES[codec]
    except KeyError:
        raise ValueError(
            f"unknown JSON codec {codec!r}; choose one of {sorted(_FACTORIES)} or pass a JSONCodec"
        ) from None
    try:
        return factory()
    except ImportError as exc:
        raise RuntimeError(f"JSON codec {codec!r} is not installed: pip install {codec}") from exc

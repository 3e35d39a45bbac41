"""Validators, conditional requests and byte ranges (RFC 9110 §8.8, §13, §14), without I/O.

FileResponse (files.py) asks these functions what to answer once it knows a
file's size and modification time; they read header values and return
decisions, so that they can be tested without a file or a socket.
"""

from __future__ import annotations

from email.utils import formatdate, parsedate_to_datetime
from functools import lru_cache

__all__ = ["MAX_RANGES", "http_date", "parse_date", "etag_matches", "parse_ranges", "accepts_coding"]

# More ranges than this in one request are served as the whole file (RFC 9110 §14.2
# lets a server ignore Range): a request for thousands of tiny ranges would cost a
# part head each, far more than the bytes asked for.
MAX_RANGES = 16


@lru_cache(maxsize=1024)
def http_date(timestamp: float) -> str:
    """An IMF-fixdate (``Sun, 06 Nov 1994 08:49:37 GMT``) for a Unix time (a file's mtime: remembered)."""
    return formatdate(timestamp, usegmt=True)


def parse_date(value: str) -> float | None:
    """An HTTP date as a Unix time, None when it is not one (then the condition is ignored, §13.1.3)."""
    try:
        parsed = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if parsed.tzinfo is None:  # an obsolete form without a zone: HTTP dates are GMT
        return None
    return parsed.timestamp()


def _opaque(tag: str) -> tuple[bool, str]:
    tag = tag.strip()
    if tag.startswith("W/"):
        return True, tag[2:]
    return False, tag


def etag_matches(header: str, etag: str, *, weak: bool) -> bool:
    """Whether ``etag`` is in the list of an If-Match/If-None-Match value (``*`` matches any).

    ``weak`` comparison (If-None-Match) ignores the ``W/`` prefixes; strong comparison
    (If-Match, If-Range) needs both tags strong and equal (§8.8.3.2).
    """
    if header.strip() == "*":
        return True
    own_weak, own = _opaque(etag)
    for candidate in header.split(","):
        other_weak, other = _opaque(candidate)
        if other == own and (weak or not (own_weak or other_weak)):
            return True
    return False


def parse_ranges(header: str, size: int) -> list[tuple[int, int]] | None:
    """The satisfiable ranges of a ``Range`` value as (first, last) pairs, in the order asked.

    None means "ignore the header and send the whole file": not a bytes range set we
    understand, more than MAX_RANGES ranges, or ranges that overlap (§14.2 allows a
    server to ignore such a request, which is how some clients ask twice for the same
    bytes to amplify a response). An empty list means none is satisfiable: 416.
    """
    unit, _, spec = header.partition("=")
    if unit.strip().lower() != "bytes" or not spec.strip():
        return None
    parts = spec.split(",")
    if len(parts) > MAX_RANGES:
        return None
    ranges: list[tuple[int, int]] = []
    for part in parts:
        part = part.strip()
        if not part:
            continue  # the list may hold empty elements (§5.6.1)
        first_text, dash, last_text = part.partition("-")
        first_text, last_text = first_text.strip(), last_text.strip()
        if not dash or not (first_text or last_text):
            return None
        if not all(text.isdigit() and text.isascii() for text in (first_text, last_text) if text):
            return None
        if not first_text:  # a suffix: the last N bytes
            length = int(last_text)
            if length == 0 or size == 0:
                continue
            ranges.append((max(size - length, 0), size - 1))
            continue
        first = int(first_text)
        last = int(last_text) if last_text else size - 1
        if last < first:
            return None  # invalid syntax: the whole header is ignored
        if first >= size:
            continue  # unsatisfiable
        ranges.append((first, min(last, size - 1)))
    ordered = sorted(ranges)
    if any(later[0] <= earlier[1] for earlier, later in zip(ordered, ordered[1:], strict=False)):
        return None
    return ranges


def accepts_coding(accept_encoding: str | None, coding: str) -> bool:
    """Whether an ``Accept-Encoding`` value admits ``coding`` (named, or by ``*``, with q > 0)."""
    if not accept_encoding:
        return False
    star = False
    for item in accept_encoding.split(","):
        name, _, params = item.partition(";")
        name = name.strip().lower()
        q = 1.0
        for param in params.split(";"):
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        if name == coding:
            return q > 0
        if name == "*":
            star = q > 0
    return star

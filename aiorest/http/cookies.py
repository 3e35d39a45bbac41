"""Cookie parsing (request) and ``Set-Cookie`` formatting (response)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from email.utils import format_datetime
from http.cookies import _unquote
from typing import Literal

from .datastructures import check_header_value
from .validators import parse_http_date

__all__ = ["parse_cookie", "format_set_cookie"]

SameSite = Literal["lax", "strict", "none"]

# RFC 6265 cookie-name is a token; the value may not hold CTLs, whitespace,
# DQUOTE, comma, semicolon or backslash unless the whole value is quoted.
_NAME_RE = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_QUOTED_ESCAPES = str.maketrans({"\\": "\\\\", '"': '\\"', ";": "\\073", ",": "\\054"})
_PLAIN_VALUE_RE = re.compile(r"^[!#-+\--:<-\[\]-~]*$")


def _expiry(expires: datetime | float | str) -> datetime:
    """The ``expires`` of a cookie as an aware datetime in UTC."""
    if isinstance(expires, str):
        return parse_http_date(expires, "expires")
    if isinstance(expires, datetime):
        if expires.utcoffset() is None:
            # Local time or UTC? Both readings are common (now() and utcnow()): refuse to guess.
            raise ValueError(f"expires {expires!r} has no time zone; give it one, as datetime.now(UTC) has")
        return expires.astimezone(UTC)
    if not isinstance(expires, (int, float)) or isinstance(expires, bool):
        raise TypeError(f"expires must be a datetime, a Unix timestamp or an HTTP date, not {type(expires).__name__}")
    try:
        return datetime.fromtimestamp(expires, UTC)
    except (OverflowError, OSError, ValueError) as exc:
        raise ValueError(f"expires {expires!r} is not a usable Unix timestamp: {exc}") from None


def parse_cookie(header: str) -> dict[str, str]:
    """Parse a ``Cookie`` request header leniently, as browsers send it.

    Pairs without ``=`` and empty names are skipped; the first of repeated names wins.
    """
    cookies: dict[str, str] = {}
    for chunk in header.split(";"):
        name, sep, value = chunk.partition("=")
        name = name.strip()
        if not sep or not name:
            continue
        cookies.setdefault(name, _unquote(value.strip()))
    return cookies


def format_set_cookie(
    key: str,
    value: str = "",
    *,
    max_age: int | None = None,
    expires: datetime | float | str | None = None,
    path: str | None = "/",
    domain: str | None = None,
    secure: bool = False,
    httponly: bool = False,
    samesite: SameSite | None = "lax",
) -> str:
    """Build one ``Set-Cookie`` header value; invalid names or attributes raise ValueError."""
    if not _NAME_RE.match(key):
        raise ValueError(f"invalid cookie name {key!r}: it must be a token (letters, digits, !#$%&'*+-.^_`|~)")
    if not _PLAIN_VALUE_RE.match(value):
        check_header_value(value, f"cookie value for {key!r}")
        # Quoted, with ; and , as octal escapes (http.cookies' way, which parse_cookie
        # reads back): browsers end a cookie's value at the first ; whatever the
        # quotes, and the rest would be read as attributes (Domain=, Max-Age=).
        value = '"' + value.translate(_QUOTED_ESCAPES) + '"'
    parts = [f"{key}={value}"]
    if max_age is not None:
        parts.append(f"Max-Age={int(max_age)}")
    if expires is not None:
        parts.append(f"Expires={format_datetime(_expiry(expires), usegmt=True)}")
    for attr, text in (("Path", path), ("Domain", domain)):
        if text is not None:
            check_header_value(text, f"cookie {attr.lower()}")
            if ";" in text:
                raise ValueError(f"invalid cookie {attr.lower()} {text!r}: ';' would end the attribute")
            parts.append(f"{attr}={text}")
    if secure:
        parts.append("Secure")
    if httponly:
        parts.append("HttpOnly")
    if samesite is not None:
        if not isinstance(samesite, str) or samesite.lower() not in ("lax", "strict", "none"):
            raise ValueError(f"samesite must be 'lax', 'strict' or 'none', not {samesite!r}")
        parts.append(f"SameSite={samesite.capitalize()}")
    return "; ".join(parts)

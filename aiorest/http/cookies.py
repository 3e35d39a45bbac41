"""Cookie parsing (request) and ``Set-Cookie`` formatting (response)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from email.utils import format_datetime
from http.cookies import _unquote
from typing import Literal

from .datastructures import check_header_value

__all__ = ["parse_cookie", "format_set_cookie"]

SameSite = Literal["lax", "strict", "none"]

# RFC 6265 cookie-name is a token; the value may not hold CTLs, whitespace,
# DQUOTE, comma, semicolon or backslash unless the whole value is quoted.
_NAME_RE = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_QUOTED_ESCAPES = str.maketrans({"\\": "\\\\", '"': '\\"', ";": "\\073", ",": "\\054"})
_PLAIN_VALUE_RE = re.compile(r"^[!#-+\--:<-\[\]-~]*$")


# RFC 9110, 5.6.7: an HTTP-date is an IMF-fixdate; a recipient also accepts the
# two obsolete forms. All three are case-sensitive and in GMT.
#   IMF-fixdate   Sun, 06 Nov 1994 08:49:37 GMT
#   rfc850-date   Sunday, 06-Nov-94 08:49:37 GMT
#   asctime-date  Sun Nov  6 08:49:37 1994
_DAY = "(?P<day>Mon|Tue|Wed|Thu|Fri|Sat|Sun)"
_MONTH = "(?P<month>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_TIME = r"(?P<hour>\d\d):(?P<minute>\d\d):(?P<second>\d\d)"
_HTTP_DATES = [
    re.compile(rf"{_DAY}, (?P<mday>\d\d) {_MONTH} (?P<year>\d{{4}}) {_TIME} GMT", re.ASCII),
    re.compile(
        r"(?P<day>Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday), "
        rf"(?P<mday>\d\d)-{_MONTH}-(?P<yy>\d\d) {_TIME} GMT",
        re.ASCII,
    ),
    re.compile(rf"{_DAY} {_MONTH} (?P<mday>[ \d]\d) {_TIME} (?P<year>\d{{4}})", re.ASCII),
]
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


def _parse_http_date(text: str) -> datetime:
    """An HTTP-date in any of its three forms, as an aware datetime in UTC."""
    for form in _HTTP_DATES:
        match = form.fullmatch(text)
        if match is not None:
            break
    else:
        raise ValueError(f"expires {text!r} is not an HTTP date such as 'Wed, 21 Oct 2037 07:28:00 GMT'")
    fields = match.groupdict()
    if fields.get("yy") is not None:
        # A two-digit year more than 50 years ahead is the last such year past (RFC 9110, 5.6.7).
        this_year = datetime.now(UTC).year
        year = this_year - this_year % 100 + int(fields["yy"])
        if year > this_year + 50:
            year -= 100
    else:
        year = int(fields["year"])
    try:
        moment = datetime(
            year,
            _MONTHS.index(fields["month"]) + 1,
            int(fields["mday"]),
            int(fields["hour"]),
            int(fields["minute"]),
            min(int(fields["second"]), 59),  # 60 is a leap second, which datetime cannot hold
            tzinfo=UTC,
        )
    except ValueError as exc:
        raise ValueError(f"expires {text!r} is not a date: {exc}") from None
    if _DAYS[moment.weekday()] != fields["day"][:3]:
        raise ValueError(f"expires {text!r} names the wrong day: that date is a {_DAYS[moment.weekday()]}")
    return moment


def _expiry(expires: datetime | float | str) -> datetime:
    """The ``expires`` of a cookie as an aware datetime in UTC."""
    if isinstance(expires, str):
        return _parse_http_date(expires)
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

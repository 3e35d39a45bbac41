"""The validators of a representation (RFC 9110, 8.8): entity-tags and HTTP dates.

Parsed and checked here, apart from the rest of the package (this module imports
none of it), so that :class:`~aiorest.http.Headers` can check an ``ETag`` or a
``Last-Modified`` when a handler sets it, and the cookies and the conditional
requests read dates the same way.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Literal, NamedTuple

__all__ = ["ETag", "parse_etags", "check_etag", "parse_http_date", "format_http_date", "check_validator"]


class ETag(NamedTuple):
    """An entity-tag: its opaque ``tag`` (without the quotes) and whether it is ``weak`` (``W/``).

    ``str()`` gives it as sent in a header: ``'"3"'``, ``'W/"3"'``.
    """

    tag: str
    weak: bool = False

    def __str__(self) -> str:
        return f'{"W/" if self.weak else ""}"{self.tag}"'


# RFC 9110, 8.8.3: entity-tag = [ "W/" ] DQUOTE *etagc DQUOTE; etagc = %x21 / %x23-7E / obs-text.
# A comma is an etagc, so a list cannot be split on commas: it is scanned a member at a time.
_ETAGC = r"[\x21\x23-\x7e\x80-\xff]*"
_ETAG = re.compile(rf'(W/)?"({_ETAGC})"')
_MEMBER = re.compile(rf'[ \t]*(?:(W/)?"({_ETAGC})")?[ \t]*(?:,|\Z)')


def check_etag(value: str) -> ETag:
    """The entity-tag an ``ETag`` header value is; ValueError unless it is exactly one (``"3"``, ``W/"3"``)."""
    match = _ETAG.fullmatch(value)
    if match is None:
        raise ValueError(f"invalid ETag {value!r}: an entity-tag is quoted, as '\"3\"' or 'W/\"3\"'")
    return ETag(match.group(2), match.group(1) is not None)


def parse_etags(value: str) -> list[ETag] | Literal["*"]:
    """The entity-tags of an ``If-Match`` or ``If-None-Match`` value: ``"*"``, or a list (maybe empty).

    Empty members (``"a", , "b"``) are skipped, as RFC 9110, 5.6.1 asks; anything
    else that is not an entity-tag raises ValueError.
    """
    if value.strip(" \t") == "*":
        return "*"
    tags = []
    position, end = 0, len(value)
    while position < end:
        match = _MEMBER.match(value, position)
        if match is None or match.end() == position:
            raise ValueError(f'{value!r} is not a list of entity-tags such as \'"3", W/"4"\', nor *')
        if match.group(2) is not None:
            tags.append(ETag(match.group(2), match.group(1) is not None))
        position = match.end()
    return tags


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


def parse_http_date(text: str, what: str) -> datetime:
    """An HTTP-date in any of its three forms, as an aware datetime in UTC; ``what`` names it in errors."""
    for form in _HTTP_DATES:
        match = form.fullmatch(text)
        if match is not None:
            break
    else:
        raise ValueError(f"{what} {text!r} is not an HTTP date such as 'Wed, 21 Oct 2037 07:28:00 GMT'")
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
        raise ValueError(f"{what} {text!r} is not a date: {exc}") from None
    if _DAYS[moment.weekday()] != fields["day"][:3]:
        raise ValueError(f"{what} {text!r} names the wrong day: that date is a {_DAYS[moment.weekday()]}")
    return moment


def format_http_date(moment: datetime) -> str:
    """``moment`` (aware) as an IMF-fixdate, the form an HTTP date is sent in."""
    moment = moment.astimezone(UTC)
    day, month = _DAYS[moment.weekday()], _MONTHS[moment.month - 1]
    return f"{day}, {moment.day:02d} {month} {moment.year:04d} {moment:%H:%M:%S} GMT"


def check_validator(lname: str, value: str) -> None:
    """Refuse an ``etag`` or ``last-modified`` header value (``lname``, lower case) that is not one."""
    if lname == "etag":
        check_etag(value)
    elif lname == "last-modified":
        parse_http_date(value, "Last-Modified")

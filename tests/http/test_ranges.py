"""The range, validator and Accept-Encoding decisions of FileResponse, byte by byte, without a file."""

from __future__ import annotations

import pytest

from aiorest.http.ranges import MAX_RANGES, accepts_coding, etag_matches, http_date, parse_date, parse_ranges


@pytest.mark.parametrize(
    ("header", "size", "expected"),
    [
        ("bytes=0-0", 10, [(0, 0)]),
        ("bytes=0-", 10, [(0, 9)]),
        ("bytes=-20", 10, [(0, 9)]),  # a suffix longer than the file: the whole file
        ("bytes=8-100", 10, [(8, 9)]),
        ("bytes= 0-1 , 4-5", 10, [(0, 1), (4, 5)]),
        ("bytes=4-5,0-1", 10, [(4, 5), (0, 1)]),  # the order asked is kept
        ("BYTES=0-1", 10, [(0, 1)]),
        ("bytes=0-1,,2-3", 10, [(0, 1), (2, 3)]),
        ("bytes=10-20", 10, []),  # nothing satisfiable: 416
        ("bytes=-0", 10, []),
        ("bytes=0-0", 0, []),
        ("bytes=5-2", 10, None),  # invalid: ignored
        ("bytes=a-b", 10, None),
        ("bytes=-", 10, None),
        ("bytes=1", 10, None),
        ("bytes=+1-2", 10, None),
        ("bytes=١-٢", 10, None),  # digits, but not ASCII ones
        ("bytes=", 10, None),
        ("items=0-1", 10, None),
        ("bytes=0-5,3-8", 10, None),  # overlapping
        ("bytes=0-1,1-2", 10, None),
        ("bytes=" + ",".join(f"{n}-{n}" for n in range(MAX_RANGES + 1)), 100, None),
    ],
)
def test_parse_ranges(header, size, expected):
    assert parse_ranges(header, size) == expected


def test_as_many_ranges_as_allowed_are_served():
    header = "bytes=" + ",".join(f"{n}-{n}" for n in range(0, 2 * MAX_RANGES, 2))
    assert len(parse_ranges(header, 100)) == MAX_RANGES


def test_etag_comparisons():
    assert etag_matches('"a"', '"a"', weak=False)
    assert etag_matches('W/"a"', '"a"', weak=True) and not etag_matches('W/"a"', '"a"', weak=False)
    assert etag_matches('"x", "a"', '"a"', weak=True)
    assert etag_matches("*", '"a"', weak=False)
    assert not etag_matches('"b"', '"a"', weak=True)


def test_dates_round_trip_and_bad_dates_are_none():
    assert parse_date(http_date(784111777)) == 784111777
    assert http_date(784111777) == "Sun, 06 Nov 1994 08:49:37 GMT"
    assert parse_date("not a date") is None
    assert parse_date("") is None


@pytest.mark.parametrize(
    ("header", "coding", "expected"),
    [
        ("gzip", "gzip", True),
        ("gzip;q=0", "gzip", False),
        ("GZIP ; Q=0.5", "gzip", True),
        ("*", "br", True),
        ("*;q=0", "br", False),
        ("*, br;q=0", "br", False),
        ("deflate", "gzip", False),
        (None, "gzip", False),
        ("", "gzip", False),
        ("gzip;q=x", "gzip", False),
    ],
)
def test_accepts_coding(header, coding, expected):
    assert accepts_coding(header, coding) is expected

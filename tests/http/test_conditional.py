"""Conditional requests (RFC 9110, 13): entity-tag lists, comparisons, 304 and 412, on real sockets."""

from __future__ import annotations

import datetime

import pytest

from aiorest import App, ETag, HTTPNotModified, HTTPPreconditionFailed, Request, Response, check_preconditions
from aiorest.http import Headers, parse_etags
from tests.rawclient import fetch, get

UTC = datetime.UTC
CHANGED = datetime.datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)
CHANGED_TEXT = "Mon, 06 May 2024 07:08:09 GMT"
BEFORE = "Mon, 06 May 2024 07:08:08 GMT"


# -- parsing and set-time checks -------------------------------------------------------------------


def test_parse_etags_reads_lists_weak_tags_commas_inside_and_star():
    assert parse_etags("*") == "*"
    assert parse_etags(' "a,b" , W/"c",, ""') == [ETag("a,b"), ETag("c", weak=True), ETag("")]
    assert parse_etags("") == []
    assert str(ETag("3")) == '"3"' and str(ETag("3", weak=True)) == 'W/"3"'


@pytest.mark.parametrize("value", ["3", '"3', 'w/"3"', '"a" "b"', '"a"x', '*, "a"', '"a\\"b"'])
def test_parse_etags_refuses_what_is_not_an_entity_tag_list(value):
    with pytest.raises(ValueError):
        parse_etags(value)


@pytest.mark.parametrize("value", ["3", '"a", "b"', "W/3", '"a b"', '""x'])
def test_an_invalid_etag_is_refused_when_set(value):
    with pytest.raises(ValueError, match="ETag"):
        Response(b"", headers={"ETag": value})
    with pytest.raises(ValueError, match="ETag"):
        Headers()["etag"] = value
    with pytest.raises(ValueError):
        HTTPNotModified(headers={"ETag": value})


def test_an_invalid_last_modified_is_refused_when_set():
    with pytest.raises(ValueError, match="Last-Modified"):
        Response(b"").headers["Last-Modified"] = "yesterday"
    Response(b"").headers["Last-Modified"] = CHANGED_TEXT  # a date passes


# -- the answer-time check: a handler's ETag and Last-Modified against GET and HEAD -----------------


def resource_app(etag: str | None = '"v2"', last_modified: str | None = None) -> App:
    app = App()

    @app.get("/r")
    async def read(request: Request) -> Response:
        headers = {"Cache-Control": "max-age=60", "Vary": "Accept", "Content-Language": "en"}
        if etag is not None:
            headers["ETag"] = etag
        if last_modified is not None:
            headers["Last-Modified"] = last_modified
        return Response(b'{"the":"body"}', headers=headers, media_type="application/json")

    @app.get("/plain")
    async def plain(request: Request) -> dict[str, int]:
        return {"no": 1}

    return app


@pytest.mark.parametrize(
    "field",
    ['If-None-Match: "v2"', 'If-None-Match: W/"v2"', 'If-None-Match: "x", "v2"', "If-None-Match: *"],
)
async def test_if_none_match_that_matches_weakly_answers_304_with_the_cache_headers(aiorest_client, field):
    client = await aiorest_client(resource_app())
    [response] = await fetch(client.port, get("/r", field))
    assert response.status == 304
    assert response.body == b""
    assert response.header("etag") == '"v2"'
    assert response.header("cache-control") == "max-age=60"
    assert response.header("vary") == "Accept"
    assert response.header("date") is not None
    # RFC 9110, 15.4.5: no metadata of the body not sent, no Content-Length of it
    assert response.header("content-length") is None
    assert response.header("content-type") is None
    assert response.header("content-language") is None


async def test_a_weak_etag_of_the_handler_matches_if_none_match_weakly(aiorest_client):
    client = await aiorest_client(resource_app(etag='W/"v2"'))
    [response] = await fetch(client.port, get("/r", 'If-None-Match: "v2"'))
    assert response.status == 304


@pytest.mark.parametrize("field", ['If-None-Match: "v1"', 'If-None-Match: "V2"', "If-None-Match: "])
async def test_if_none_match_that_does_not_match_answers_the_representation(aiorest_client, field):
    client = await aiorest_client(resource_app())
    [response] = await fetch(client.port, get("/r", field))
    assert response.status == 200 and response.body == b'{"the":"body"}'


async def test_head_answers_304_too_and_a_second_request_on_the_connection_is_read_right(aiorest_client):
    client = await aiorest_client(resource_app())
    head = b'HEAD /r HTTP/1.1\r\nHost: t\r\nIf-None-Match: "v2"\r\n\r\n'
    [first, second] = await fetch(client.port, head + get("/plain"), count=2)
    assert first.status == 304
    assert second.status == 200 and second.body == b'{"no":1}'


async def test_if_modified_since_against_last_modified(aiorest_client):
    client = await aiorest_client(resource_app(etag=None, last_modified=CHANGED_TEXT))
    [same, older, bad] = await fetch(
        client.port,
        get("/r", f"If-Modified-Since: {CHANGED_TEXT}")
        + get("/r", f"If-Modified-Since: {BEFORE}")
        + get("/r", "If-Modified-Since: not a date"),  # ignored (RFC 9110, 13.1.3)
        count=3,
    )
    assert same.status == 304 and same.header("last-modified") == CHANGED_TEXT
    assert older.status == 200
    assert bad.status == 200


async def test_if_none_match_takes_precedence_over_if_modified_since(aiorest_client):
    client = await aiorest_client(resource_app(last_modified=CHANGED_TEXT))
    [response] = await fetch(client.port, get("/r", 'If-None-Match: "v1"', f"If-Modified-Since: {CHANGED_TEXT}"))
    assert response.status == 200  # the tag differs: the date is not looked at


async def test_a_failing_if_match_on_get_answers_412(aiorest_client):
    client = await aiorest_client(resource_app())
    [weak, other, star] = await fetch(
        client.port,
        get("/r", 'If-Match: W/"v2"') + get("/r", 'If-Match: "v1"') + get("/r", "If-Match: *"),
        count=3,
    )
    assert weak.status == 412  # strong comparison: a weak tag never matches
    assert other.status == 412
    assert star.status == 200


async def test_a_malformed_if_none_match_is_400(aiorest_client):
    client = await aiorest_client(resource_app())
    [response] = await fetch(client.port, get("/r", "If-None-Match: v2"))
    assert response.status == 400


# -- check_preconditions: before a write -----------------------------------------------------------


def writes_app(log: list[str]) -> App:
    app = App()
    current = {"etag": '"7"'}

    @app.route("/doc", methods=["GET", "PUT"])
    async def doc(request: Request) -> Response:
        check_preconditions(request, etag=current["etag"], last_modified=CHANGED, headers={"Cache-Control": "no-cache"})
        if request.method == "PUT":
            log.append("written")
            current["etag"] = '"8"'
        return Response(b"doc", headers={"ETag": current["etag"]})

    return app


def put(path: str, *headers: str) -> bytes:
    extra = "".join(f"{header}\r\n" for header in headers)
    return f"PUT {path} HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n{extra}\r\n".encode()


async def test_check_preconditions_refuses_a_stale_if_match_before_the_write(aiorest_client):
    log: list[str] = []
    client = await aiorest_client(writes_app(log))
    [stale, weak, fresh, again] = await fetch(
        client.port,
        put("/doc", 'If-Match: "6"')
        + put("/doc", 'If-Match: W/"7"')
        + put("/doc", 'If-Match: "6", "7"')
        + put("/doc", 'If-Match: "7"'),
        count=4,
    )
    assert [stale.status, weak.status, fresh.status, again.status] == [412, 412, 200, 412]
    assert log == ["written"]  # one write: the others stopped before it


async def test_check_preconditions_if_unmodified_since_and_its_precedence(aiorest_client):
    log: list[str] = []
    client = await aiorest_client(writes_app(log))
    [older, alone_ok, with_if_match] = await fetch(
        client.port,
        put("/doc", f"If-Unmodified-Since: {BEFORE}")
        + put("/doc", f"If-Unmodified-Since: {CHANGED_TEXT}")
        + put("/doc", 'If-Match: "8"', f"If-Unmodified-Since: {BEFORE}"),  # If-Match wins: the date is ignored
        count=3,
    )
    assert [older.status, alone_ok.status, with_if_match.status] == [412, 200, 200]
    assert log == ["written", "written"]


async def test_check_preconditions_if_none_match_star_refuses_a_write_and_304s_a_read(aiorest_client):
    log: list[str] = []
    client = await aiorest_client(writes_app(log))
    [write, read] = await fetch(
        client.port, put("/doc", "If-None-Match: *") + get("/doc", 'If-None-Match: "7"'), count=2
    )
    assert write.status == 412 and log == []
    assert read.status == 304
    assert read.header("etag") == '"7"'
    assert read.header("last-modified") == CHANGED_TEXT
    assert read.header("cache-control") == "no-cache"
    assert read.header("content-length") is None and read.body == b""


async def test_check_preconditions_refuses_a_bad_etag_or_a_naive_date_as_the_handler_bug_it_is(aiorest_client):
    app = App()

    @app.get("/bad-etag")
    async def bad_etag(request: Request) -> None:
        check_preconditions(request, etag="7")

    @app.get("/naive")
    async def naive(request: Request) -> None:
        check_preconditions(request, last_modified=datetime.datetime(2024, 1, 1))

    client = await aiorest_client(app)
    [bad, naive_date] = await fetch(client.port, get("/bad-etag") + get("/naive"), count=2)
    assert bad.status == 500 and naive_date.status == 500


def test_not_modified_is_a_304():
    assert HTTPNotModified().status == 304 and HTTPPreconditionFailed.status == 412

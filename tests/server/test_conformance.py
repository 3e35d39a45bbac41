"""One conformance suite, three servers: example_app on aiorest and the threaded baselines (load/baseline/).

The load comparison is like for like only if all three serve the same API: the
same statuses, JSON shapes, error details and headers. Each server runs as a
subprocess on one migrated database, is started once for the module and is
stopped with SIGTERM at the end, as the load tool runs them.

Each server process limits logins to 20 a minute from one address (127.0.0.1
here), /login and /tokens together: the module logs its users in once, in
fixtures, and the whole module makes fewer than 20 attempts per server.
"""

from __future__ import annotations

import email.utils
import hashlib
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from html import escape
from pathlib import Path
from typing import IO, Any

import psycopg2
import pytest

from aiorest.middleware.sessions import stored_id
from example_app.app import MIGRATE_ARGS
from harness.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
POOL = "4"  # small: the suite checks answers, not throughput
COMMANDS = {
    "aiorest": ["-m", "aiorest", "run", "example_app:app", "--port", "{port}", "--log-level", "warning"],
    "flask": ["-m", "load.baseline.flask_app", "--port", "{port}", "--threads", POOL, "--pool", POOL],
    "stdlib": ["-m", "load.baseline.stdlib_app", "--port", "{port}", "--pool", POOL],
}
JSON = "application/json"
IMF_FIXDATE = re.compile(r"(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d\d [A-Z][a-z]{2} \d{4} \d\d:\d\d:\d\d GMT")
NOTE_KEYS = {"id", "title", "body", "done", "version", "created_at", "updated_at"}
SCHEMA = list(MIGRATE_ARGS)  # the sessions table, then the app's
ANONYMOUS = 'Session realm="app", Bearer realm="api"'
INVALID_TOKEN = 'Session realm="app", Bearer realm="api", error="invalid_token"'
SESSION_ID = re.compile(r"[A-Za-z0-9_-]{43}")
PASSWORD = "correct horse battery staple"


@dataclass
class Server:
    name: str
    port: int
    process: subprocess.Popen[bytes]
    log: IO[bytes]

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")[-4000:]


@dataclass(frozen=True)
class Reply:
    status: int
    headers: http.client.HTTPMessage
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


# -- servers ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def database(shared_database_url: str) -> str:
    """The shared test database with aiorest's sessions table and example_app's migrations, before any server starts."""
    done = subprocess.run(
        [sys.executable, "-m", "aiorest", "migrate", *SCHEMA, "--dsn", shared_database_url],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return shared_database_url


@pytest.fixture(scope="module", params=list(COMMANDS))
def server(request: pytest.FixtureRequest, database: str) -> Iterator[Server]:
    name: str = request.param
    port = free_port()
    command = [sys.executable, *(part.replace("{port}", str(port)) for part in COMMANDS[name])]
    env = {**os.environ, "DATABASE_URL": database, "DATABASE_POOL_MIN": POOL, "DATABASE_POOL_MAX": POOL}
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        running = Server(name, port, process, log)
        try:
            _wait_until_serving(running)
            yield running
        finally:
            _stop(running)


def _wait_until_serving(server: Server, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            pytest.fail(f"{server.name} exited with {server.process.returncode}:\n{server.output()}")
        try:
            if call(server, "GET", "/json", timeout=2).status == 200:
                return
        except OSError:
            time.sleep(0.05)
    pytest.fail(f"{server.name} did not answer /json within {timeout:.0f} s:\n{server.output()}")


def _stop(server: Server) -> None:
    """SIGTERM, with an idle keep-alive connection open (it must not hold the exit), then kill."""
    if server.process.poll() is not None:
        return
    idle = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    try:
        idle.request("GET", "/json")
        idle.getresponse().read()
        server.process.send_signal(signal.SIGTERM)
        try:
            server.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.process.kill()
            server.process.wait()
            pytest.fail(f"{server.name} ignored SIGTERM for 15 s:\n{server.output()}")
    finally:
        idle.close()
    assert server.process.returncode == 0, f"{server.name} exited with {server.process.returncode}:\n{server.output()}"


# -- the client --------------------------------------------------------------------------------


def call(
    server: Server,
    method: str,
    path: str,
    data: bytes | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 10.0,
) -> Reply:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=timeout)
    try:
        connection.request(method, path, body=data, headers=headers or {})
        response = connection.getresponse()
        return Reply(response.status, response.headers, response.read())
    finally:
        connection.close()


def send(server: Server, method: str, path: str, payload: Any, headers: dict[str, str] | None = None) -> Reply:
    return call(server, method, path, json.dumps(payload).encode(), {"Content-Type": JSON, **(headers or {})})


def error(status: int, message: str, details: Any = None) -> dict[str, Any]:
    return {"error": {"status": status, "message": message, "details": details}}


def fetch(database: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    """Rows read straight from PostgreSQL, to check what a server answered against what it stored."""
    conn = psycopg2.connect(database)
    try:
        with conn, conn.cursor() as cursor:  # committed: an INSERT ... RETURNING stays
            cursor.execute(sql, params)
            return cursor.fetchall()
    finally:
        conn.close()


def unique(prefix: str = "note") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def create(server: Server, auth: dict[str, str], **fields: Any) -> dict[str, Any]:
    reply = send(server, "POST", "/notes", {"title": unique(), **fields}, auth)
    assert reply.status == 201, reply.body
    note: dict[str, Any] = reply.json()
    return note


# -- users -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Account:
    id: int
    username: str
    token: str
    login: Reply | None = None  # the answer to its one POST /login, if it logged in

    @property
    def bearer(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    @property
    def cookie(self) -> dict[str, str]:
        assert self.login is not None
        return {"Cookie": f"session={session_cookie(self.login)[0]}"}


def new_username() -> str:
    return f"u{uuid.uuid4().hex[:12]}"


def register(server: Server) -> tuple[int, str]:
    username = new_username()
    reply = send(server, "POST", "/users", {"username": username, "password": PASSWORD})
    assert reply.status == 201, reply.body
    assert reply.json() == {"id": reply.json()["id"], "username": username}
    return reply.json()["id"], username


def new_token(server: Server, username: str) -> str:
    reply = send(server, "POST", "/tokens", {"username": username, "password": PASSWORD})
    assert reply.status == 201, reply.body
    token: str = reply.json()["token"]
    return token


def log_in(server: Server, username: str, headers: dict[str, str] | None = None) -> Reply:
    reply = send(server, "POST", "/login", {"username": username, "password": PASSWORD}, headers)
    assert reply.status == 200, reply.body
    return reply


def session_cookie(reply: Reply) -> tuple[str, set[str]]:
    """The session cookie a reply sets: its value and its attributes."""
    [header] = reply.headers.get_all("Set-Cookie") or []
    pair, *attributes = header.split("; ")
    name, _, value = pair.partition("=")
    assert name == "session", header
    return value, set(attributes)


@pytest.fixture(scope="module")
def owner(server: Server) -> Account:
    """The user the notes tests act as: logged in once (a session) and holding one token."""
    user_id, username = register(server)
    return Account(user_id, username, new_token(server, username), log_in(server, username))


@pytest.fixture(scope="module")
def other(server: Server) -> Account:
    """A second user, with a token only."""
    user_id, username = register(server)
    return Account(user_id, username, new_token(server, username))


# -- every response -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "status", "content_type"),
    [
        ("/json", 200, JSON),
        ("/plaintext", 200, "text/plain; charset=utf-8"),
        ("/db", 200, JSON),
        ("/queries?queries=2", 200, JSON),
        ("/fortunes", 200, "text/html; charset=utf-8"),
        ("/updates?queries=2", 200, JSON),
        ("/notes?limit=1", 200, JSON),
        ("/nope", 404, JSON),
    ],
)
def test_every_response_has_server_date_type_and_length(server, owner, path, status, content_type):
    reply = call(server, "GET", path, headers=owner.bearer)
    assert reply.status == status
    assert reply.headers["Server"]
    assert IMF_FIXDATE.fullmatch(reply.headers["Date"]), reply.headers["Date"]
    assert abs(email.utils.parsedate_to_datetime(reply.headers["Date"]).timestamp() - time.time()) < 5
    assert reply.headers["Content-Type"] == content_type
    assert int(reply.headers["Content-Length"]) == len(reply.body)
    assert "Content-Encoding" not in reply.headers


def test_keep_alive_serves_several_requests_on_one_connection(server, owner):
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        connection.request("GET", "/json")
        first = connection.getresponse()
        assert first.read() == b'{"message":"Hello, World!"}' and not first.will_close
        sock = connection.sock
        headers = {"Content-Type": JSON, **owner.bearer}
        connection.request("POST", "/notes", body=json.dumps({"title": unique()}), headers=headers)
        created = connection.getresponse()
        assert created.status == 201 and json.loads(created.read())["version"] == 1
        connection.request("GET", "/plaintext")
        assert connection.getresponse().read() == b"Hello, World!"
        assert connection.sock is sock
    finally:
        connection.close()


def test_head_has_get_headers_without_body_and_options_lists_methods(server):
    head = call(server, "HEAD", "/json")
    assert head.status == 200 and head.body == b"" and head.headers["Content-Length"] == "27"
    options = call(server, "OPTIONS", "/notes")
    assert options.status == 204 and options.headers["Allow"] == "GET, HEAD, OPTIONS, POST"


# -- TechEmpower --------------------------------------------------------------------------------


def test_json_and_plaintext(server):
    assert call(server, "GET", "/json").body == b'{"message":"Hello, World!"}'
    assert call(server, "GET", "/plaintext").body == b"Hello, World!"


def test_db_is_one_world_row(server):
    row = call(server, "GET", "/db").json()
    assert set(row) == {"id", "randomNumber"}
    assert 1 <= row["id"] <= 10000 and 1 <= row["randomNumber"] <= 10000


@pytest.mark.parametrize(
    ("query", "count"),
    [("", 1), ("?queries=", 1), ("?queries=0", 1), ("?queries=foo", 1), ("?queries=7", 7), ("?queries=501", 500)],
)
@pytest.mark.parametrize("test", ["queries", "updates"])
def test_queries_is_clamped_to_1_500(server, test, query, count):
    rows = call(server, "GET", f"/{test}{query}").json()
    assert len(rows) == count
    assert all(set(row) == {"id", "randomNumber"} for row in rows)


def test_updates_persist_the_numbers_they_return(server, database):
    rows = call(server, "GET", "/updates?queries=20").json()
    stored = fetch(database, "SELECT id, randomnumber FROM world WHERE id = ANY(%s)", [row["id"] for row in rows])
    assert {row["id"]: row["randomNumber"] for row in rows} == dict(stored)


def test_fortunes_page_is_the_same_tfb_page_on_every_target(server, database):
    rows = [*fetch(database, "SELECT id, message FROM fortune"), (0, "Additional fortune added at request time.")]
    rows.sort(key=lambda row: row[1])
    cells = "".join(f"<tr><td>{id_}</td><td>{escape(message)}</td></tr>" for id_, message in rows)
    expected = (
        "<!DOCTYPE html><html><head><title>Fortunes</title></head><body><table><tr><th>id</th><th>message</th></tr>"
        f"{cells}</table></body></html>"
    )
    assert call(server, "GET", "/fortunes").body.decode() == expected
    assert "&lt;script&gt;alert(&quot;This should not be displayed" in expected


# -- notes --------------------------------------------------------------------------------------


def test_create_then_read_with_location_and_etag(server, owner):
    reply = send(server, "POST", "/notes", {"title": " Buy milk ", "body": "2 litres"}, owner.bearer)
    assert reply.status == 201
    note = reply.json()
    assert set(note) == NOTE_KEYS
    assert reply.headers["Location"] == f"/notes/{note['id']}" and reply.headers["ETag"] == '"1"'
    assert (note["title"], note["body"], note["done"], note["version"]) == ("Buy milk", "2 litres", False, 1)
    assert note["created_at"] == note["updated_at"]
    read = call(server, "GET", f"/notes/{note['id']}", headers=owner.cookie)  # a session serves as well
    assert read.status == 200 and read.json() == note and read.headers["ETag"] == '"1"'


@pytest.mark.parametrize(
    ("body", "details"),
    [
        ({}, ("body.title", "Object missing required field `title`")),
        ({"title": " "}, ("body.title", "Expected `str` matching regex")),
        ({"title": "x" * 201}, ("body.title", "Expected `str` matching regex")),
        ({"title": 5, "done": "yes"}, ("body.title", "Expected `str`, got `int`")),
        ({"title": "ok", "body": "b" * 10001}, ("body.body", "Expected `str` of length <= 10000")),
        ({"title": "ok", "colour": "red"}, ("body", "Object contains unknown field `colour`")),
        ([1, 2], ("body", "Expected `object`, got `array`")),
    ],
)
def test_create_validation_is_422_with_where_and_what(server, owner, body, details):
    reply = send(server, "POST", "/notes", body, owner.bearer)
    assert reply.status == 422
    answer = reply.json()["error"]
    problems = answer.pop("details")
    assert answer == {"status": 422, "message": "the request is not valid"}
    assert problems[0]["location"] == details[0], problems
    if server.name == "aiorest":  # msgspec's words, and its first problem only; the baseline's are its own
        [problem] = problems
        assert problem["message"].startswith(details[1]), problem


def test_bad_json_is_400_and_another_media_type_or_none_415(server, owner):
    invalid = call(server, "POST", "/notes", b"{oops", {"Content-Type": JSON, **owner.bearer})
    assert invalid.status == 400
    assert invalid.json()["error"]["message"].startswith("request body is not valid JSON: ")
    empty = call(server, "POST", "/notes", b"", {"Content-Type": JSON, **owner.bearer})
    message = "request body is empty; expected JSON"
    assert empty.json() == error(400, message, [{"location": "body", "message": message}])
    for content_type, got in [("text/plain", "text/plain"), (None, "no Content-Type")]:
        headers = {**owner.bearer, **({"Content-Type": content_type} if content_type else {})}
        other = call(server, "POST", "/notes", b'{"title": "x"}', headers)
        problem = {"location": "header.content-type", "message": f"expected application/json, got {got}"}
        assert other.json() == error(415, f"expected a JSON body (application/json), got {got}", [problem])


def test_unknown_path_is_404_and_wrong_method_405(server):
    assert call(server, "GET", "/nope").json() == error(404, "no route for /nope")
    assert call(server, "GET", "/notes/abc").json() == error(404, "no route for /notes/abc")
    for method, path, allow in [
        ("POST", "/json", "GET, HEAD, OPTIONS"),
        ("DELETE", "/notes", "GET, HEAD, OPTIONS, POST"),
        ("POST", "/notes/1", "DELETE, GET, HEAD, OPTIONS, PATCH, PUT"),
    ]:
        reply = call(server, method, path)
        assert reply.status == 405 and reply.headers["Allow"] == allow
        assert reply.json() == error(405, f"method {method} is not allowed for {path}")


def test_missing_note_is_404(server, owner):
    missing = error(404, "no such note")
    assert call(server, "GET", "/notes/999999999", headers=owner.bearer).json() == missing
    assert call(server, "DELETE", "/notes/999999999", headers=owner.bearer).json() == missing
    assert (
        send(server, "PATCH", "/notes/999999999", {"done": True}, {"If-Match": '"1"', **owner.bearer}).json() == missing
    )


def test_writes_need_the_current_version(server, owner):
    url = f"/notes/{create(server, owner.bearer)['id']}"
    replaced = send(server, "PUT", url, {"title": "renamed", "done": True}, {"If-Match": '"1"', **owner.bearer})
    assert replaced.status == 200 and replaced.headers["ETag"] == '"2"'
    assert (replaced.json()["title"], replaced.json()["done"], replaced.json()["version"]) == ("renamed", True, 2)
    assert replaced.json()["updated_at"] > replaced.json()["created_at"]
    stale = send(server, "PATCH", url, {"body": "late"}, {"If-Match": '"1"', **owner.bearer})
    assert stale.status == 412
    assert stale.json() == error(412, "the note changed since you read it", {"version": 2})
    by_body = send(server, "PATCH", url, {"body": "now", "version": 2}, owner.bearer)
    assert by_body.status == 200 and by_body.json()["body"] == "now" and by_body.headers["ETag"] == '"3"'
    unconditional = send(server, "PATCH", url, {"body": "no precondition"}, owner.bearer)
    assert unconditional.json() == error(428, "send If-Match with the note's ETag, or its version in the body")
    no_title = send(server, "PUT", url, {"body": "no title"}, {"If-Match": '"3"', **owner.bearer})
    assert send(server, "PATCH", url, {"body": "x"}, {"If-Match": "3", **owner.bearer}).json() == error(
        400, "If-Match must list ETags, e.g. '\"3\"', or be *"
    )
    weak = send(server, "PATCH", url, {"body": "x"}, {"If-Match": 'W/"3"', **owner.bearer})
    assert weak.json() == error(412, "the note changed since you read it", {"version": 3})
    listed = send(server, "PATCH", url, {"body": "listed"}, {"If-Match": '"9", "3"', **owner.bearer})
    assert listed.status == 200 and listed.headers["ETag"] == '"4"'
    star = send(server, "PATCH", url, {"body": "any"}, {"If-Match": "*", **owner.bearer})
    assert star.status == 200 and star.headers["ETag"] == '"5"'
    string_version = send(server, "PATCH", url, {"body": "x", "version": "3"}, owner.bearer)
    nothing = send(server, "PATCH", url, {"version": 3}, owner.bearer)
    assert (no_title.status, string_version.status, nothing.status) == (422, 422, 422)
    located = [
        [problem["location"] for problem in reply.json()["error"]["details"]]
        for reply in (no_title, string_version, nothing)
    ]
    assert located == [["body.title"], ["body.version"], ["body"]]
    if server.name != "aiorest":
        return  # the baseline validates by hand: same shape and locations, in words of its own
    invalid = "the request is not valid"
    missing = "Object missing required field `title`"
    assert no_title.json() == error(422, invalid, [{"location": "body.title", "message": missing}])
    not_int = "Expected `int | null`, got `str`"
    assert string_version.json() == error(422, invalid, [{"location": "body.version", "message": not_int}])
    assert nothing.json() == error(422, invalid, [{"location": "body", "message": "no field to change"}])


def test_delete_is_412_when_stale_then_204_then_404(server, owner):
    url = f"/notes/{create(server, owner.bearer)['id']}"
    stale = call(server, "DELETE", url, headers={"If-Match": '"7"', **owner.bearer})
    assert stale.json() == error(412, "the note changed since you read it", {"version": 1})
    deleted = call(server, "DELETE", url, headers={"If-Match": '"1"', **owner.bearer})
    assert deleted.status == 204 and deleted.body == b"" and "Content-Type" not in deleted.headers
    assert call(server, "DELETE", url, headers=owner.bearer).status == 404


def test_list_pages_through_next(server, owner):
    tag = unique("page")
    created = [create(server, owner.bearer, title=f"{tag} {i}", done=i % 2 == 0) for i in range(5)]
    seen, pages, url = [], [], f"/notes?q={tag}&limit=2"
    while url:
        page = call(server, "GET", url, headers=owner.bearer).json()
        assert set(page) == {"items", "next"} and all(set(item) == NOTE_KEYS for item in page["items"])
        seen += [item["id"] for item in page["items"]]
        pages.append(page["next"])
        url = page["next"]  # keeps limit, done and q
    assert seen == [note["id"] for note in created]
    assert pages == [
        f"/notes?after={created[1]['id']}&limit=2&q={tag}",
        f"/notes?after={created[3]['id']}&limit=2&q={tag}",
        None,
    ]
    done = call(server, "GET", f"/notes?q={tag}&done=true&limit=1", headers=owner.bearer).json()
    assert [item["id"] for item in done["items"]] == [created[0]["id"]]
    assert done["next"] == f"/notes?after={created[0]['id']}&limit=1&done=true&q={tag}"
    capped = call(server, "GET", "/notes?limit=100000", headers=owner.bearer).json()
    assert len(capped["items"]) <= 100 and (capped["next"] is None or capped["next"].endswith("&limit=100"))


@pytest.mark.parametrize(
    ("query", "details"),
    [
        ("limit=0", ("query.limit", "Expected `int` >= 1")),
        ("limit=abc", ("query.limit", "Expected `int`, got `str`")),
        ("after=-1", ("query.after", "Expected `int` >= 0")),
        ("done=maybe", ("query.done", "Expected `bool | null`, got `str`")),
    ],
)
def test_list_rejects_a_bad_query_with_422(server, owner, query, details):
    location, message = details
    reply = call(server, "GET", f"/notes?{query}", headers=owner.bearer)
    assert reply.status == 422
    if server.name != "aiorest":
        return  # the baseline validates by hand: its details name fields, not locations
    assert reply.json() == error(422, "the request is not valid", [{"location": location, "message": message}])


# -- users, sessions and tokens ---------------------------------------------------------------
# Attempts at /login and /tokens in this section, per server: 2 + 2 + 1 + 6, and 3 in the fixtures.


def test_register_is_201_then_409_for_a_taken_name(server, database):
    user_id, username = register(server)
    again = send(server, "POST", "/users", {"username": username, "password": "another password"})
    assert again.status == 409 and again.json() == error(409, "that username is taken")
    [(stored,)] = fetch(database, "SELECT password_hash FROM users WHERE id = %s", user_id)
    assert stored.startswith("$argon2id$")


@pytest.mark.parametrize(
    ("body", "location"),
    [
        ({"username": "ab", "password": PASSWORD}, "body.username"),
        ({"username": "Capitals", "password": PASSWORD}, "body.username"),
        ({"username": "x" * 33, "password": PASSWORD}, "body.username"),
        ({"username": 5, "password": PASSWORD}, "body.username"),
        ({"password": PASSWORD}, "body.username"),
        ({"username": "fine_name", "password": "short"}, "body.password"),
        ({"username": "fine_name", "password": "p" * 1025}, "body.password"),
        ({"username": "fine_name", "password": PASSWORD, "admin": True}, "body"),
        ([1, 2], "body"),
    ],
)
def test_register_validation_is_422(server, body, location):
    reply = send(server, "POST", "/users", body)
    assert reply.status == 422 and reply.headers.get("Set-Cookie") is None
    answer = reply.json()["error"]
    assert (answer["status"], answer["message"]) == (422, "the request is not valid")
    assert answer["details"][0]["location"] == location, answer


def test_login_sets_an_http_only_session_cookie(server, owner, database):
    assert owner.login is not None and owner.login.json() == {"id": owner.id, "username": owner.username}
    value, attributes = session_cookie(owner.login)
    assert SESSION_ID.fullmatch(value)
    assert attributes == {"Max-Age=1209600", "Path=/", "HttpOnly", "SameSite=Lax"}  # no Secure over http
    [(data,)] = fetch(
        database, "SELECT data FROM aiorest_sessions WHERE id = %s AND expires_at > now()", stored_id(value)
    )
    assert data == {"user_id": owner.id}


def test_wrong_password_and_unknown_user_are_the_same_401(server, owner):
    wrong = send(server, "POST", "/login", {"username": owner.username, "password": "not the password"})
    unknown = send(server, "POST", "/login", {"username": new_username(), "password": PASSWORD})
    for reply in (wrong, unknown):
        assert reply.status == 401 and reply.json() == error(401, "wrong username or password")
        assert reply.headers["WWW-Authenticate"] == ANONYMOUS and reply.headers.get("Set-Cookie") is None


def test_me_by_session_cookie_and_by_bearer_token(server, owner):
    me = {"id": owner.id, "username": owner.username}
    assert call(server, "GET", "/me", headers=owner.cookie).json() == me
    assert call(server, "GET", "/me", headers=owner.bearer).json() == me
    # the session first: a bad token beside a good session does not matter
    both = call(server, "GET", "/me", headers={**owner.cookie, "Authorization": "Bearer nope"})
    assert both.status == 200 and both.json() == me


@pytest.mark.parametrize(
    ("headers", "challenge"),
    [
        ({}, ANONYMOUS),
        ({"Cookie": "session=" + "a" * 43}, ANONYMOUS),
        ({"Cookie": 'session="unclosed; =; ;;;=x; session=é\\'}, ANONYMOUS),
        ({"Cookie": "x=1; session=" + "s" * 8000}, ANONYMOUS),  # under every server's field limit
        ({"Authorization": "Basic dXNlcjpwYXNz"}, ANONYMOUS),
        ({"Authorization": "Bearer " + "t" * 43}, INVALID_TOKEN),
        ({"Authorization": "Bearer not a token"}, INVALID_TOKEN),
        ({"Authorization": "Bearer " + "t" * 600}, INVALID_TOKEN),
    ],
    ids=[
        "none",
        "unknown-session",
        "garbage-cookie",
        "huge-cookie",
        "basic",
        "unknown-token",
        "bad-token",
        "long-token",
    ],
)
def test_me_without_valid_credentials_is_401_with_a_challenge(server, headers, challenge):
    reply = call(server, "GET", "/me", headers=headers)
    assert reply.status == 401 and reply.json() == error(401, "authentication required")
    assert reply.headers["WWW-Authenticate"] == challenge


def test_login_rotates_and_logout_ends_the_session(server, owner, database):
    first = session_cookie(log_in(server, owner.username))[0]
    second = session_cookie(log_in(server, owner.username, {"Cookie": f"session={first}"}))[0]
    assert second != first and fetch(database, "SELECT 1 FROM aiorest_sessions WHERE id = %s", stored_id(first)) == []
    cookie = {"Cookie": f"session={second}"}
    logout = call(server, "POST", "/logout", headers=cookie)
    assert logout.status == 204 and logout.body == b""
    value, attributes = session_cookie(logout)
    assert value == "" and "Max-Age=0" in attributes and {"Path=/", "HttpOnly", "SameSite=Lax"} <= attributes
    assert fetch(database, "SELECT 1 FROM aiorest_sessions WHERE id = %s", stored_id(second)) == []
    after = call(server, "GET", "/me", headers=cookie)
    assert after.status == 401 and after.headers["WWW-Authenticate"] == ANONYMOUS
    for headers in (cookie, {}):  # logging out again, or with no session, is still 204, with no cookie to drop
        again = call(server, "POST", "/logout", headers=headers)
        assert again.status == 204 and again.headers.get("Set-Cookie") is None
    assert call(server, "GET", "/me", headers=owner.cookie).status == 200  # the module's session is another


def test_token_is_created_then_revoked(server, owner, database):
    reply = send(server, "POST", "/tokens", {"username": owner.username, "password": PASSWORD})
    assert reply.status == 201
    answer = reply.json()
    assert set(answer) == {"token", "token_type", "expires_at"} and answer["token_type"] == "Bearer"
    expires = datetime.fromisoformat(answer["expires_at"])
    assert abs(expires - datetime.now(UTC) - timedelta(days=30)) < timedelta(minutes=1)
    digest = hashlib.sha256(answer["token"].encode()).hexdigest()
    assert fetch(database, "SELECT user_id FROM api_tokens WHERE token_hash = %s", digest) == [(owner.id,)]
    bearer = {"Authorization": f"Bearer {answer['token']}"}
    assert call(server, "GET", "/me", headers=bearer).json()["id"] == owner.id
    revoked = call(server, "DELETE", "/tokens/current", headers=bearer)
    assert revoked.status == 204 and revoked.body == b""
    assert fetch(database, "SELECT 1 FROM api_tokens WHERE token_hash = %s", digest) == []
    for method, path in [("GET", "/me"), ("GET", "/notes"), ("DELETE", "/tokens/current")]:
        refused = call(server, method, path, headers=bearer)
        assert refused.status == 401 and refused.json() == error(401, "authentication required")
        assert refused.headers["WWW-Authenticate"] == INVALID_TOKEN


def test_a_session_alone_revokes_no_token(server, owner):
    reply = call(server, "DELETE", "/tokens/current", headers=owner.cookie)
    assert reply.status == 401 and reply.json() == error(401, "send the bearer token to revoke")
    assert reply.headers["WWW-Authenticate"] == 'Bearer realm="api"'
    anonymous = call(server, "DELETE", "/tokens/current")
    assert anonymous.status == 401 and anonymous.json() == error(401, "authentication required")
    assert anonymous.headers["WWW-Authenticate"] == ANONYMOUS


def test_anonymous_notes_are_401(server):
    for method, path, payload in [
        ("GET", "/notes", None),
        ("POST", "/notes", {"title": "x"}),
        ("GET", "/notes/1", None),
        ("PUT", "/notes/1", {"title": "x"}),
        ("PATCH", "/notes/1", {"title": "x"}),
        ("DELETE", "/notes/1", None),
    ]:
        reply = call(server, method, path) if payload is None else send(server, method, path, payload)
        assert reply.status == 401 and reply.json() == error(401, "authentication required"), (method, path)
        assert reply.headers["WWW-Authenticate"] == ANONYMOUS


def test_another_users_note_is_404_and_not_listed(server, owner, other, database):
    note = create(server, owner.bearer, title=unique("mine"))
    url = f"/notes/{note['id']}"
    missing = error(404, "no such note")
    assert call(server, "GET", url, headers=other.bearer).json() == missing
    patched = send(server, "PATCH", url, {"done": True}, {"If-Match": '"1"', **other.bearer})
    replaced = send(server, "PUT", url, {"title": "theirs"}, {"If-Match": "*", **other.bearer})
    assert patched.json() == missing and replaced.json() == missing
    assert call(server, "DELETE", url, headers=other.bearer).json() == missing
    listed = call(server, "GET", f"/notes?q={note['title']}", headers=other.bearer).json()
    assert listed == {"items": [], "next": None}
    assert call(server, "GET", url, headers=owner.bearer).json() == note  # untouched
    mine = call(server, "GET", f"/notes?q={note['title']}", headers=owner.bearer).json()
    assert [item["id"] for item in mine["items"]] == [note["id"]]
    [(nobodys,)] = fetch(database, "INSERT INTO notes (title) VALUES ('nobody''s') RETURNING id")
    assert call(server, "GET", f"/notes/{nobodys}", headers=owner.bearer).json() == missing


def test_login_is_rate_limited_per_account(server):
    _, username = register(server)  # an account of its own: its attempts count against nobody else's
    wrong = {"username": username, "password": "not the password"}
    assert [send(server, "POST", "/login", wrong).status for _ in range(5)] == [401] * 5
    limited = send(server, "POST", "/tokens", {"username": username, "password": PASSWORD})  # shared, right or wrong
    assert limited.status == 429 and limited.json() == error(429, "too many login attempts")
    assert 1 <= int(limited.headers["Retry-After"]) <= 60

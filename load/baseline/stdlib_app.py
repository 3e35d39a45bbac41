"""The bare threaded baseline: example_app's API on the standard library's ``ThreadingHTTPServer``.

A thread per connection and no framework: where threads themselves break.
HTTP/1.1 with keep-alive, the same blocking pool and logic as flask_app
(common.py, users.py, notes.py, techempower.py). ``DATABASE_URL`` names the database; SIGTERM or Ctrl-C stops it.

    python -m load.baseline.stdlib_app --port 8082 [--pool 32]
"""

from __future__ import annotations

import argparse
import logging
import re
import signal
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, unquote

from example_app import queries

from . import common, notes, techempower, users
from .common import ApiError, Pool

logger = logging.getLogger("load.baseline.stdlib_app")


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    body: bytes = b""
    content_type: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Request:
    """What a route needs from an HTTP request."""

    pool: Pool
    query: Mapping[str, str]
    headers: Message
    body: bytes
    args: tuple[str, ...]  # the path's captured parameters
    address: str  # the client's

    @property
    def note_id(self) -> int:
        return int(self.args[0])

    def json(self) -> Any:
        return common.parse_json_body(self.headers.get("Content-Type"), self.body)

    def credentials(self) -> users.Credentials:
        return users.Credentials.from_headers(
            self.headers.get_all("Cookie") or [], self.headers.get_all("Authorization") or []
        )

    def user_id(self) -> int:
        return users.authenticate(self.pool, self.credentials()).id


Route = Callable[[Request], Reply]


def _json(data: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Reply:
    return Reply(status, common.dumps(data).encode(), common.JSON_TYPE, headers or {})


def _error(error: ApiError) -> Reply:
    return _json(error.to_dict(), error.status, error.headers)


def _parse_query(text: str) -> dict[str, str]:
    """The first value of each name, as aiorest's and Flask's ``query.get`` give it."""
    query: dict[str, str] = {}
    for name, value in parse_qsl(text, keep_blank_values=True):
        query.setdefault(name, value)
    return query


# -- routes ------------------------------------------------------------------------------

_HELLO = techempower.HELLO.encode()


def _json_test(request: Request) -> Reply:
    return _json({"message": techempower.HELLO})


def _plaintext(request: Request) -> Reply:
    return Reply(200, _HELLO, common.TEXT_TYPE)


def _single_query(request: Request) -> Reply:
    return _json(techempower.single_world(request.pool))


def _queries(request: Request) -> Reply:
    return _json(techempower.worlds(request.pool, queries.query_count(request.query.get("queries"))))


def _fortunes(request: Request) -> Reply:
    return Reply(200, techempower.fortunes_page(request.pool).encode(), common.HTML_TYPE)


def _updates(request: Request) -> Reply:
    return _json(techempower.update_worlds(request.pool, queries.query_count(request.query.get("queries"))))


def _register(request: Request) -> Reply:
    return _json(users.register(request.pool, request.json()).to_dict(), 201)


def _login(request: Request) -> Reply:
    user, cookie = users.login(request.pool, request.json(), request.address, request.credentials().session_id)
    return _json(user.to_dict(), headers={"Set-Cookie": cookie})


def _logout(request: Request) -> Reply:
    cookie = users.logout(request.pool, request.credentials().session_id)
    return Reply(204, headers={} if cookie is None else {"Set-Cookie": cookie})


def _me(request: Request) -> Reply:
    return _json(users.authenticate(request.pool, request.credentials()).to_dict())


def _create_token(request: Request) -> Reply:
    return _json(users.create_token(request.pool, request.json(), request.address), 201)


def _revoke_token(request: Request) -> Reply:
    users.revoke_token(request.pool, request.credentials())
    return Reply(204)


def _list_notes(request: Request) -> Reply:
    return _json(notes.list_notes(request.pool, request.user_id(), request.query))


def _create_note(request: Request) -> Reply:
    owner_id = request.user_id()
    note = notes.create_note(request.pool, owner_id, request.json())
    return _json(note, 201, {"Location": notes.note_location(note), "ETag": notes.note_etag(note)})


def _get_note(request: Request) -> Reply:
    note = notes.get_note(request.pool, request.user_id(), request.note_id)
    return _json(note, headers={"ETag": notes.note_etag(note)})


def _update(request: Request, *, partial: bool) -> Reply:
    owner_id = request.user_id()
    note = notes.update_note(
        request.pool, owner_id, request.note_id, request.json(), request.headers.get("If-Match"), partial=partial
    )
    return _json(note, headers={"ETag": notes.note_etag(note)})


def _replace_note(request: Request) -> Reply:
    return _update(request, partial=False)


def _patch_note(request: Request) -> Reply:
    return _update(request, partial=True)


def _delete_note(request: Request) -> Reply:
    notes.delete_note(request.pool, request.user_id(), request.note_id, request.headers.get("If-Match"))
    return Reply(204)


_STATIC: dict[str, dict[str, Route]] = {
    "/json": {"GET": _json_test},
    "/plaintext": {"GET": _plaintext},
    "/db": {"GET": _single_query},
    "/queries": {"GET": _queries},
    "/fortunes": {"GET": _fortunes},
    "/updates": {"GET": _updates},
    "/users": {"POST": _register},
    "/login": {"POST": _login},
    "/logout": {"POST": _logout},
    "/me": {"GET": _me},
    "/tokens": {"POST": _create_token},
    "/tokens/current": {"DELETE": _revoke_token},
    common.NOTES_PATH: {"GET": _list_notes, "POST": _create_note},
}
_NOTE = re.compile(re.escape(common.NOTES_PATH) + "/([0-9]+)")
_NOTE_ROUTES: dict[str, Route] = {"GET": _get_note, "PUT": _replace_note, "PATCH": _patch_note, "DELETE": _delete_note}


def _resolve(method: str, path: str) -> tuple[Route, tuple[str, ...]]:
    """The route for ``method`` on ``path`` and the path's parameters; 404 or 405 as aiorest's router."""
    routes = _STATIC.get(path)
    args: tuple[str, ...] = ()
    if routes is None:
        match = _NOTE.fullmatch(path)
        if match is None:
            raise common.not_found(path)
        routes, args = _NOTE_ROUTES, match.groups()
    route = routes.get("GET" if method == "HEAD" else method)
    if route is not None:
        return route, args
    allowed = {*routes, "OPTIONS", *(["HEAD"] if "GET" in routes else [])}
    if method == "OPTIONS":
        allow = ", ".join(sorted(allowed))
        return (lambda request: Reply(204, headers={"Allow": allow})), args
    raise common.method_not_allowed(method, path, allowed)


# -- the server ----------------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"  # keep-alive, so every response carries its length
    # Headers and body leave in two sends: with Nagle's algorithm on, the client's
    # delayed ACK holds the body back ~40 ms (shared/INFRA.md).
    disable_nagle_algorithm = True
    timeout = 90  # aiorest's keep-alive timeout: an idle connection gives its thread back after this

    def _handle(self) -> None:
        try:
            reply = self._reply()
        except ApiError as error:
            reply = _error(error)
        except Exception:
            logger.exception("%s %s failed", self.command, self.path)
            reply = _error(ApiError(500))
        self._send(reply)

    # Routing, 405 and HEAD are _resolve's, as in aiorest, so every method takes the same way in.
    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = _handle

    def _reply(self) -> Reply:
        target, _, query = self.path.partition("?")
        path = unquote(target)
        body = self._read_body()  # even for a 404: the next request on the connection starts after it
        route, args = _resolve(self.command, path)
        request = Request(self.server.pool, _parse_query(query), self.headers, body, args, self.client_address[0])
        return route(request)

    def _read_body(self) -> bytes:
        if "Transfer-Encoding" in self.headers:
            self.close_connection = True  # where this body ends is unknown, so nothing after it can be read
            raise ApiError(411, "send the body with a Content-Length; chunked request bodies are not supported")
        text = self.headers.get("Content-Length", "0").strip()
        if not text.isascii() or not text.isdigit():
            self.close_connection = True
            raise ApiError(400, f"invalid Content-Length: {text!r}")
        length = int(text)
        if length > common.MAX_BODY_SIZE:
            self.close_connection = True  # the body is left unread
            raise ApiError(413, f"request body of {length} bytes exceeds the limit of {common.MAX_BODY_SIZE}")
        return self.rfile.read(length)

    def _send(self, reply: Reply) -> None:
        self.send_response(reply.status)
        if reply.content_type is not None:
            self.send_header("Content-Type", reply.content_type)
        if reply.status != 204:  # a 204 must not carry a Content-Length (RFC 9110, 8.6)
            self.send_header("Content-Length", str(len(reply.body)))
        for name, value in reply.headers.items():
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        elif self.request_version == "HTTP/1.0":
            self.send_header("Connection", "keep-alive")  # an HTTP/1.0 client that asked for it closes without it
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(reply.body)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        # The stdlib's own errors (a bad request line, headers too long, an unknown method)
        # would be HTML pages: answer them in the API's shape.
        self.close_connection = True
        self._send(_error(ApiError(code, message)))

    def version_string(self) -> str:
        return "baseline-stdlib"

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        """No access log, as for the other targets (errors are still logged)."""


class _Server(ThreadingHTTPServer):
    # server_close() would otherwise join every connection thread, an idle keep-alive one
    # included (up to its timeout); they are daemons, so exiting without them is safe.
    block_on_close = False

    def __init__(self, address: tuple[str, int], pool: Pool, backlog: int) -> None:
        self.pool = pool
        self.request_queue_size = backlog  # socketserver listens with a backlog of 5 otherwise
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client hanging up mid-response is routine under load, not worth a traceback.
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m load.baseline.stdlib_app", description=__doc__.splitlines()[0])
    common.add_server_arguments(parser, port=8082)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    pool = Pool(common.database_url(), args.pool)
    server = _Server((args.host, args.port), pool, args.backlog)

    def stop(signum: int, frame: Any) -> None:
        # shutdown() waits for serve_forever() to return, so it must not run on the thread serving.
        threading.Thread(target=server.shutdown).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    logger.info("serving on http://%s:%d/ with %d database connections", args.host, args.port, args.pool)
    try:
        server.serve_forever()
    finally:
        server.server_close()
        pool.close()


if __name__ == "__main__":
    main()

"""The threaded baseline: example_app's API on Flask, served by gunicorn's ``gthread`` worker.

What a user would have written instead of aiorest: one worker process with a
pool of threads, psycopg2 and a blocking pool of the same size as aiorest's,
opened in full when the worker starts. ``DATABASE_URL`` names the database.

    python -m load.baseline.flask_app --port 8081 [--threads 32] [--pool 32]
"""

from __future__ import annotations

import argparse
from typing import Any

from flask import Blueprint, Flask, Response, current_app, request
from flask.json.provider import JSONProvider
from flask.typing import ResponseReturnValue
from gunicorn.app.base import BaseApplication  # type: ignore[import-untyped]
from werkzeug.exceptions import HTTPException, MethodNotAllowed, NotFound
from werkzeug.routing import BaseConverter

from example_app import queries

from . import common, notes, techempower, users
from .common import ApiError, Pool

api = Blueprint("api", __name__)


class _CompactJSON(JSONProvider):
    """common.dumps, so the bytes are aiorest's: Flask's default provider sorts keys and adds a newline."""

    def dumps(self, obj: Any, **kwargs: Any) -> str:
        return common.dumps(obj)

    def response(self, *args: Any, **kwargs: Any) -> Response:
        data = self._prepare_response_obj(args, kwargs)
        return current_app.response_class(self.dumps(data), mimetype=common.JSON_TYPE)


class _Digits(BaseConverter):
    """aiorest's ``int``: ASCII digits only (werkzeug's ``int`` matches ``\\d``, so other scripts' digits too)."""

    regex = "[0-9]+"

    def to_python(self, value: str) -> int:
        return int(value)

    def to_url(self, value: Any) -> str:
        return str(int(value))


class _App(Flask):
    json_provider_class = _CompactJSON

    def make_default_options_response(self) -> Response:
        # aiorest answers OPTIONS with 204 and a sorted Allow; Flask with 200 and an empty text/html body.
        allowed = ", ".join(sorted(super().make_default_options_response().allow))
        return _no_content({"Allow": allowed})


def create_app(pool: Pool) -> Flask:
    """The Flask app on ``pool``."""
    app = _App(__name__)
    app.config["MAX_CONTENT_LENGTH"] = common.MAX_BODY_SIZE
    app.extensions["pool"] = pool
    # Both before the routes are added: aiorest answers /notes//1 with 404, not a redirect to /notes/1.
    app.url_map.merge_slashes = False
    app.url_map.converters["digits"] = _Digits
    app.register_blueprint(api)
    return app


def _pool() -> Pool:
    pool: Pool = current_app.extensions["pool"]
    return pool


def _no_content(headers: dict[str, str] | None = None) -> Response:
    # A 204 has no body, so aiorest sends no Content-Type; Flask would label it text/html.
    response = Response(status=204, headers=headers)
    del response.headers["Content-Type"]
    return response


def _error_response(error: ApiError) -> Response:
    return Response(common.dumps(error.to_dict()), error.status, error.headers, mimetype=common.JSON_TYPE)


@api.app_errorhandler(ApiError)
def _api_error(error: ApiError) -> Response:
    return _error_response(error)


@api.app_errorhandler(HTTPException)
def _http_error(error: HTTPException) -> Response:
    """werkzeug's routing and request errors, and Flask's 500 for an unhandled exception, in aiorest's words."""
    if isinstance(error, NotFound):
        return _error_response(common.not_found(request.path))
    if isinstance(error, MethodNotAllowed):
        return _error_response(common.method_not_allowed(request.method, request.path, set(error.valid_methods or ())))
    return _error_response(ApiError(error.code or 500))


# -- TechEmpower ------------------------------------------------------------------------


@api.get("/json")
def json_test() -> dict[str, str]:
    return {"message": techempower.HELLO}


@api.get("/plaintext")
def plaintext() -> Response:
    return Response(techempower.HELLO, mimetype="text/plain")


@api.get("/db")
def single_query() -> dict[str, int]:
    return techempower.single_world(_pool())


@api.get("/queries")
def multiple_queries() -> list[dict[str, int]]:
    return techempower.worlds(_pool(), queries.query_count(request.args.get("queries")))


@api.get("/fortunes")
def fortunes() -> Response:
    return Response(techempower.fortunes_page(_pool()), mimetype="text/html")


@api.get("/updates")
def updates() -> list[dict[str, int]]:
    return techempower.update_worlds(_pool(), queries.query_count(request.args.get("queries")))


# -- users --------------------------------------------------------------------------------


def _json_body() -> Any:
    return common.parse_json_body(request.content_type, request.get_data(cache=False))


def _credentials() -> users.Credentials:
    return users.Credentials.from_headers(request.headers.getlist("Cookie"), request.headers.getlist("Authorization"))


def _user_id() -> int:
    return users.authenticate(_pool(), _credentials()).id


@api.post("/users")
def register() -> ResponseReturnValue:
    return users.register(_pool(), _json_body()).to_dict(), 201


@api.post("/login")
def login() -> ResponseReturnValue:
    user, cookie = users.login(_pool(), _json_body(), request.remote_addr, _credentials().session_id)
    return user.to_dict(), {"Set-Cookie": cookie}


@api.post("/logout")
def logout() -> Response:
    cookie = users.logout(_pool(), _credentials().session_id)
    return _no_content(None if cookie is None else {"Set-Cookie": cookie})


@api.get("/me")
def me() -> dict[str, Any]:
    return users.authenticate(_pool(), _credentials()).to_dict()


@api.post("/tokens")
def create_token() -> ResponseReturnValue:
    return users.create_token(_pool(), _json_body(), request.remote_addr), 201


@api.delete("/tokens/current")
def revoke_token() -> Response:
    users.revoke_token(_pool(), _credentials())
    return _no_content()


# -- notes --------------------------------------------------------------------------------


@api.get("/notes")
def list_notes() -> dict[str, Any]:
    return notes.list_notes(_pool(), _user_id(), request.args)


@api.post("/notes")
def create_note() -> ResponseReturnValue:
    owner_id = _user_id()
    note = notes.create_note(_pool(), owner_id, _json_body())
    return note, 201, {"Location": notes.note_location(note), "ETag": notes.note_etag(note)}


@api.get("/notes/<digits:note_id>")
def get_note(note_id: int) -> ResponseReturnValue:
    note = notes.get_note(_pool(), _user_id(), note_id)
    return note, {"ETag": notes.note_etag(note)}


def _update(note_id: int, *, partial: bool) -> ResponseReturnValue:
    owner_id = _user_id()
    note = notes.update_note(_pool(), owner_id, note_id, _json_body(), request.headers.get("If-Match"), partial=partial)
    return note, {"ETag": notes.note_etag(note)}


@api.put("/notes/<digits:note_id>")
def replace_note(note_id: int) -> ResponseReturnValue:
    return _update(note_id, partial=False)


@api.patch("/notes/<digits:note_id>")
def patch_note(note_id: int) -> ResponseReturnValue:
    return _update(note_id, partial=True)


@api.delete("/notes/<digits:note_id>")
def delete_note(note_id: int) -> Response:
    notes.delete_note(_pool(), _user_id(), note_id, request.headers.get("If-Match"))
    return _no_content()


# -- gunicorn -----------------------------------------------------------------------------


class _Gunicorn(BaseApplication):  # type: ignore[misc]  # gunicorn ships no type hints
    """gunicorn configured in code: no config file, no command line of its own."""

    def __init__(self, options: dict[str, Any], dsn: str, pool_size: int) -> None:
        self._options = options
        self._dsn = dsn
        self._pool_size = pool_size
        self._pool: Pool | None = None
        super().__init__()

    def load_config(self) -> None:
        for name, value in self._options.items():
            self.cfg.set(name, value)
        self.cfg.set("worker_exit", self._close_pool)
        # Newer gunicorns open a control socket at one path per user: two servers at once would share it.
        if "control_socket_disable" in self.cfg.settings:
            self.cfg.set("control_socket_disable", True)

    def load(self) -> Flask:
        # Runs in the worker, after the fork: a psycopg2 connection must not cross a fork.
        self._pool = Pool(self._dsn, self._pool_size)
        return create_app(self._pool)

    def _close_pool(self, server: Any, worker: Any) -> None:
        if self._pool is not None:
            self._pool.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m load.baseline.flask_app", description=__doc__.splitlines()[0])
    common.add_server_arguments(parser, port=8081)
    parser.add_argument("--threads", type=int, default=32, help="threads of the one gthread worker (default 32)")
    args = parser.parse_args(argv)
    options = {
        "bind": f"{args.host}:{args.port}",
        "workers": 1,
        "worker_class": "gthread",
        "threads": args.threads,
        # aiorest keeps an idle connection 90 s; gthread parks idle connections in its poller, not in a thread.
        "keepalive": 90,
        # aiorest's max_connections: gthread's default of 1000 would stop accepting in a large run.
        "worker_connections": 16384,
        "backlog": args.backlog,
        "accesslog": None,
    }
    _Gunicorn(options, common.database_url(), args.pool).run()


if __name__ == "__main__":
    main()

"""The load suite's user flows for the cluster (load/cluster/run.py), with a line per request.

    locust -f load/cluster/locustfile.py --request-log DIR ... BrowsingUser ClusterWritingUser TechEmpowerUser LoginUser

The flows are load/clients/locustfile.py's (browsing, writing, the TechEmpower mix), plus:

- ``LoginUser``: registers an account of its own, then every 15 s logs in
  (``POST /login``), reads ``/me`` and logs out: ``--login-users`` of them in all
  (2 by default), well under the limits (5 failed logins a minute per account,
  20 per address), which hold across hosts once the limiter is shared.
- ``ClusterWritingUser``: the writing user, whose notes' titles do not carry the
  run's tag: a ``POST /notes`` that failed and yet was applied stays in the
  database after the run's cleanup, where the harness looks for it; and a note
  whose ``PATCH`` failed is kept, for the harness to read its version.

With ``--request-log DIR`` every process writes ``DIR/requests-<pid>.csv``: one line
per request (epoch seconds, method, name, status, milliseconds, failed, Retry-After
present, what failed, the note title of a write, whether the answer was a replay
of an earlier attempt's, kept with its Idempotency-Key), for the harness to split
into before, during and after a fault.
"""

from __future__ import annotations

import csv
import os
import uuid
from typing import Any

from locust import FastHttpUser, constant, events, task

from load.clients.locustfile import BrowsingUser, TechEmpowerUser, WritingUser, _fail_unless, idempotent

__all__ = ["BrowsingUser", "ClusterWritingUser", "LoginUser", "TechEmpowerUser"]

WRITE_PREFIX = "cluster-write"
LOG_FIELDS = ("t", "method", "name", "status", "ms", "failed", "retry_after", "error", "key", "replayed")
_log: dict[str, Any] = {}


@events.init_command_line_parser.add_listener
def _options(parser: Any) -> None:
    parser.add_argument("--request-log", default="", help="a folder for a CSV line per request")
    parser.add_argument("--login-users", type=int, default=2, help="LoginUser count (fixed)")


@events.init.add_listener
def _open_log(environment: Any, **kwargs: Any) -> None:
    options = environment.parsed_options
    if options is None:
        return
    LoginUser.fixed_count = options.login_users
    if options.request_log:
        handle = open(os.path.join(options.request_log, f"requests-{os.getpid()}.csv"), "w", buffering=1)  # noqa: SIM115
        _log["handle"] = handle
        _log["writer"] = csv.writer(handle)
        _log["writer"].writerow(LOG_FIELDS)


@events.request.add_listener
def _record(
    request_type: str,
    name: str,
    response_time: float,
    response: Any = None,
    context: Any = None,
    exception: Any = None,
    start_time: float | None = None,
    **kwargs: Any,
) -> None:
    writer = _log.get("writer")
    if writer is None:
        return
    status = getattr(response, "status_code", 0) or 0
    headers = getattr(response, "headers", None) or {}
    error = "" if exception is None else str(exception).replace("\n", " ")[:120]
    key = (context or {}).get("key", "")
    writer.writerow(
        (
            f"{start_time or 0:.3f}",
            request_type,
            name,
            status,
            f"{response_time:.1f}",
            int(exception is not None),
            int("Retry-After" in headers or "retry-after" in headers),
            error,
            key,
            int((headers.get("Idempotent-Replayed") or headers.get("idempotent-replayed")) == "true"),
        )
    )


@events.quitting.add_listener
def _close_log(environment: Any, **kwargs: Any) -> None:
    handle = _log.pop("handle", None)
    _log.pop("writer", None)
    if handle is not None:
        handle.close()


class ClusterWritingUser(WritingUser):
    """The writing user; its notes' titles start with ``cluster-write`` and go with each request.

    A note whose ``PATCH`` failed is not deleted: the harness reads its version (2: applied).
    """

    key = ""
    keep_note_after_failed_update = True

    def note_title(self) -> str:
        self.key = f"{WRITE_PREFIX} {uuid.uuid4().hex}"
        return self.key

    def context(self) -> dict[str, str]:
        return {"key": self.key}


class LoginUser(FastHttpUser):
    """An account of its own: logs in, reads /me, logs out, every 15 s."""

    fixed_count = 2
    wait_time = constant(15)
    password = uuid.uuid4().hex

    def on_start(self) -> None:
        self.username = f"cluster-login-{uuid.uuid4().hex[:12]}"
        credentials = {"username": self.username, "password": self.password}
        with self.client.post("/users", json=credentials, name="POST /users", catch_response=True) as response:
            _fail_unless(response, 201, lambda b: b["username"] == self.username)

    @task
    def login(self) -> None:
        credentials = {"username": self.username, "password": self.password}
        with self.client.post("/login", json=credentials, name="POST /login", catch_response=True) as response:
            if _fail_unless(response, 200) is None:
                return
        with idempotent(self.client, "GET", "/me", "/me") as response:
            _fail_unless(response, 200, lambda b: b["username"] == self.username)
        with self.client.post("/logout", name="POST /logout", catch_response=True) as response:
            _fail_unless(response, 204)

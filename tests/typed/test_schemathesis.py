"""schemathesis against the example app's own /openapi.json: no 5xx, no answer the document contradicts.

The app runs as a process (``aiorest run example_app:app``) on the shared test
database; schemathesis generates requests for every operation from the document
the app serves, sends them, and checks each answer against it. Bounded: a few
examples per operation, a fixed seed (derandomized), well under 30 s.

What schemathesis generates changes with its releases, even derandomized; the
inputs in MUST_TRY are tried by every release, first: each once answered 500
(a NUL character, which PostgreSQL's text cannot hold, reached the database).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from harness.ports import free_port
from tests.server.test_conformance import COMMANDS, ROOT, Server, _stop, _wait_until_serving

schemathesis = pytest.importorskip("schemathesis")
hypothesis = pytest.importorskip("hypothesis")

MAX_EXAMPLES = 15  # per operation
TIME_BOUND = 30.0  # seconds of full runs; past it, one generated example an operation
# Cases each operation tries whatever schemathesis generates: Case(**fields).
# Answers that never end (an event stream): each example is read until its timeout.
STREAMS = {"GET /notes/events"}
MUST_TRY: dict[str, list[dict[str, Any]]] = {
    "POST /notes": [{"body": {"title": "nul\x00here"}, "media_type": "application/json"}],
    "POST /login": [{"body": {"username": "nul\x00here", "password": "a password"}, "media_type": "application/json"}],
    "POST /tokens": [{"body": {"username": "nul\x00here", "password": "a password"}, "media_type": "application/json"}],
    "GET /notes": [{"query": {"q": "a\x00b"}}],
}


@pytest.fixture
def example_app(shared_database_url: str) -> Iterator[str]:
    port = free_port()
    command = [sys.executable, *(part.replace("{port}", str(port)) for part in COMMANDS["aiorest"])]
    env = {**os.environ, "DATABASE_URL": shared_database_url, "DATABASE_POOL_MIN": "2", "DATABASE_POOL_MAX": "4"}
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        running = Server("aiorest", port, process, log)
        try:
            _wait_until_serving(running)
            yield f"http://127.0.0.1:{port}"
        finally:
            _stop(running)


def _token(base: str) -> str:
    """A new user's bearer token, so that the generated requests reach the notes, not only their 401."""
    credentials = json.dumps({"username": f"st-{uuid.uuid4().hex[:12]}", "password": "schemathesis pw"}).encode()
    for path in ("/users", "/tokens"):
        request = urllib.request.Request(base + path, credentials, {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as response:
            body = json.load(response)
    token: str = body["token"]
    return token


def test_the_example_app_answers_as_its_document_says(example_app: str) -> None:
    from schemathesis import checks

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # schemathesis' dependencies, not ours
        schema = schemathesis.openapi.from_url(f"{example_app}/openapi.json")
    chosen = [
        checks.not_a_server_error,
        checks.status_code_conformance,
        checks.content_type_conformance,
        checks.response_schema_conformance,
        checks.response_headers_conformance,
    ]
    authorization = {"Authorization": f"Bearer {_token(example_app)}"}
    deadline = time.monotonic() + TIME_BOUND
    ran: dict[str, int] = {}
    # Every operation: users and tokens, the notes API (typed, as a logged-in user) and the
    # TechEmpower routes (untyped: the document says what their return annotations say, and
    # no JSON for a Response).
    operations = [result.ok() for result in schema.get_all_operations()]
    labels = {op.label for op in operations}
    assert labels >= {"GET /notes", "POST /notes", "PATCH /notes/{note_id}", "GET /plaintext", "GET /fortunes"}
    assert labels >= {"POST /users", "POST /login", "POST /logout", "GET /me", "POST /tokens", "DELETE /tokens/current"}
    assert labels >= MUST_TRY.keys()
    for operation in operations:
        # Past the time bound (a busy machine), every operation still runs, with one generated example
        # besides its explicit ones: the bound spends fewer examples, it never skips an operation.
        examples = MAX_EXAMPLES if time.monotonic() < deadline else 1
        label = operation.label
        if label in STREAMS:
            examples = 1
        ran[label] = 0

        @hypothesis.settings(
            max_examples=examples,
            derandomize=True,
            deadline=None,
            database=None,
            suppress_health_check=list(hypothesis.HealthCheck),
            phases=[hypothesis.Phase.explicit, hypothesis.Phase.generate],
        )
        @hypothesis.given(case=operation.as_strategy())
        def run(case) -> None:  # type: ignore[no-untyped-def]
            ran[case.operation.label] += 1
            # all but the route that would revoke the token the others use
            headers = authorization if case.operation.label != "DELETE /tokens/current" else None
            case.call_and_validate(base_url=example_app, checks=chosen, headers=headers, timeout=5)

        for fields in MUST_TRY.get(label, ()):
            run = hypothesis.example(case=operation.Case(**fields))(run)
        run()
    print(f"schemathesis: {sum(ran.values())} examples over {len(ran)} operations")
    assert len(ran) == len(operations)
    assert all(ran.values()), ran

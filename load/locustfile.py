"""User flows against the example service's API (aiorest or a threaded baseline).

    locust -f load/locustfile.py --headless -u 100 -r 50 -t 30s --host http://127.0.0.1:8080 BrowsingUser WritingUser

Every answer is checked (status and body fields): a wrong answer counts as a
failure, not only a refused connection. Test data is created by the run and
removed at its end. Options: ``--think-min``/``--think-max`` (seconds between a
user's requests), ``--tfb-queries`` (N for /queries and /updates), and the
users' weights ``--browse-weight``, ``--write-weight``, ``--tfb-weight``.
"""

from __future__ import annotations

import random
import uuid
from typing import Any

from locust import FastHttpUser, between, events, task
from locust.runners import WorkerRunner

RUN_TAG = f"load-{uuid.uuid4().hex[:8]}"  # titles of this run's notes start with it
SEED_NOTES = 50


@events.init_command_line_parser.add_listener
def _options(parser: Any) -> None:
    parser.add_argument("--think-min", type=float, default=0.0, help="seconds a user waits between requests (min)")
    parser.add_argument("--think-max", type=float, default=0.0, help="seconds a user waits between requests (max)")
    parser.add_argument("--tfb-queries", type=int, default=20, help="N for /queries and /updates")
    parser.add_argument("--browse-weight", type=int, default=3)
    parser.add_argument("--write-weight", type=int, default=1)
    parser.add_argument("--tfb-weight", type=int, default=1)


@events.init.add_listener
def _apply_options(environment: Any, **kwargs: Any) -> None:
    options = environment.parsed_options
    if options is None:
        return
    wait = between(options.think_min, max(options.think_min, options.think_max))
    for user, weight in (
        (BrowsingUser, options.browse_weight),
        (WritingUser, options.write_weight),
        (TechEmpowerUser, options.tfb_weight),
    ):
        user.wait_time = wait
        user.weight = weight


def _client(environment: Any) -> Any:
    from locust.contrib.fasthttp import FastHttpSession

    return FastHttpSession(environment, base_url=environment.host, user=None)


@events.test_start.add_listener
def _seed(environment: Any, **kwargs: Any) -> None:
    # Once per run: on the master in distributed mode, else in the only process.
    if isinstance(environment.runner, WorkerRunner):
        return
    client = _client(environment)
    for i in range(SEED_NOTES):
        client.post("/notes", json={"title": f"{RUN_TAG} seed {i}", "body": "seeded by the load run"}, name="seed")


@events.test_stop.add_listener
def _clean(environment: Any, **kwargs: Any) -> None:
    if isinstance(environment.runner, WorkerRunner):
        return
    client = _client(environment)
    # Everything this run created carries RUN_TAG in its title; writers also delete their own.
    for _ in range(1000):  # bounded: at most 100,000 notes
        response = client.get(f"/notes?q={RUN_TAG}&limit=100", name="cleanup")
        items = response.json()["items"] if response.status_code == 200 else []
        if not items:
            return
        for note in items:
            client.delete(f"/notes/{note['id']}", name="cleanup")


def _fail_unless(response: Any, status: int, check: Any = None) -> Any:
    """Mark the request failed unless its status is ``status`` and ``check(body)`` holds."""
    if response.status_code != status:
        response.failure(f"expected {status}, got {response.status_code}: {response.text[:200]!r}")
        return None
    body = response.json() if status != 204 else None
    if check is not None:
        try:
            ok = check(body)
        except (KeyError, TypeError, ValueError) as exc:
            ok, body = False, exc
        if not ok:
            response.failure(f"unexpected body: {body!r:.200}")
            return None
    response.success()
    return body


class BrowsingUser(FastHttpUser):
    """Lists notes page by page, then reads one."""

    weight = 3
    wait_time = between(0, 0)

    @task
    def browse(self) -> None:
        url = f"/notes?q={RUN_TAG}&limit=10"
        seen: list[int] = []
        for _ in range(2):  # two pages, following the cursor
            with self.client.get(url, name="/notes?q&limit", catch_response=True) as response:
                page = _fail_unless(response, 200, lambda b: isinstance(b["items"], list) and "next" in b)
            if not page:
                return
            seen += [item["id"] for item in page["items"]]
            if not page["next"]:
                break
            url = page["next"] + f"&q={RUN_TAG}"
        if seen:
            note_id = random.choice(seen)
            with self.client.get(f"/notes/{note_id}", name="/notes/{id}", catch_response=True) as response:
                _fail_unless(response, 200, lambda b: b["id"] == note_id and b["title"].startswith(RUN_TAG))


class WritingUser(FastHttpUser):
    """Creates a note, updates it with the version it got, deletes it."""

    weight = 1
    wait_time = between(0, 0)

    @task
    def write(self) -> None:
        title = f"{RUN_TAG} {uuid.uuid4().hex[:8]}"
        with self.client.post("/notes", json={"title": title}, name="POST /notes", catch_response=True) as response:
            note = _fail_unless(response, 201, lambda b: b["title"] == title and b["version"] == 1)
        if not note:
            return
        url = f"/notes/{note['id']}"
        with self.client.patch(
            url, json={"done": True}, headers={"If-Match": '"1"'}, name="PATCH /notes/{id}", catch_response=True
        ) as response:
            _fail_unless(response, 200, lambda b: b["done"] is True and b["version"] == 2)
        with self.client.delete(url, name="DELETE /notes/{id}", catch_response=True) as response:
            _fail_unless(response, 204)


class TechEmpowerUser(FastHttpUser):
    """The TechEmpower mix: /json, /db, /queries, /fortunes, /updates."""

    weight = 1
    wait_time = between(0, 0)

    def _queries(self) -> int:
        options = self.environment.parsed_options
        return options.tfb_queries if options is not None else 20

    @task
    def json(self) -> None:
        with self.client.get("/json", catch_response=True) as response:
            _fail_unless(response, 200, lambda b: b == {"message": "Hello, World!"})

    @task
    def db(self) -> None:
        with self.client.get("/db", catch_response=True) as response:
            _fail_unless(response, 200, lambda b: 1 <= b["id"] <= 10000 and 1 <= b["randomNumber"] <= 10000)

    @task
    def queries(self) -> None:
        n = self._queries()
        with self.client.get(f"/queries?queries={n}", name="/queries", catch_response=True) as response:
            _fail_unless(response, 200, lambda b: len(b) == n and all("randomNumber" in row for row in b))

    @task
    def fortunes(self) -> None:
        with self.client.get("/fortunes", catch_response=True) as response:
            if response.status_code == 200 and "Additional fortune added at request time." in response.text:
                response.success()
            else:
                response.failure(f"bad fortunes page: {response.status_code}")

    @task
    def updates(self) -> None:
        n = self._queries()
        with self.client.get(f"/updates?queries={n}", name="/updates", catch_response=True) as response:
            _fail_unless(response, 200, lambda b: len(b) == n)

"""User flows against the example service's API (aiorest or a threaded baseline).

    locust -f load/clients/locustfile.py --headless -u 100 -r 50 -t 30s --host http://127.0.0.1:8080 \
        BrowsingUser WritingUser

Every answer is checked (status and body fields): a wrong answer counts as a
failure, not only a refused connection. Test data is created by the run and
removed at its end. Options: ``--think-min``/``--think-max`` (seconds between a
user's requests), ``--tfb-queries`` (N for /queries and /updates), and the
users' weights ``--browse-weight``, ``--write-weight``, ``--tfb-weight``.

Writes (``POST /notes``, ``PATCH /notes/{id}``) carry an ``Idempotency-Key``, a new
one per write, and a write that got no answer, 502, 503, 504 or 409 (its first
attempt still in flight) is sent again with the same key, at most ``WRITE_ATTEMPTS``
times in all, 0.25 s, 0.5 s, 1 s… apart (longer if a 503's ``Retry-After`` asks): the
server runs it once whatever happens to the attempts (docs/idempotency.rst). An attempt that is sent again is reported
as failed under ``(retried) <name>``, apart from the request's own line. A DELETE
answered 404 — nginx sent it to a second host after the first deleted the note —
is reported as ``DELETE /notes/{id} (gone)``, a success: the writer's note is gone.

Idempotent requests (the reads, and the writer's ``DELETE``) answered 503 with
``Retry-After`` are sent again after the time it asks for (at most
``RETRY_AFTER_CAP_S``), at most ``IDEMPOTENT_ATTEMPTS`` times in all, as an HTTP
client does: the server said "not now" (a pool with no connection free in time,
admission control). nginx does not pass a 503 on to another host (it would count
the host as failed). An attempt sent again is reported the same way, as failed under
``(retried) <name>``; a ``DELETE`` sent again that answers 404 is ``(gone)``.

The notes API needs a login, and a login costs an argon2 hash and is rate
limited (5 a minute per account, 20 per address): users do not log in. Before
the run (headless) or at its start, it registers ``ACCOUNTS`` accounts and gets
a session cookie (POST /login) and a bearer token (POST /tokens) for each, 8
login attempts in all; browsing users send a cookie, writing users a token,
accounts dealt out round-robin. In distributed mode the master does this and
sends the accounts to its workers before they start their users.
"""

from __future__ import annotations

import itertools
import logging
import random
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from email.utils import parsedate_to_datetime
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import quote

import gevent
from gevent.event import Event
from locust import FastHttpUser, between, events, task
from locust.runners import MasterRunner, WorkerRunner

SEED_NOTES = 50
WRITE_ATTEMPTS = 5
#: Statuses after which a write is sent again with its key: no answer (0), the balancer's or the
#: server's "try again", and 409: the key's first attempt still runs.
RETRIED_STATUSES = frozenset({0, 409, 502, 503, 504})
RETRIED_PREFIX = "(retried) "
#: An idempotent request answered 503 with Retry-After is sent again, this many attempts in all,
#: after the wait it asks for, capped: a load run does not sit out a server's long estimate.
IDEMPOTENT_ATTEMPTS = 3
RETRY_AFTER_CAP_S = 2.0
ACCOUNTS = 4
_PASSWORD = uuid.uuid4().hex  # the run's accounts' password; only the process that logs in needs it
_RUN_MESSAGE = "aiorest-load-run"  # master → workers: the run's tag and accounts


@dataclass(frozen=True)
class Account:
    username: str
    session: str  # the session cookie's value, from POST /login
    token: str  # a bearer token, from POST /tokens

    @property
    def cookie(self) -> dict[str, str]:
        return {"Cookie": f"session={self.session}"}

    @property
    def bearer(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


@dataclass
class Run:
    tag: str  # titles of this run's notes and names of its accounts start with it
    accounts: list[Account] = field(default_factory=list)
    prepared: bool = False  # the accounts of the coming (or current) test are made


RUN = Run(f"load-{uuid.uuid4().hex[:8]}")  # a worker takes the master's on its message
_turns = itertools.count()  # deals the accounts out to this process's users
_names = itertools.count()  # the web UI may run several tests: their accounts are named apart
_idle = Event()  # cleared while the run's setup runs
_idle.set()


class SetupError(RuntimeError):
    """The run could not make its accounts: its notes users will get 401s."""


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
    if isinstance(environment.runner, WorkerRunner):
        environment.runner.register_message(_RUN_MESSAGE, _receive_run)
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


def _receive_run(environment: Any, msg: Any, **kwargs: Any) -> None:
    # The master sends it from its test_start, before the spawn message that starts this worker's users.
    RUN.tag = msg.data["tag"]
    RUN.accounts = [Account(**account) for account in msg.data["accounts"]]


def _client(environment: Any) -> Any:
    """A client of its own: its own connection, and its own cookie jar (a login rotates the session it sends)."""
    from locust.contrib.fasthttp import FastHttpSession

    return FastHttpSession(environment.host, environment.events.request, user=None)


def _expect(response: Any, status: int, what: str) -> Any:
    if response.status_code != status:
        raise SetupError(f"{what}: expected {status}, got {response.status_code}: {(response.text or '')[:200]!r}")
    return response


def _make_account(environment: Any, username: str) -> Account:
    client = _client(environment)
    credentials = {"username": username, "password": _PASSWORD}
    _expect(client.post("/users", json=credentials, name="setup"), 201, f"POST /users {username}")
    token = _expect(client.post("/tokens", json=credentials, name="setup"), 201, "POST /tokens").json()["token"]
    try:
        login = _expect(client.post("/login", json=credentials, name="setup"), 200, "POST /login")
        cookie = SimpleCookie(login.headers.get("Set-Cookie") or "").get("session")
        if cookie is None or not cookie.value:
            raise SetupError(f"POST /login set no session cookie: {login.headers.get('Set-Cookie')!r}")
    except SetupError:
        client.delete("/tokens/current", headers={"Authorization": f"Bearer {token}"}, name="cleanup")
        raise
    return Account(username, cookie.value, token)


@events.init.add_listener
def _setup_headless(environment: Any, **kwargs: Any) -> None:
    # Headless, set up before the run starts: the run time (-t) counts from the start,
    # and the logins' hashes would eat into it, all of it in a short run.
    options = environment.parsed_options
    if options is not None and options.headless and not isinstance(environment.runner, WorkerRunner):
        _prepare(environment)


@events.test_start.add_listener
def _setup(environment: Any, **kwargs: Any) -> None:
    # Fires on the master and on each worker in distributed mode, else in the only
    # process: the master (or the only process) makes the accounts once (if init has
    # not), a worker has them already from the master's message.
    if isinstance(environment.runner, WorkerRunner):
        return
    _prepare(environment)
    if isinstance(environment.runner, MasterRunner):
        environment.runner.send_message(
            _RUN_MESSAGE, {"tag": RUN.tag, "accounts": [asdict(account) for account in RUN.accounts]}
        )


def _prepare(environment: Any) -> None:
    if RUN.prepared or not {BrowsingUser, WritingUser} & set(environment.user_classes):
        return
    RUN.prepared = True  # once per test, even if it fails: no more login attempts
    _idle.clear()
    try:
        _make_accounts(environment)
    finally:
        _idle.set()


def _make_accounts(environment: Any) -> None:
    made: list[Account] = []
    try:
        for _ in range(ACCOUNTS):
            made.append(_make_account(environment, f"{RUN.tag}-{next(_names)}"))
    except SetupError as exc:
        logging.error("the run has no accounts, its notes users will fail with 401: %s", exc)
        _release(environment, made)
        return
    RUN.accounts = made
    client = _client(environment)
    try:
        for i in range(SEED_NOTES):  # each account's own, for its browsing users
            note = {"title": f"{RUN.tag} seed {i}", "body": "seeded by the load run"}
            _expect(client.post("/notes", json=note, headers=made[i % len(made)].bearer, name="seed"), 201, "seed")
    except SetupError as exc:  # the browsing users would read empty pages and count them as successes
        logging.error("the run's notes could not be seeded, its browsing users will find none: %s", exc)


@events.test_stop.add_listener
def _clean_after_stop(environment: Any, **kwargs: Any) -> None:
    # A lone process's users have stopped by now. A headless master's test_stop
    # comes before it tells its workers to quit: the master cleans when it quits.
    if not isinstance(environment.runner, (WorkerRunner, MasterRunner)):
        _clean(environment)


@events.quitting.add_listener
def _clean_on_quit(environment: Any, **kwargs: Any) -> None:
    if not isinstance(environment.runner, WorkerRunner):
        _clean(environment)


def _clean(environment: Any) -> None:
    # A run shorter than its setup stops while the setup still runs: let it finish, then undo it.
    if not _idle.wait(timeout=60):
        logging.error("the run's setup did not finish: its accounts are left as they are")
    accounts, RUN.accounts, RUN.prepared = RUN.accounts, [], False  # once, whichever event comes first
    _release(environment, accounts)


def _release(environment: Any, accounts: list[Account]) -> None:
    """Revoke the tokens (no writer can add a note after), delete the run's notes, log the sessions out."""
    for account in accounts:
        client = _client(environment)
        revoked = client.delete("/tokens/current", headers=account.bearer, name="cleanup")
        for _ in range(1000):  # bounded: at most 100,000 notes
            response = client.get(f"/notes?q={RUN.tag}&limit=100", headers=account.cookie, name="cleanup")
            items = response.json()["items"] if response.status_code == 200 else []
            deleted = 0
            for note in items:  # a writer still finishing may delete one first: a 404 here is fine
                gone = client.delete(f"/notes/{note['id']}", headers=account.cookie, name="cleanup")
                deleted += gone.status_code in (204, 404)
            if not deleted:  # nothing left, or the deletes fail (then the same page would come back forever)
                if items:
                    logging.error("cleanup of %s: its notes could not be deleted", account.username)
                break
        logout = client.post("/logout", headers=account.cookie, name="cleanup")
        if revoked.status_code != 204 or logout.status_code != 204:
            logging.error(
                "cleanup of %s: DELETE /tokens/current %s, POST /logout %s",
                account.username,
                revoked.status_code,
                logout.status_code,
            )


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


def retry_after(response: Any) -> float | None:
    """The seconds a 503's ``Retry-After`` asks to wait, capped; None unless a 503 with one."""
    if response.status_code != 503:
        return None
    headers = response.headers or {}
    value = headers.get("Retry-After") or headers.get("retry-after")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:  # an HTTP date
        try:
            seconds = parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError):
            seconds = RETRY_AFTER_CAP_S
    return min(max(seconds, 0.0), RETRY_AFTER_CAP_S)


@contextmanager
def idempotent(client: Any, method: str, url: str, name: str, **kwargs: Any) -> Iterator[Any]:
    """``client.request(..., catch_response=True)``, sent again while it answers 503 with ``Retry-After``.

    Each attempt sent again is reported failed, as ``(retried) <name>``, with the
    status and the wait; the block gets the last attempt's response.
    """
    for attempt in range(IDEMPOTENT_ATTEMPTS):
        with client.request(method, url, name=name, catch_response=True, **kwargs) as response:
            wait = retry_after(response)
            if wait is None or attempt == IDEMPOTENT_ATTEMPTS - 1:
                yield response
                return
            response.request_meta["name"] = RETRIED_PREFIX + name
            response.failure(f"sent again in {wait:.1f} s: 503 Retry-After {(response.text or '')[:80]!r}")
        gevent.sleep(wait)


class _NotesUser(FastHttpUser):
    """A user of one of the run's accounts, dealt out round-robin; no account (setup failed): no credentials."""

    abstract = True
    auth: dict[str, str] = {}

    def on_start(self) -> None:
        accounts = RUN.accounts
        if accounts:  # workers deal from different places, so that few users spread over all accounts
            turn = next(_turns) + getattr(self.environment.runner, "worker_index", 0)
            self.auth = self.credentials(accounts[turn % len(accounts)])

    def credentials(self, account: Account) -> dict[str, str]:
        raise NotImplementedError


class BrowsingUser(_NotesUser):
    """Lists notes page by page, then reads one; logged in with a session cookie."""

    weight = 3
    wait_time = between(0, 0)

    def credentials(self, account: Account) -> dict[str, str]:
        return account.cookie

    @task
    def browse(self) -> None:
        # Only the seeded notes: a writer's own may be gone by the time it is read.
        seeded = quote(f"{RUN.tag} seed")
        url = f"/notes?q={seeded}&limit=10"
        seen: list[int] = []
        for _ in range(2):  # two pages, following the cursor
            with idempotent(self.client, "GET", url, "/notes?q&limit", headers=self.auth) as response:
                page = _fail_unless(response, 200, lambda b: isinstance(b["items"], list) and "next" in b)
            if not page:
                return
            seen += [item["id"] for item in page["items"]]
            if not page["next"]:
                break
            url = page["next"]  # it keeps the q filter
        if seen:
            note_id = random.choice(seen)
            with idempotent(self.client, "GET", f"/notes/{note_id}", "/notes/{id}", headers=self.auth) as response:
                _fail_unless(response, 200, lambda b: b["id"] == note_id and b["title"].startswith(f"{RUN.tag} seed "))


class WritingUser(_NotesUser):
    """Creates a note, updates it with the version it got, deletes it; sends a bearer token."""

    weight = 1
    wait_time = between(0, 0)
    #: a note whose update failed is left in place (for a harness to check whether it was applied)
    keep_note_after_failed_update = False

    def credentials(self, account: Account) -> dict[str, str]:
        return account.bearer

    def note_title(self) -> str:
        """The title of the next note: the run's tag first, so that the cleanup finds it."""
        return f"{RUN.tag} {uuid.uuid4().hex[:8]}"

    def send_write(
        self, method: str, url: str, body: dict[str, Any], headers: dict[str, str], name: str, status: int, check: Any
    ) -> Any:
        """Send a write with a new Idempotency-Key, again with that key while it fails in a way worth retrying."""
        headers = {**headers, "Idempotency-Key": str(uuid.uuid4())}
        for attempt in range(WRITE_ATTEMPTS):
            with self.client.request(
                method, url, json=body, headers=headers, name=name, catch_response=True
            ) as response:
                if response.status_code not in RETRIED_STATUSES or attempt == WRITE_ATTEMPTS - 1:
                    return _fail_unless(response, status, check)
                response.request_meta["name"] = RETRIED_PREFIX + name
                response.failure(f"sent again: {response.status_code} {(response.text or '')[:100]!r}")
            gevent.sleep(max(0.25 * 2**attempt, retry_after(response) or 0.0))  # a 503's Retry-After, if longer
        return None

    @task
    def write(self) -> None:
        title = self.note_title()
        note = self.send_write(
            "POST", "/notes", {"title": title}, self.auth, "POST /notes", 201,
            lambda b: b["title"] == title and b["version"] == 1,
        )  # fmt: skip
        if not note:
            return
        url = f"/notes/{note['id']}"
        updated = self.send_write(
            "PATCH", url, {"done": True}, {**self.auth, "If-Match": '"1"'}, "PATCH /notes/{id}", 200,
            lambda b: b["done"] is True and b["version"] == 2,
        )  # fmt: skip
        if updated is None and self.keep_note_after_failed_update:
            return
        with idempotent(self.client, "DELETE", url, "DELETE /notes/{id}", headers=self.auth) as response:
            if response.status_code == 404:  # sent twice (by nginx, a host died with it, or after a 503): gone
                response.request_meta["name"] = "DELETE /notes/{id} (gone)"
                response.success()
            else:
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
        with idempotent(self.client, "GET", "/json", "/json") as response:
            _fail_unless(response, 200, lambda b: b == {"message": "Hello, World!"})

    @task
    def db(self) -> None:
        with idempotent(self.client, "GET", "/db", "/db") as response:
            _fail_unless(response, 200, lambda b: 1 <= b["id"] <= 10000 and 1 <= b["randomNumber"] <= 10000)

    @task
    def queries(self) -> None:
        n = self._queries()
        with idempotent(self.client, "GET", f"/queries?queries={n}", "/queries") as response:
            _fail_unless(response, 200, lambda b: len(b) == n and all("randomNumber" in row for row in b))

    @task
    def fortunes(self) -> None:
        with idempotent(self.client, "GET", "/fortunes", "/fortunes") as response:
            if response.status_code == 200 and "Additional fortune added at request time." in response.text:
                response.success()
            else:
                response.failure(f"bad fortunes page: {response.status_code}")

    @task
    def updates(self) -> None:
        n = self._queries()
        with idempotent(self.client, "GET", f"/updates?queries={n}", "/updates") as response:
            _fail_unless(response, 200, lambda b: len(b) == n)

"""aiorest behind a real nginx running the shipped deploy/nginx.conf (issue 19, point 2)."""

from __future__ import annotations

import asyncio
import hashlib
import http.client
import json
import re
import signal
import socket
import time
from collections import deque
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import pytest

from aiorest import ServerSentEvent
from aiorest.http import EventStreamParser
from harness.fixtures import APP, aiorest_process, nginx  # noqa: F401  (fixtures)
from harness.steady import run


def request(
    url: str, method: str = "GET", body: bytes | Iterable[bytes] | None = None, headers: dict[str, str] | None = None
) -> tuple[int, http.client.HTTPMessage, bytes]:
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        chunked = body is not None and not isinstance(body, bytes)
        connection.request(method, url[len(f"http://{parts.netloc}") :], body, headers or {}, encode_chunked=chunked)
        response = connection.getresponse()
        return response.status, response.headers, response.read()
    finally:
        connection.close()


def raw_status(port: int, head: bytes) -> tuple[int, bytes]:
    """Send a request head alone and read the whole answer (nginx closes or answers at once)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(head)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
            if b"\r\n\r\n" in data and len(data.partition(b"\r\n\r\n")[2]) >= _length(data):
                break
    status = int(data.split(b" ", 2)[1])
    return status, data.partition(b"\r\n\r\n")[2]


def _length(data: bytes) -> int:
    found = re.search(rb"\r\ncontent-length: *(\d+)", data.partition(b"\r\n\r\n")[0], re.IGNORECASE)
    return int(found.group(1)) if found else 1 << 30


@pytest.mark.parametrize("transport", ["tcp", "unix"])
def test_bodies_headers_and_errors_flow_both_ways(nginx, aiorest_process, transport):  # noqa: F811
    trust = ("--forwarded-allow-ips", "127.0.0.1,unix")  # nginx: believe its X-Forwarded-* and X-Request-ID
    if transport == "unix":
        upstream = aiorest_process(APP, *trust, unix=nginx.socket_path("aiorest.sock"))
    else:
        upstream = aiorest_process(APP, *trust)
    nginx.start([upstream.upstream])

    # A 200 KB JSON body, there and back, intact.
    document = json.dumps({"items": [{"id": i, "text": "é" + "x" * 40} for i in range(4000)]}).encode()
    assert len(document) > 200_000
    status, headers, body = request(nginx.url + "/echo", "POST", document, {"Content-Type": "application/json"})
    assert status == 200 and body == document
    assert headers["X-Body-SHA256"] == hashlib.sha256(document).hexdigest()

    # A chunked upload reaches aiorest whole, with a Content-Length (nginx buffers request bodies).
    pieces = [bytes([48 + i % 10]) * 7000 for i in range(30)]
    status, headers, body = request(nginx.url + "/echo", "POST", iter(pieces))
    assert status == 200 and body == b"".join(pieces)
    assert headers["X-Seen-Content-Length"] == str(len(body)) and headers["X-Seen-Transfer-Encoding"] == "-"

    # A streamed response (chunked from aiorest) reaches the client whole.
    status, headers, body = request(nginx.url + "/stream?chunks=60&size=10000")
    assert status == 200 and len(body) == 600_000
    assert body == b"".join(bytes([65 + i % 26]) * 10000 for i in range(60))

    # What the handler sees of the request head.
    status, headers, body = request(nginx.url + "/", headers={"X-Forwarded-For": "203.0.113.7", "X-Request-ID": "mine"})
    seen = json.loads(body)
    assert status == 200 and seen["pid"] == upstream.pid
    raw = dict((name.lower(), value) for name, value in seen["headers"])
    assert raw["x-forwarded-for"] == "203.0.113.7, 127.0.0.1"  # the client's claim, then its address
    assert raw["x-forwarded-proto"] == "http"
    assert raw["host"] == "127.0.0.1" and raw["x-forwarded-host"] == f"127.0.0.1:{nginx.port}"
    assert re.fullmatch("[0-9a-f]{32}", raw["x-request-id"])  # nginx's own, not the client's
    assert "connection" not in raw  # no "Connection: close": the upstream connection stays open
    # Told to trust nginx, aiorest takes the client and the id from these headers (the test client
    # is on loopback too, hence trusted: its own claim 203.0.113.7 is the first untrusted hop).
    assert seen["client"][0] == "203.0.113.7" and seen["id"] == raw["x-request-id"]
    # nginx writes its line once the response is sent: the client may read it first
    logged = f"rid={raw['x-request-id']} upstream={upstream.upstream} ustatus=200"
    deadline = time.monotonic() + 5
    while not any(logged in line for line in nginx.access_log()) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert any(logged in line for line in nginx.access_log()), nginx.access_log()[-3:]

    # aiorest's JSON errors pass through unchanged.
    status, headers, body = request(nginx.url + "/notes/7")
    assert status == 404 and headers["Content-Type"] == "application/json"
    assert json.loads(body) == {"error": {"status": 404, "message": "no such note", "details": {"note_id": 7}}}


def test_body_limit_metrics_and_nginx_errors_answer_json(nginx, aiorest_process):  # noqa: F811
    upstream = aiorest_process()
    port = nginx.start([upstream.upstream])
    assert request(f"http://127.0.0.1:{upstream.port}/metrics")[0] == 200  # aiorest serves it...

    for path in ["/metrics", "/metrics?name=x", "//metrics", "/%6Detrics", "/./metrics", "/metrics/", "/metrics/x"]:
        status, headers, body = request(nginx.url + path)  # ...nginx does not, however spelled
        assert status == 404, path
        assert json.loads(body) == {"error": {"status": 404, "message": "Not Found", "details": None}}, path

    # client_max_body_size equals Limits.max_body_size (1 MiB): exactly 1 MiB passes, one byte more is 413.
    status, _, body = request(nginx.url + "/echo", "POST", b"7" * (1 << 20))
    assert status == 200 and len(body) == 1 << 20
    status, body = raw_status(port, b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1048577\r\n\r\n")
    assert status == 413
    assert json.loads(body) == {"error": {"status": 413, "message": "Request body too large", "details": None}}

    upstream.stop()
    status, headers, body = request(nginx.url + "/")
    assert status == 502 and headers["Content-Type"] == "application/json"
    assert json.loads(body)["error"]["status"] == 502


def test_upstream_connections_are_kept_alive_and_reused(nginx, aiorest_process):  # noqa: F811
    upstream = aiorest_process()
    nginx.start([upstream.upstream])
    workers = len(nginx.worker_pids())
    assert workers >= 1
    peers = set()
    for _ in range(200):
        status, _, body = request(nginx.url + "/")  # a new client connection each time, to any nginx worker
        assert status == 200
        peers.add(tuple(json.loads(body)["client"]))
    # Sequential requests: each nginx worker reuses its one cached connection to aiorest.
    assert 1 <= len(peers) <= 2 * workers, (len(peers), workers)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
async def test_one_upstream_stops_under_steady_load_and_no_request_fails(nginx, aiorest_process, sig):  # noqa: F811
    first, second = aiorest_process(), aiorest_process()
    nginx.start([first.upstream, second.upstream])
    load = asyncio.ensure_future(run(nginx.url + "/", rate=300, duration=6, connections=16, timeout=5))
    await asyncio.sleep(2.5)
    assert first.process is not None
    first.process.send_signal(sig)
    result = await load
    assert result.failed == 0, (result.first_failures, nginx.error_log()[-3000:])
    assert result.statuses == {200: result.sent} and result.sent >= 0.9 * 300 * 6
    assert first.process.wait(timeout=5) is not None
    deadline = time.monotonic() + 5  # nginx writes a line once its response is sent: the client may be first
    while True:
        log = [line for line in nginx.access_log() if '"GET / HTTP/1.1"' in line]  # not the readiness probe
        if len(log) >= result.sent or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    answered_by = [re.search(r" upstream=(.*?) ustatus=(.*?) rt=", line).groups() for line in log]
    assert len(answered_by) == result.sent
    # Some requests went to the stopped upstream, failed there, and nginx passed them to the other one.
    passed_on = [entry for entry in answered_by if entry[0] == f"{first.upstream}, {second.upstream}"]
    assert passed_on and all(statuses.endswith(", 200") for _, statuses in passed_on)
    assert {entry[0] for entry in answered_by} >= {first.upstream, second.upstream}


def test_a_post_already_sent_is_not_passed_on_but_a_get_is(nginx, aiorest_process):  # noqa: F811
    primary, backup = aiorest_process(), aiorest_process()
    nginx.start([primary.upstream, f"{backup.upstream} backup"])
    with ThreadPoolExecutor(2) as pool:
        post = pool.submit(request, nginx.url + "/slow?seconds=3", "POST", b"{}")
        get = pool.submit(request, nginx.url + "/slow?seconds=3")
        time.sleep(1.0)  # both are in the primary's handler
        assert primary.process is not None
        primary.process.kill()
        post_status, _, post_body = post.result(timeout=10)
        get_status, _, get_body = get.result(timeout=10)
    # The POST may have run on the primary: nginx does not run it again (no `non_idempotent`).
    assert post_status == 502 and json.loads(post_body)["error"]["status"] == 502
    assert get_status == 200 and json.loads(get_body)["pid"] == backup.pid


def open_event_stream(url: str, headers: dict[str, str] | None = None) -> EventStreamReader:
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    connection.request(
        "GET", url[len(f"http://{parts.netloc}") :], headers={"Accept": "text/event-stream", **(headers or {})}
    )
    return EventStreamReader(connection, connection.getresponse())


class EventStreamReader:
    """An event stream read over http.client, event by event, as it arrives (tests/server/test_sse_signals.py too)."""

    def __init__(self, connection: http.client.HTTPConnection, response: http.client.HTTPResponse) -> None:
        self.connection = connection
        self.response = response
        self.parser = EventStreamParser()
        self.pending: deque[ServerSentEvent] = deque()

    def read(self) -> bool:
        """Read what came; False at the end of the body (an incomplete body raises http.client.IncompleteRead)."""
        chunk = self.response.read1(65536)
        self.pending.extend(self.parser.feed(chunk))
        return bool(chunk)

    def next_event(self) -> ServerSentEvent | None:
        while not self.pending:
            if not self.read():
                return None
        return self.pending.popleft()

    def close(self) -> None:
        self.connection.close()


def test_events_pass_through_nginx_one_at_a_time(nginx, aiorest_process):  # noqa: F811
    upstream = aiorest_process()
    nginx.start([upstream.upstream])
    stream = open_event_stream(nginx.url + "/events?heartbeat=0.2")
    try:
        assert stream.response.status == 200
        assert stream.response.headers["Content-Type"] == "text/event-stream; charset=utf-8"
        assert stream.response.headers["Cache-Control"] == "no-cache"
        # The handler now waits: the first event came through all the same (nginx buffered nothing).
        first = stream.next_event()
        assert first is not None and (first.event, first.data, first.id) == ("pid", str(upstream.pid), "1")
        assert request(nginx.url + "/release", "POST", b"")[0] == 200
        second = stream.next_event()
        assert second is not None and (second.data, second.id) == ("released", "2")
        while stream.parser.comments < 2:  # heartbeats, one at a time too
            assert stream.read()
    finally:
        stream.close()
    # Reconnecting, the client names the last event it had: the handler sees it.
    stream = open_event_stream(nginx.url + "/events", {"Last-Event-ID": "2"})
    try:
        first = stream.next_event()
        assert first is not None and first.id == "21"
    finally:
        stream.close()

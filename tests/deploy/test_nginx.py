"""aiorest behind a real nginx running the shipped deploy/nginx.conf (issue 19, point 2)."""

from __future__ import annotations

import asyncio
import hashlib
import http.client
import io
import json
import os
import re
import signal
import socket
import threading
import time
from collections import deque
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import aiohttp
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


def _memory(pid: int, field: str) -> int:
    """``VmRSS`` (resident now) or ``VmHWM`` (its peak) of a process, in bytes."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} for {pid}")


def _reset_peak(pid: int) -> int:
    """Start the process's peak resident memory over from now (Linux 4.0+); returns what is resident."""
    with open(f"/proc/{pid}/clear_refs", "w") as clear_refs:
        clear_refs.write("5")
    return _memory(pid, "VmRSS")


async def test_a_large_attachment_goes_up_and_comes_back_in_ranges_through_nginx(
    nginx,  # noqa: F811
    aiorest_process,  # noqa: F811
    database_url,
    tmp_path,
):
    env = dict(os.environ, DATABASE_URL=database_url, DATABASE_POOL_MAX="4", DATABASE_POOL_MIN="1")
    # Two hosts of one cluster on one database, one after the other: the first applies the migrations.
    hosts = [aiorest_process("example_app.app:app", env=env, ready_path="/json") for _ in range(2)]
    nginx.start([host.upstream for host in hosts])
    path = tmp_path / "upload.bin"
    size = 40 * 1024 * 1024 + 4321
    digest = hashlib.sha256()
    with path.open("wb") as file:
        for block in (os.urandom(1 << 20) for _ in range(size >> 20)):
            digest.update(block)
            file.write(block)
        tail = os.urandom(size - (size >> 20 << 20))
        digest.update(tail)
        file.write(tail)
    async with aiohttp.ClientSession(nginx.url) as client:
        user = {"username": "u" + os.urandom(6).hex(), "password": "correct horse battery"}
        async with client.post("/users", json=user) as response:
            assert response.status == 201
        async with client.post("/tokens", json=user) as response:
            auth = {"Authorization": f"Bearer {(await response.json())['token']}"}
        async with client.post("/notes", json={"title": "with a file"}, headers=auth) as response:
            note = await response.json()
        # From after the logins on: argon2id takes 64 MiB of memory for each password it hashes.
        before = {host.pid: _reset_peak(host.pid) for host in hosts}

        # Elsewhere the body limit stays nginx's small default: 413 from nginx, in aiorest's shape.
        async with client.post("/notes", data=io.BytesIO(b"x" * (2 << 20)), headers=auth) as response:
            assert response.status == 413 and (await response.json())["error"]["status"] == 413
            assert "X-Request-ID" not in response.headers  # nginx's answer: aiorest never saw it

        # Past client_body_buffer_size (128k), a body nginx buffers goes to a temporary file first.
        async with client.post(
            "/notes", data=io.BytesIO(b"{" * 600_000), headers={**auth, "Content-Type": "application/json"}
        ) as response:
            assert response.status == 400

        form = aiohttp.FormData()
        with path.open("rb") as file:
            form.add_field("file", file, filename="upload.bin", content_type="application/octet-stream")
            async with client.post(f"/notes/{note['id']}/attachments", data=form, headers=auth) as response:
                assert response.status == 201, await response.text()
                attachment = await response.json()
        assert attachment["size"] == size and attachment["sha256"] == digest.hexdigest()
        # The upload was not: proxy_request_buffering off streamed it to aiorest as it came.
        buffered = [line for line in nginx.error_log().splitlines() if "buffered to a temporary file" in line]
        assert any('"POST /notes HTTP/1.1"' in line for line in buffered), buffered
        assert not any("/attachments" in line for line in buffered), buffered

        async with client.get(attachment["url"], headers=auth) as response:
            whole = hashlib.sha256()
            async for chunk in response.content.iter_chunked(1 << 16):
                whole.update(chunk)
            assert response.status == 200 and whole.hexdigest() == digest.hexdigest()
        with path.open("rb") as file:
            for first, last in [(0, 99), (size - 300_000, size - 1), (12_345_678, 12_345_678 + 700_000)]:
                file.seek(first)
                expected = file.read(last - first + 1)
                # Through nginx (each host in turn), and from each host directly: every host serves it.
                for base in [nginx.url, nginx.url, *(host.url for host in hosts)]:
                    ranged = {**auth, "Range": f"bytes={first}-{last}"}
                    async with client.get(base + attachment["url"], headers=ranged) as response:
                        assert response.status == 206, base
                        assert response.headers["Content-Range"] == f"bytes {first}-{last}/{size}"
                        assert await response.read() == expected, base
        etag = {**auth, "If-None-Match": f'"{digest.hexdigest()}"'}
        async with client.get(attachment["url"], headers=etag) as response:
            assert response.status == 304
    # Neither host held the file in memory: its peak grew by much less than the 40 MiB it streamed.
    grown = max(_memory(host.pid, "VmHWM") - before[host.pid] for host in hosts)
    assert grown < 16 * 1024 * 1024, grown


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


async def test_a_websocket_goes_through_nginx_and_plain_requests_still_reuse_connections(
    nginx,  # noqa: F811
    aiorest_process,  # noqa: F811
):
    upstream = aiorest_process()
    nginx.start([upstream.upstream])
    async with aiohttp.ClientSession(nginx.url) as client:
        async with client.ws_connect("/ws") as ws:
            assert int(await ws.receive_str(timeout=5)) == upstream.pid
            await ws.send_str("héllo")
            assert await ws.receive_str(timeout=5) == "héllo"
            await ws.send_bytes(b"\x00\xff" * 40_000)
            assert await ws.receive_bytes(timeout=5) == b"\x00\xff" * 40_000
        assert ws.close_code == 1000

        # Quiet for several of its ping intervals: aiorest's pings come through nginx and the
        # client's pongs go back (a lost pong would close it 1011 after ping_timeout, 1.5 s).
        async with client.ws_connect("/ws/pinged", autoping=False) as ws:
            pings = 0
            while pings < 5:
                message = await ws.receive(timeout=5)
                assert message.type == aiohttp.WSMsgType.PING, message
                await ws.pong(message.data)
                pings += 1
            await ws.send_str("still here")
            assert await ws.receive_str(timeout=5) == "still here"

        # A plain request through the same configuration carries no Connection header to aiorest...
        async with client.get("/") as response:
            seen = {name.lower(): value for name, value in (await response.json())["headers"]}
        assert "connection" not in seen and "upgrade" not in seen
    # ...and (test_upstream_connections_are_kept_alive_and_reused) its connection stays open.
    peers = {tuple(json.loads(request(nginx.url + "/")[2])["client"]) for _ in range(50)}
    assert 1 <= len(peers) <= 2 * len(nginx.worker_pids()), peers


def test_an_event_stream_misses_no_event_across_a_rolling_restart_behind_nginx(nginx, aiorest_process):  # noqa: F811
    hosts = [aiorest_process(APP, "--workers", "1", "--graceful-timeout", "30") for _ in range(2)]
    nginx.start([host.upstream for host in hosts])
    old_workers = {pid for host in hosts for pid in host.worker_pids()}
    received: list[int] = []
    served_by: list[int] = []  # the process of each stream, in order
    done = threading.Event()

    def follow() -> None:
        """Read events as a browser does: when a stream ends, reconnect naming the last event received."""
        while not done.is_set():
            stream = open_event_stream(nginx.url + "/counter", {"Last-Event-ID": str(received[-1])} if received else {})
            try:
                assert stream.response.status == 200
                # A stream ends cleanly (its last chunk): a cut one would raise IncompleteRead here.
                while not done.is_set() and (event := stream.next_event()) is not None:
                    received.append(int(event.id))
                    if not served_by or served_by[-1] != int(event.data):
                        served_by.append(int(event.data))
            finally:
                stream.close()

    with ThreadPoolExecutor(1) as pool:
        reader = pool.submit(follow)
        # A rolling restart: each host in turn replaces its worker (SIGHUP), the next once it is done.
        for host in hosts:
            time.sleep(0.5)
            host.send_signal(signal.SIGHUP)
            host.wait_for_log("reload done", timeout=15)
        time.sleep(0.5)
        done.set()
        reader.result(timeout=15)
    assert received == list(range(1, len(received) + 1))  # every event once, in order
    assert len(received) > 50 and len(served_by) >= 2, (len(received), served_by)
    # The streams came from old and new workers: at least one was ended by a reload and resumed elsewhere.
    assert served_by[0] in old_workers and served_by[-1] not in old_workers, (served_by, old_workers)

"""H1Connection fed bytes, with no socket and no event loop: every edge of HTTP/1.1 as a unit test.

The connection does no I/O: bytes go in through ``receive_data``, requests come
out of ``queue``, and the answers' framing is decided by ``connection_line`` and
``finish``. The error answers it asks for are rendered by writing.py onto a list.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from aiorest import App, Limits, Request
from aiorest.http.exceptions import ClientDisconnected, HTTPError, HTTPServiceUnavailable
from aiorest.server._h1 import ANSWERING, BODY, CLOSED, CLOSING, HEAD, IDLE, STOPPED, UPGRADED, H1Connection, Timeout
from aiorest.server._h1.connection import CLOSE
from aiorest.server._h1.states import RECV, SEND
from aiorest.server.writing import write_error

APP = App()


class Lines:
    """A transport that keeps what is written: the bytes out."""

    def __init__(self) -> None:
        self.data = b""

    def write(self, data: bytes) -> None:
        self.data += data


def connection(**limits: Any) -> tuple[H1Connection, SimpleNamespace]:
    clock = SimpleNamespace(now=100.0)
    return H1Connection(APP, Limits(**limits), clock), clock


def body(request: Request) -> bytes:
    """The whole body of a request whose body has arrived, read without an event loop."""
    reading = request.read()
    with pytest.raises(StopIteration) as done:
        reading.send(None)
    return done.value.value


def error_bytes(conn: H1Connection, request: Request) -> bytes:
    error = conn.take_head_error(request)
    assert error is not None
    out = Lines()
    write_error(out, error, APP.json, head_request=request.method == "HEAD", header_lines="")  # type: ignore[arg-type]
    return out.data


def status(conn: H1Connection, request: Request) -> int:
    error = conn.head_errors.get(request)
    return 200 if error is None else error.status


GET = b"GET /a?x=1 HTTP/1.1\r\nHost: example.com\r\n\r\n"


def test_a_simple_get_is_one_request_answered_and_kept_alive():
    conn, _ = connection()
    assert (conn.recv_state, conn.send_state) == (HEAD, IDLE)
    conn.receive_data(GET)
    [request] = conn.queue
    assert (request.method, request.path, request.query_string, request.http_version) == ("GET", "/a", "x=1", "1.1")
    assert request.headers["host"] == "example.com"
    assert conn.next_request() is request
    assert (conn.recv_state, conn.send_state) == (HEAD, ANSWERING)
    assert conn.connection_line(request) == ""
    assert conn.finish(request) is True
    assert (conn.recv_state, conn.send_state, len(conn.queue)) == (HEAD, IDLE, 0)
    assert conn.next_request() is None


def test_pipelined_requests_are_queued_in_order_and_answered_one_by_one():
    conn, _ = connection()
    conn.receive_data(GET + b"POST /b HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc" + GET.replace(b"/a", b"/c"))
    assert [r.path for r in conn.queue] == ["/a", "/b", "/c"]
    first, second, third = conn.queue
    assert body(second) == b"abc"
    assert conn.finish(first) and conn.send_state is ANSWERING and conn.next_request() is second
    assert conn.finish(second) and conn.send_state is ANSWERING
    assert conn.finish(third) and conn.send_state is IDLE


def test_the_pipeline_is_bounded_want_read_goes_false_then_true():
    conn, _ = connection(max_pipeline=2)
    conn.receive_data(GET * 2)
    assert not conn.want_read
    assert conn.finish(conn.queue[0])
    assert conn.want_read


def test_a_common_request_is_counted_by_the_last_byte_of_its_head_whatever_the_reads():
    # HeadReader queues the common request; the state machine counts it when llhttp reports the
    # message complete: the send side and the pipeline bound must follow at the head's last byte.
    conn, _ = connection(max_pipeline=1)
    for byte in GET[:-1]:
        conn.receive_data(bytes([byte]))
    assert (len(conn.queue), conn.send_state, conn.want_read) == (0, IDLE, True)
    conn.receive_data(GET[-1:])
    assert (len(conn.queue), conn.recv_state, conn.send_state, conn.want_read) == (1, HEAD, ANSWERING, False)
    assert conn.finish_kept(conn.queue[0]) is True and conn.send_state is IDLE


@pytest.mark.parametrize(
    ("head", "line", "kept"),
    [
        (b"GET / HTTP/1.1\r\nHost: h\r\n\r\n", "", True),
        (b"GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n", "Connection: close\r\n", False),
        (b"GET / HTTP/1.0\r\n\r\n", "Connection: close\r\n", False),
        (b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", "Connection: keep-alive\r\n", True),
    ],
)
def test_keep_alive_connection_close_and_http_1_0(head, line, kept):
    conn, _ = connection()
    conn.receive_data(head)
    [request] = conn.queue
    assert conn.connection_line(request) == line
    assert conn.finish(request) is kept
    assert conn.send_state is (IDLE if kept else CLOSED)


def test_after_connection_close_what_was_pipelined_is_never_answered():
    conn, _ = connection()
    conn.receive_data(b"GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n" + GET)
    assert len(conn.queue) == 2
    first = conn.queue[0]
    conn.connection_line(first)
    assert conn.finish(first) is False
    assert not conn.queue


def test_expect_100_continue_answered_without_the_body_closes():
    conn, _ = connection()
    conn.receive_data(b"PUT /u HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
    [request] = conn.queue
    assert conn.recv_state is BODY
    assert conn.connection_line(request) == "Connection: close\r\n"  # the body may never come
    assert conn.finish(request) is False


def test_expect_100_continue_with_its_body_stays_open():
    conn, _ = connection()
    conn.receive_data(b"PUT /u HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
    conn.receive_data(b"hello")
    [request] = conn.queue
    assert conn.recv_state is HEAD
    assert body(request) == b"hello"
    assert conn.connection_line(request) == ""
    assert conn.finish(request) is True


def test_a_content_length_body_arrives_in_pieces():
    conn, _ = connection()
    conn.receive_data(b"POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 11\r\n\r\nhello")
    [request] = conn.queue
    assert conn.recv_state is BODY
    conn.receive_data(b" world")
    assert conn.recv_state is HEAD
    assert body(request) == b"hello world"


def test_a_chunked_body():
    conn, _ = connection()
    conn.receive_data(b"POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
    conn.receive_data(b"6\r\n world\r\n0\r\n\r\n")
    [request] = conn.queue
    assert conn.recv_state is HEAD
    assert body(request) == b"hello world"


def test_a_full_body_buffer_stops_reading_until_the_handler_takes_it():
    conn, _ = connection(body_buffer=4)
    conn.receive_data(b"POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\nhello")
    assert not conn.want_read
    conn.body_consumed(5)
    assert conn.want_read


def test_413_a_content_length_over_the_limit_stops_reading():
    conn, _ = connection(max_body_size=10)
    conn.receive_data(b"POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 11\r\n\r\n")
    [request] = conn.queue
    assert status(conn, request) == 413
    assert (conn.recv_state, conn.send_state, conn.want_read) == (STOPPED, CLOSING, False)
    assert conn.connection_line(request) == "Connection: close\r\n"


def test_413_a_chunked_body_over_the_limit_fails_the_body():
    conn, _ = connection(max_body_size=10)
    conn.receive_data(b"POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n")
    conn.receive_data(b"b\r\nhello world\r\n")
    [request] = conn.queue
    with pytest.raises(HTTPError) as failed:
        body(request)
    assert failed.value.status == 413
    assert conn.recv_state is STOPPED


def test_414_a_request_target_too_long():
    conn, _ = connection(max_request_line=20)
    conn.receive_data(b"GET /" + b"a" * 30 + b" HTTP/1.1\r\nHost: h\r\n\r\n")
    [request] = conn.queue
    assert status(conn, request) == 414
    assert conn.recv_state is STOPPED


@pytest.mark.parametrize(
    ("limits", "head"),
    [
        ({"max_headers": 3}, b"GET / HTTP/1.1\r\nHost: h\r\n" + b"X-A: 1\r\n" * 5 + b"\r\n"),
        ({"max_header_size": 100}, b"GET / HTTP/1.1\r\nHost: h\r\nX-A: " + b"a" * 200 + b"\r\n\r\n"),
    ],
)
def test_431_too_many_or_too_large_headers(limits, head):
    conn, _ = connection(**limits)
    conn.receive_data(head)
    [request] = conn.queue
    assert status(conn, request) == 431


def test_431_a_head_that_never_ends_is_bounded_as_it_arrives():
    conn, _ = connection(max_header_size=100)
    conn.receive_data(b"GET / HTTP/1.1\r\nHost: h\r\nX-A: ")
    for _ in range(10):
        conn.receive_data(b"a" * 20)
    [request] = conn.queue
    assert status(conn, request) == 431
    assert conn.recv_state is STOPPED


@pytest.mark.parametrize(
    "head",
    [
        b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a b\r\n\r\n",
        b"GET / HTTP/1.1\r\n\r\n",
    ],
    ids=["cl-and-te", "two-cl", "te-not-chunked", "two-hosts", "bad-host", "no-host"],
)
def test_bad_framing_and_bad_hosts_are_400_then_close(head):
    conn, _ = connection()
    conn.receive_data(head)
    request = conn.queue[-1]
    assert status(conn, request) == 400
    assert conn.connection_line(request) == "Connection: close\r\n"
    assert conn.finish(request) is False


def test_malformed_bytes_become_a_400_answer_and_close():
    conn, _ = connection()
    conn.receive_data(GET + b"\x00\x01 garbage\r\n\r\n")
    good, broken = conn.queue
    assert status(conn, good) == 200 and status(conn, broken) == 400
    assert conn.recv_state is STOPPED and not conn.want_read
    conn.receive_data(GET)  # after a stop, nothing more is read
    assert len(conn.queue) == 2
    assert conn.finish(good) is True  # answered before the error, in its turn
    out = error_bytes(conn, broken)
    assert out.startswith(b"HTTP/1.1 400 Bad Request\r\n") and b"Connection: close\r\n" in out
    assert conn.finish(broken) is False


def test_a_head_split_across_many_small_feeds():
    conn, _ = connection()
    head = b"GET /split HTTP/1.1\r\nHost: example.com\r\nX-Long: " + b"v" * 50 + b"\r\n\r\n"
    for i in range(len(head)):
        conn.receive_data(head[i : i + 1])
    [request] = conn.queue
    assert request.path == "/split" and request.headers["x-long"] == "v" * 50


def test_an_upgrade_to_another_protocol_is_answered_then_the_connection_closes():
    conn, _ = connection()
    conn.receive_data(b"GET / HTTP/1.1\r\nHost: h\r\nConnection: upgrade\r\nUpgrade: h2c\r\n\r\n")
    [request] = conn.queue
    assert conn.recv_state is STOPPED and not request.keep_alive


_WEBSOCKET_HEAD = b"GET /ws HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"


@pytest.mark.parametrize(("slices", "size"), [(1, 40_000), (7, 8_000)])  # one read larger than a parsing slice
def test_a_websocket_head_keeps_the_bytes_after_it_for_the_websocket(slices, size):
    conn, _ = connection()
    data = _WEBSOCKET_HEAD + b"\x81\x85frame" + b"x" * size
    step = -(-len(data) // slices)
    for start in range(0, len(data), step):
        conn.receive_data(data[start : start + step])
    [request] = conn.queue
    assert conn.recv_state is UPGRADED and not conn.want_read
    assert not request.keep_alive  # refused (answered as HTTP), the connection closes
    assert conn.upgrade() == data[len(_WEBSOCKET_HEAD) :]
    assert conn.send_state is UPGRADED
    assert not conn.finish(request) and conn.send_state is CLOSED


def test_a_websocket_head_that_is_refused_reads_nothing_more():
    conn, _ = connection()
    conn.receive_data(_WEBSOCKET_HEAD + b"\x81\x85hello")
    [request] = conn.queue
    assert not conn.finish(request)  # the handler answered HTTP: the connection closes
    assert conn.send_state is CLOSED and not conn.want_read


def test_a_client_that_sends_too_much_before_the_upgrade_is_answered_is_stopped():
    conn, _ = connection(max_header_size=1024)
    conn.receive_data(_WEBSOCKET_HEAD)
    conn.receive_data(b"x" * 2000)
    assert conn.recv_state is STOPPED and conn.upgrade() is None


def test_an_upgrade_with_a_body_is_never_served_with_the_body_cut_off():
    # llhttp stops at the head of a request asking to upgrade and hands the rest over as the new protocol's
    # bytes: a POST's Content-Length body never reaches its handler, which would read b"" (h11 reads b"xy").
    conn, _ = connection()
    conn.receive_data(
        b"POST / HTTP/1.1\r\nHost: h\r\nConnection: upgrade\r\nUpgrade: websocket\r\nContent-Length: 2\r\n\r\nxy"
    )
    [request] = conn.queue
    assert status(conn, request) == 400  # found by the h11 differential test
    assert not request.keep_alive


def test_eof_mid_body_fails_the_body_and_closes_after_the_queue():
    conn, _ = connection()
    conn.receive_data(b"POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\nhel")
    conn.receive_eof()
    [request] = conn.queue
    with pytest.raises(ClientDisconnected):
        body(request)
    assert conn.send_state is CLOSING
    assert conn.connection_line(request) == "Connection: close\r\n"


def test_connection_lost_ends_both_sides():
    conn, _ = connection()
    conn.receive_data(GET)
    conn.connection_lost(answering=False)
    assert (conn.recv_state, conn.send_state, len(conn.queue)) == (CLOSED, CLOSED, 0)
    assert conn.check_deadline(1e9) is None


def test_deadlines_a_head_too_slow_is_a_408_an_idle_one_closes():
    conn, clock = connection(head_timeout=10, keepalive_timeout=30)
    assert conn.check_deadline(105) is None
    assert conn.check_deadline(111) == CLOSE  # nothing sent since accept
    conn, clock = connection(head_timeout=10)
    conn.receive_data(b"HEAD / HTT")
    timeout = conn.check_deadline(111)
    assert isinstance(timeout, Timeout) and timeout.error.status == 408 and timeout.head_request
    conn, clock = connection(head_timeout=10, keepalive_timeout=30)
    conn.receive_data(GET)
    clock.now = 120.0
    assert conn.finish(conn.queue[0])
    assert conn.check_deadline(140) is None
    assert conn.check_deadline(151) == CLOSE  # kept alive, idle past keepalive_timeout


def test_a_body_too_slow_fails_with_408_and_stops_reading():
    conn, clock = connection(body_timeout=5)
    conn.receive_data(b"POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\n")
    [request] = conn.queue
    assert conn.check_deadline(106) is None
    with pytest.raises(HTTPError) as failed:
        body(request)
    assert failed.value.status == 408
    assert conn.recv_state is STOPPED and not request.keep_alive


def test_a_body_trickling_a_byte_at_a_time_misses_its_total_deadline():
    # Issue 34, point 2: body_timeout restarted with every byte, so one byte every 59 s kept a body alive.
    conn, clock = connection(body_timeout=5, body_min_rate=1000)
    conn.receive_data(b"POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 100\r\n\r\n")
    [request] = conn.queue
    for second in range(1, 6):
        clock.now = 100.0 + second
        conn.receive_data(b"x")
        assert conn.check_deadline(clock.now) is None
    # 5 s from the head's end, plus 5 bytes / 1000 B/s: late at 105.005
    assert conn.check_deadline(105.5) is None
    with pytest.raises(HTTPError) as failed:
        body(request)
    assert failed.value.status == 408
    assert conn.recv_state is STOPPED and not conn.want_read


def test_bytes_received_earn_a_body_more_time_at_the_minimum_rate():
    conn, clock = connection(body_timeout=2, body_min_rate=100, body_buffer=10_000)
    conn.receive_data(b"POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 2000\r\n\r\n")
    [request] = conn.queue
    conn.receive_data(b"x" * 1000)  # 10 s more: due at 112
    assert conn.check_deadline(111.9) is None and conn.recv_state is BODY
    assert conn.check_deadline(112.1) is None and conn.recv_state is STOPPED


def test_a_body_late_after_its_answer_closes_the_connection():
    conn, clock = connection(body_timeout=5)
    conn.receive_data(b"POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 100\r\n\r\nabc")
    [request] = conn.queue
    assert conn.finish(request)  # answered without reading: the rest is discarded as it comes
    assert conn.check_deadline(106) == CLOSE


def test_time_the_server_stops_reading_does_not_count_against_a_body():
    conn, clock = connection(body_timeout=5, body_buffer=10, max_body_size=1000)
    conn.receive_data(b"POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 100\r\n\r\n")
    [request] = conn.queue
    conn.receive_data(b"x" * 20)  # past body_buffer: the server stops reading, the deadline stands still
    assert not conn.want_read
    clock.now = 200.0
    assert conn.check_deadline(200.0) is None and conn.recv_state is BODY
    conn.body_consumed(20)  # the handler reads; 100 s were the server's
    assert conn.want_read
    assert conn.check_deadline(204.0) is None and conn.recv_state is BODY
    assert conn.check_deadline(206.0) is None and conn.recv_state is STOPPED


def test_bodies_held_by_all_connections_are_bounded_together():
    # Issue 34, point 2: 200 stalled bodies of 250 KiB held 50 MiB; body_buffer bounded each, not all.
    from aiorest.server._h1.body import BodyMemory

    memory = BodyMemory(1000)
    limits = Limits(body_buffer=600, max_body_size=1000, max_body_memory=1000)
    clock = SimpleNamespace(now=100.0)
    first = H1Connection(APP, limits, clock, None, memory)
    second = H1Connection(APP, limits, clock, None, memory)
    head = b"POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 900\r\n\r\n"
    first.receive_data(head + b"x" * 600)
    second.receive_data(head + b"y" * 300)
    assert memory.used == 900
    second.receive_data(b"y" * 200)  # 1100 in all: this body is refused
    with pytest.raises(HTTPServiceUnavailable):
        body(second.queue[0])
    assert second.recv_state is STOPPED and not second.queue[0].keep_alive
    second.connection_lost(answering=False)  # its bytes go back
    assert memory.used == 600
    first.receive_data(b"x" * 300)
    assert body(first.queue[0]) == b"x" * 900
    first.body_consumed(900)  # what the protocol tells it when a handler reads
    assert memory.used == 0


def test_the_admission_gate_buffers_a_body_past_body_buffer():
    conn, clock = connection(body_buffer=100, max_body_size=1000)
    conn.receive_data(b"POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 500\r\n\r\n" + b"x" * 200)
    assert not conn.want_read  # past body_buffer
    conn.buffer_whole_body()
    assert conn.want_read
    conn.receive_data(b"x" * 300)
    assert body(conn.queue[0]) == b"x" * 500


def chunked(*chunks: bytes) -> bytes:
    return b"".join(chunks) + b"0\r\n\r\n"


def test_chunk_extensions_are_bounded():
    # Issue 34, point 3 (the class of Node.js's CVE-2024-22019): a 1 MiB extension was served.
    conn, _ = connection(max_body_size=10 * 1024 * 1024, max_body_memory=10 * 1024 * 1024)
    conn.receive_data(b"POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n")
    [request] = conn.queue
    conn.receive_data(b"1;ext=" + b"e" * (1024 * 1024) + b"\r\nx\r\n" + chunked())
    with pytest.raises(HTTPError) as failed:
        body(request)
    assert failed.value.status == 413 and "extensions" in str(failed.value)
    assert conn.recv_state is STOPPED


def test_chunk_framing_counts_against_the_body_limit():
    # 5,000 chunks with 4 KiB extensions each: 20 MB on the wire for 5 KB of data.
    conn, _ = connection(max_body_size=64 * 1024)
    conn.receive_data(b"POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n")
    [request] = conn.queue
    one = b"1;e=" + b"v" * 4096 + b"\r\nx\r\n"
    for _ in range(5000):
        conn.receive_data(one)
        if conn.stopped:
            break
    with pytest.raises(HTTPError) as failed:
        body(request)
    assert failed.value.status == 413


def test_small_chunks_with_short_extensions_are_served():
    conn, _ = connection()
    conn.receive_data(b"POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n")
    [request] = conn.queue
    for _ in range(2000):
        conn.receive_data(b"1;name=value\r\nx\r\n")
    conn.receive_data(chunked())
    assert body(request) == b"x" * 2000


def test_shutdown_closes_an_idle_connection_now_and_a_busy_one_after_its_answer():
    conn, _ = connection()
    assert conn.shutdown() is True
    conn, _ = connection()
    conn.receive_data(GET)
    assert conn.shutdown() is False
    request = conn.queue[0]
    assert conn.connection_line(request) == "Connection: close\r\n"
    assert conn.finish(request) is False


def test_past_max_connections_the_first_request_is_refused_with_503():
    conn, _ = connection()
    conn.refuse(HTTPServiceUnavailable("too many connections", retry_after=1))
    conn.receive_data(GET)
    [request] = conn.queue
    assert status(conn, request) == 503 and not request.keep_alive


def test_the_state_tables_are_closed_and_every_state_is_reached():
    recv_states = {HEAD, BODY, STOPPED, UPGRADED, CLOSED}
    send_states = {IDLE, ANSWERING, CLOSING, UPGRADED, CLOSED}
    assert {s for s, _ in RECV} | set(RECV.values()) == recv_states
    assert {s for s, _ in SEND} | set(SEND.values()) == send_states
    for state in recv_states:
        assert RECV[state, "lost"] is CLOSED
    for state in send_states:
        assert SEND[state, "lost"] is CLOSED
    with pytest.raises(KeyError):
        RECV[STOPPED, "body"]  # a stopped side never reads another head
    with pytest.raises(KeyError):
        SEND[CLOSED, "kept"]  # nothing is answered on a closed connection


def test_transitions_follow_the_table_through_a_whole_exchange():
    conn, _ = connection()
    seen = [(conn.recv_state, conn.send_state)]
    conn.receive_data(b"POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\n")
    seen.append((conn.recv_state, conn.send_state))
    conn.receive_data(b"ok")
    seen.append((conn.recv_state, conn.send_state))
    conn.finish(conn.queue[0])
    seen.append((conn.recv_state, conn.send_state))
    conn.receive_eof()
    seen.append((conn.recv_state, conn.send_state))
    assert seen == [(HEAD, IDLE), (BODY, ANSWERING), (HEAD, ANSWERING), (HEAD, IDLE), (HEAD, CLOSING)]


def test_the_connection_knows_no_event_loop():
    from aiorest.server._h1 import body, broken, connection, heads, reader, states

    for module in (connection, reader, heads, body, broken, states):
        with open(module.__file__, encoding="utf-8") as source:
            assert "asyncio" not in source.read(), module.__name__


def test_an_abandoned_answer_closes_and_drops_the_queue():
    conn, _ = connection()
    conn.receive_data(GET * 2)
    conn.abandon()
    assert (conn.send_state, len(conn.queue)) == (CLOSED, 0)
    assert conn.finish(conn.next_request() or Request("GET", "/", b"/", "", "1.1", [], APP)) is False


def test_finish_kept_is_finish_for_a_kept_alive_answer():
    conn, _ = connection()
    conn.receive_data(GET + GET)
    first, second = conn.queue
    assert conn.finish_kept(first) is True and conn.send_state is ANSWERING and conn.next_request() is second
    assert conn.finish_kept(second) is True and (conn.recv_state, conn.send_state, len(conn.queue)) == (HEAD, IDLE, 0)

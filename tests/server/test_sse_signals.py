"""SIGTERM and SIGHUP end the event streams of a real ``aiorest run`` process within the graceful
deadline (issue 37, point 5): the client sees the end of the stream, not a cut connection, and
reconnects with Last-Event-ID."""

from __future__ import annotations

import signal
import time
import weakref

from aiorest.server.shared import ServerState
from harness.fixtures import APP, aiorest_process  # noqa: F401  (fixtures)
from tests.deploy.test_nginx import open_event_stream


def test_sigterm_ends_an_event_stream_cleanly(aiorest_process):  # noqa: F811
    # A graceful deadline far above the client's 10-s read timeout: a stream left to the deadline
    # would fail the read below (timeout), and one cut at the deadline would be an IncompleteRead.
    upstream = aiorest_process(APP, "--graceful-timeout", "60")
    stream = open_event_stream(f"http://127.0.0.1:{upstream.port}/events?heartbeat=60")
    try:
        first = stream.next_event()
        assert first is not None and first.event == "pid"
        upstream.send_signal(signal.SIGTERM)
        assert stream.next_event() is None  # the chunked body's last chunk came
        assert stream.response.isclosed()
    finally:
        stream.close()
    assert upstream.process is not None and upstream.process.wait(20) == 0


def test_sighup_ends_the_old_workers_streams_and_the_client_comes_back(aiorest_process):  # noqa: F811
    upstream = aiorest_process(APP, "--workers", "1", "--graceful-timeout", "60")
    url = f"http://127.0.0.1:{upstream.port}/events?heartbeat=60"
    stream = open_event_stream(url)
    try:
        first = stream.next_event()
        assert first is not None and first.event == "pid"
        old_pid = int(first.data)
        upstream.send_signal(signal.SIGHUP)  # the worker is replaced: the old one stops gracefully
        assert stream.next_event() is None
    finally:
        stream.close()
    upstream.wait_for_log("reload done")
    deadline = time.monotonic() + 10
    while True:  # as a browser does: reconnect, naming the last event received
        stream = open_event_stream(url, {"Last-Event-ID": first.id})
        try:
            again = stream.next_event()
        finally:
            stream.close()
        assert again is not None
        if int(again.data) != old_pid or time.monotonic() > deadline:
            break
    assert int(again.data) != old_pid and again.id == f"{first.id}1"


async def test_each_stream_ends_on_a_stopping_future_of_its_own_that_goes_with_it() -> None:
    # One future shared by every stream made its callbacks list as long as the streams: 10,000 clients that
    # went at once each removed theirs from it, O(N²), and the loop stalled 1.3 s. Each stream's own now.
    state = ServerState()
    first, second = state.stopping(), state.stopping()
    assert first is not second
    gone = weakref.ref(second)
    del second
    assert gone() is None  # the server keeps no stream's future once the stream is gone
    state.end_streams()
    assert first.done() and state.stopping().done()  # and one asked for after the stop is done at once

"""aiorest's WebSocket frames against the websockets library's own sans-IO protocol, over a real socket.

Hypothesis writes client frame streams (tests/server/ws_frames.py): messages, fragmented or not,
pings between fragments, and at most one broken item (reserved opcodes and bits, unmasked
frames, oversize frames and messages, long or fragmented control frames, invalid UTF-8,
interleaved fragments, a continuation of nothing, bad close codes and reasons, a length with
its top bit set, input cut short), then a close or EOF. Each goes to an aiorest echo route
over TCP, written in pieces cut anywhere, and to ServerProtocol alone, fed the same bytes:

* aiorest echoes the same messages, answers the same pings, and closes with the same code
  (the client's close: with its reason too);
* the close code is one RFC 6455 (7.4.1) gives for the first broken item;
* no traceback reaches the client, and every connection ends within ws_frames.WAIT seconds;
* the server logs no error, and still serves a WebSocket afterwards.

The examples are derandomized. More: ``AIOREST_FUZZ_EXAMPLES=5000``, or
``python -m tests.server.fuzz_ws --seconds 300``.
"""

from __future__ import annotations

import logging
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.server.ws_frames import ServerThread, Stream, close_frame, exchange, problems, reference, streams

EXAMPLES = int(os.environ.get("AIOREST_FUZZ_EXAMPLES", "200"))


@pytest.fixture(scope="module")
def server():
    with ServerThread() as running:
        yield running


def test_frame_streams_are_answered_as_the_websockets_library_answers_them(server, caplog):
    caplog.set_level(logging.ERROR)

    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(streams(), st.lists(st.integers(0, 2000), max_size=3))
    def check(stream, splits):
        theirs = reference(stream)
        ours = exchange(server.port, stream, theirs, splits)
        assert problems(stream, ours, theirs) == [], (stream.kind, ours.summary(), theirs.summary())

    check()
    assert [record for record in caplog.records if record.name.startswith("aiorest")] == []
    after = Stream([], close_frame(1000, b"still here"), "valid")  # the server still serves
    assert exchange(server.port, after, reference(after)).close == (1000, "still here")

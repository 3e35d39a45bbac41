"""H1Connection against h11: the same bytes, split any way, are the same requests, or refused.

Hypothesis writes HTTP/1.1 request streams: valid ones (tests/server/h1_streams.py),
pipelined, with Content-Length and chunked bodies, and ones with a request broken
(h1_mutations.py: bad chunk sizes, CL and TE, obs-fold, bare LF, control bytes, over-long lines, no Host...).
Each is fed to H1Connection and to h11.Connection(h11.SERVER) in reads cut anywhere.

* Valid streams: both serve the same requests (method, target, headers, body), in order.
* Broken streams: aiorest never serves a request h11 would not have parsed, nor one
  h11 reads differently; where aiorest is stricter, h1_streams.STRICTER says why
  (the RFC's leave), and where it is more lenient, h1_streams.LENIENT.
* Split invariance: H1Connection gives the same result however the stream is cut.

The examples are derandomized, so CI sees the same ones each run. More of them:
``AIOREST_FUZZ_EXAMPLES=5000 python -m pytest tests/server/test_h1_differential.py``,
or the fuzz harness, ``python -m tests.server.fuzz_h1 --seconds 300``.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.server.h1_mutations import mutated_streams
from tests.server.h1_streams import difference, parse_aiorest, parse_h11, splits, valid_streams

EXAMPLES = int(os.environ.get("AIOREST_FUZZ_EXAMPLES", "150"))
SETTINGS = settings(
    max_examples=EXAMPLES, derandomize=True, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)


@SETTINGS
@given(valid_streams, st.data())
def test_valid_streams_are_the_requests_h11_reads(stream, data):
    reads = data.draw(splits(stream), label="reads")
    ours, theirs = parse_aiorest(reads), parse_h11(reads)
    assert difference(True, ours, theirs) is None, (ours, theirs)


@SETTINGS
@given(mutated_streams(), st.data())
def test_broken_streams_are_refused_where_h11_refuses_them(kind_stream, data):
    _, stream = kind_stream
    reads = data.draw(splits(stream), label="reads")
    ours, theirs = parse_aiorest(reads), parse_h11(reads)
    assert difference(False, ours, theirs) is None, (ours, theirs)


@SETTINGS
@given(st.one_of(valid_streams, mutated_streams().map(lambda kind_stream: kind_stream[1])), st.data())
def test_how_a_stream_is_cut_does_not_change_what_h1connection_makes_of_it(stream, data):
    whole = parse_aiorest([stream]).summary()
    assert parse_aiorest(data.draw(splits(stream), label="reads")).summary() == whole
    assert parse_aiorest([stream[at : at + 1] for at in range(len(stream))]).summary() == whole

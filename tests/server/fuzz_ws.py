"""Fuzz aiorest's WebSocket frames against the websockets library's: ``python -m tests.server.fuzz_ws --seconds 300``.

The differential test's property (tests/server/test_ws_differential.py) with many more
examples, in rounds of fresh random ones until the time is up, against one echo server.
Each problem (ws_frames.problems: a difference from the reference, a close code RFC 6455
does not give, a traceback, a hang) is counted and the shortest stream showing it kept.
Prints a line per round and a summary; exits 1 if it found anything.
"""

from __future__ import annotations

import argparse
import collections
import sys
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.server.ws_frames import Hang, ServerThread, Stream, exchange, problems, reference, streams

ROUND = 200  # examples a round


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to fuzz (default 60)")
    args = parser.parse_args()
    kinds: collections.Counter[str] = collections.Counter()
    found: collections.Counter[str] = collections.Counter()
    shortest: dict[str, tuple[Stream, str]] = {}
    start = time.monotonic()
    rounds = 0
    with ServerThread() as server:

        @settings(max_examples=ROUND, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(streams(), st.lists(st.integers(0, 2000), max_size=3))
        def fuzz(stream: Stream, splits: list[int]) -> None:
            kinds[stream.kind] += 1
            theirs = reference(stream)
            try:
                ours = exchange(server.port, stream, theirs, splits)
                what = problems(stream, ours, theirs)
                detail = f"aiorest   {ours.summary()}\n  reference {theirs.summary()}"
            except Hang as exc:
                what, detail = [f"hang: {exc}"], ""
            for problem in what:
                name = f"{stream.kind}: {problem}"
                found[name] += 1
                size = sum(map(len, stream.chunks))
                if name not in shortest or size < sum(map(len, shortest[name][0].chunks)):
                    shortest[name] = (stream, detail)

        while time.monotonic() - start < args.seconds:
            fuzz()
            rounds += 1
            streams_so_far, elapsed = sum(kinds.values()), time.monotonic() - start
            print(f"round {rounds}: {streams_so_far} streams in {elapsed:.0f} s, {sum(found.values())} found")
            sys.stdout.flush()
    elapsed = time.monotonic() - start
    print(f"\n{sum(kinds.values())} streams in {elapsed:.0f} s, by kind:")
    for kind, count in sorted(kinds.items()):
        print(f"  {kind:20} {count}")
    if not found:
        print("nothing found: aiorest answered every stream as the websockets library does")
        return 0
    print("\nfound:")
    for name, count in found.most_common():
        stream, detail = shortest[name]
        print(f"- {name}: {count} times; shortest:\n  {stream.chunks!r} then {stream.tail!r}\n  {detail}")
    return 1


if __name__ == "__main__":
    sys.exit(main())

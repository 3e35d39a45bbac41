"""Fuzz H1Connection against h11 for a while: ``python -m tests.server.fuzz_h1 --seconds 300``.

The differential test's properties (tests/server/test_h1_differential.py) with many more
examples, in rounds of fresh random ones until the time is up. Nothing is asserted: each
difference from h11 (h1_streams.difference) and each exception escaping H1Connection (its
receive_data raises none: broken bytes become an error to answer) is counted, and the
shortest stream that shows it is kept. Prints a line per round and a summary; exits 1 if
it found anything.
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
import traceback

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.server.h1_mutations import KINDS, KNOWN_BUGS, mutated_streams
from tests.server.h1_streams import difference, parse_aiorest, parse_h11, splits, valid_streams

ROUND = 500  # examples a round


class Findings:
    def __init__(self) -> None:
        self.examples = 0
        self.kinds: collections.Counter[str] = collections.Counter()
        self.found: collections.Counter[str] = collections.Counter()
        self.shortest: dict[str, tuple[list[bytes], str]] = {}

    def note(self, what: str, reads: list[bytes], detail: str) -> None:
        self.found[what] += 1
        known = self.shortest.get(what)
        if known is None or sum(map(len, reads)) < sum(map(len, known[0])):
            self.shortest[what] = (reads, detail)


def check(findings: Findings, kind: str, stream: bytes, reads: list[bytes]) -> None:
    findings.examples += 1
    findings.kinds[kind] += 1
    try:
        ours = parse_aiorest(reads)
        whole = parse_aiorest([stream])
    except Exception as exc:  # noqa: BLE001 - any exception out of H1Connection is the bug being looked for
        findings.note(f"exception {type(exc).__name__} ({kind})", reads, traceback.format_exc(limit=-3))
        return
    theirs = parse_h11(reads)
    problem = difference(kind == "valid", ours, theirs)
    if problem is not None:
        findings.note(f"{kind}: {problem[:70]}", reads, f"aiorest {ours}\nh11     {theirs}")
    if ours.summary() != whole.summary():
        findings.note(f"split changes the result ({kind})", reads, f"split {ours}\nwhole {whole}")


def one_round(findings: Findings) -> None:
    streams = st.one_of(valid_streams.map(lambda stream: ("valid", stream)), mutated_streams([*KINDS, *KNOWN_BUGS]))

    @settings(max_examples=ROUND, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(streams, st.data())
    def fuzz(kind_stream: tuple[str, bytes], data: st.DataObject) -> None:
        kind, stream = kind_stream
        check(findings, kind, stream, data.draw(splits(stream)))

    fuzz()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to fuzz (default 60)")
    args = parser.parse_args()
    findings = Findings()
    start = time.monotonic()
    rounds = 0
    while time.monotonic() - start < args.seconds:
        one_round(findings)
        rounds += 1
        elapsed = time.monotonic() - start
        print(f"round {rounds}: {findings.examples} streams in {elapsed:.0f} s, {sum(findings.found.values())} found")
        sys.stdout.flush()
    elapsed = time.monotonic() - start
    print(f"\n{findings.examples} streams in {elapsed:.0f} s ({findings.examples / elapsed:.0f}/s), by kind:")
    for kind, count in sorted(findings.kinds.items()):
        print(f"  {kind:20} {count}")
    if not findings.found:
        print("nothing found: every difference from h11 is in h1_streams.STRICTER or LENIENT")
        return 0
    print("\nfound:")
    for what, count in findings.found.most_common():
        reads, detail = findings.shortest[what]
        print(f"- {what}: {count} times; shortest, as {len(reads)} reads:\n  {b''.join(reads)!r}\n  {detail}")
    return 1


if __name__ == "__main__":
    sys.exit(main())

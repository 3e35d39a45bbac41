"""Which multipart parser: defnull's ``multipart`` or ``python-multipart``, on the same bodies.

    python bench/multipart_parsers.py [--rounds 5]

Each parser is fed the same bodies in 64 KiB chunks, in this one process, and the
CPU time per body is the best of ``--rounds`` rounds (each of several parses). It
prints a table; docs/forms.rst quotes one run. python-multipart is the bench
extra's (FastAPI needs it): ``pip install -e '.[bench,forms]'``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable

import multipart
from python_multipart.multipart import MultipartParser

BOUNDARY = b"----aiorestBoundary7MA4YWxkTrZu0gW"
CHUNK = 64 * 1024


def file_body(size: int) -> bytes:
    head = b'Content-Disposition: form-data; name="file"; filename="a.bin"\r\nContent-Type: application/octet-stream'
    return b"--" + BOUNDARY + b"\r\n" + head + b"\r\n\r\n" + os.urandom(size) + b"\r\n--" + BOUNDARY + b"--\r\n"


def fields_body(count: int) -> bytes:
    parts = [
        b"--" + BOUNDARY + b'\r\nContent-Disposition: form-data; name="field%d"\r\n\r\nvalue number %d\r\n' % (i, i)
        for i in range(count)
    ]
    return b"".join(parts) + b"--" + BOUNDARY + b"--\r\n"


def with_multipart(body: bytes) -> int:
    received = 0
    parser = multipart.PushMultipartParser(BOUNDARY)
    for start in range(0, len(body), CHUNK):
        for event in parser.parse(body[start : start + CHUNK]):
            if isinstance(event, (bytes, bytearray)):
                received += len(event)
    parser.close()
    return received


def with_python_multipart(body: bytes) -> int:
    received = [0]

    def on_part_data(data: bytes, start: int, end: int) -> None:
        received[0] += end - start

    parser = MultipartParser(BOUNDARY, callbacks={"on_part_data": on_part_data})
    for start in range(0, len(body), CHUNK):
        parser.write(body[start : start + CHUNK])
    parser.finalize()
    return received[0]


def best_seconds(parse: Callable[[bytes], int], body: bytes, repeat: int, rounds: int) -> float:
    expected = parse(body)
    best = float("inf")
    for _ in range(rounds):
        started = time.process_time()
        for _ in range(repeat):
            assert parse(body) == expected
        best = min(best, (time.process_time() - started) / repeat)
    return best


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    cases = [("one 1 MiB file", file_body(1 << 20), 20), ("one 64 MiB file", file_body(64 << 20), 1)]
    cases.append(("20 small fields", fields_body(20), 500))
    print("| body | multipart | python-multipart | python-multipart / multipart |")
    print("|---|---|---|---|")
    for index, (name, body, repeat) in enumerate(cases, 1):
        print(f"[{index}/{len(cases)}] {name}…", file=sys.stderr)
        ours = best_seconds(with_multipart, body, repeat, args.rounds)
        theirs = best_seconds(with_python_multipart, body, repeat, args.rounds)
        print(f"| {name} | {ours * 1e3:.3f} ms | {theirs * 1e3:.3f} ms | {theirs / ours:.2f}× |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

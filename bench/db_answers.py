"""The database suites' answers, checked before they are measured.

A contender that answers a different shape (another key, fewer rows, a fortune
missing) would be measured doing other work, so each one's answers are checked
once, the first time it is started: TechEmpower's shapes (shared/TFB.md), the
headers every response needs, nothing about speed.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from harness.processes import ServerError

EXTRA_FORTUNE = "<tr><td>0</td><td>Additional fortune added at request time.</td></tr>"
ESCAPED_SCRIPT = "&lt;script&gt;alert("
JAPANESE = "<td>フレームワークのベンチマーク</td>"


def _get(url: str) -> tuple[str, str]:
    """The body and Content-Type of ``url``'s answer, which must be a 200 with the headers TFB requires."""
    with urllib.request.urlopen(url, timeout=10) as response:
        body = response.read().decode()
        missing = [name for name in ("Server", "Date", "Content-Type", "Content-Length") if not response.headers[name]]
        if response.status != 200 or missing:
            raise ValueError(f"status {response.status}, headers missing: {missing}")
        return body, response.headers["Content-Type"]


def _worlds(answer: Any, count: int) -> str | None:
    """What is wrong with a list of ``count`` World rows, or None."""
    if not isinstance(answer, list) or len(answer) != count:
        return f"not a list of {count} rows"
    for row in answer:
        if not isinstance(row, dict) or set(row) != {"id", "randomNumber"}:
            return f"a row is not {{id, randomNumber}}: {row!r}"
        if not all(isinstance(row[key], int) and 1 <= row[key] <= 10000 for key in row):
            return f"a row's numbers are out of 1..10000: {row!r}"
    return None


def problem(path: str, body: str, content_type: str) -> str | None:
    """What is wrong with the answer to ``path`` (one of the suites' endpoints), or None."""
    if path.startswith("/fortunes"):
        if not content_type.startswith("text/html"):
            return f"Content-Type {content_type}"
        rows = body.count("<tr><td>")
        if rows != 13 or EXTRA_FORTUNE not in body or ESCAPED_SCRIPT not in body or JAPANESE not in body:
            return f"{rows} rows, the extra fortune, the escaped script or the Japanese one missing"
        return None
    if not content_type.startswith("application/json"):
        return f"Content-Type {content_type}"
    answer = json.loads(body)
    if path == "/db":
        return _worlds([answer], 1)
    count = int(path.rpartition("=")[2])  # /queries?queries=20, /updates?queries=20
    return _worlds(answer, count)


def check_answers(name: str, url: str, paths: list[str]) -> None:
    """ServerError naming the first of ``paths`` that ``url`` answers in another shape than TFB's."""
    for path in paths:
        try:
            wrong = problem(path, *_get(url + path))
        except (OSError, ValueError) as exc:  # no answer, a non-200, JSON that does not parse
            wrong = str(exc)
        if wrong:
            raise ServerError(f"{name} answers {path} in another shape: {wrong}")

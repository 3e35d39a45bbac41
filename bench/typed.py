"""Typed handlers: POST /orders validated and answered as a model, aiorest against FastAPI and Litestar.

    python bench/typed.py --rounds 30 --duration 4     # a headline figure
    python bench/typed.py --smoke                      # 1 round of 1 s: checks the harness, not a figure

The same endpoint three times (bench/servers/orders_*.py): a JSON body of ten
fields (strings, integers, a list of three objects; one constraint each) and a
query parameter, validated and returned as a model. aiorest's typed handler;
FastAPI (pydantic) and Litestar (msgspec), each on uvicorn with httptools and
uvloop. One process each, pinned to CPU 0, wrk on CPU 1 with bench/orders.lua,
interleaved rounds, as bench/run.py does. aiorest is also driven with a body
that breaks one constraint (answered 422): the invalid body's rate over the
valid one's. Results go to bench/out/<time>-typed/.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import sys
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script: bench/ is a package

from bench.host import describe  # noqa: E402
from bench.run import (  # noqa: E402
    BASE,
    SERVERS,
    Contender,
    Record,
    keep_measuring,
    markdown,
    measure,
    select,
    summarise_suite,
    write_summary,
)
from bench.stats import Summary, bar_chart, median, paired_ratio, summarise  # noqa: E402
from bench.wrk import require_wrk  # noqa: E402
from harness.processes import ServerError, ServerProcess  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
LUA = str(Path(__file__).resolve().parent / "orders.lua")
PATH = "/orders?source=web"
VALID_KEY, INVALID_KEY = "POST /orders (valid body)", "POST /orders (invalid body)"
CONTENDERS = [
    Contender(name, [sys.executable, str(SERVERS / f"orders_{name}.py"), "--port", "{port}"])
    for name in ("aiorest", "fastapi", "litestar")
]
VALID: dict[str, Any] = {
    "customer": "Ada Lovelace",
    "email": "ada@example.org",
    "street": "12 St James's Square",
    "city": "London",
    "country": "GB",
    "postcode": "SW1Y 4JH",
    "note": "leave with the porter",
    "priority": 3,
    "total_cents": 12_750,
    "lines": [
        {"sku": "TEA-1", "quantity": 2, "price_cents": 450},
        {"sku": "CUP-7", "quantity": 1, "price_cents": 1_850},
        {"sku": "POT-3", "quantity": 3, "price_cents": 3_000},
    ],
}
INVALID = copy.deepcopy(VALID)
INVALID["lines"][1]["quantity"] = 0  # breaks ge=1, nothing else
# (ratio key, target): aiorest over each peer on the valid body; aiorest's invalid body over its valid one
TARGETS = [("aiorest/fastapi", 4.5), ("aiorest/litestar", 3.0), ("aiorest invalid/valid", 0.9)]


def post(url: str, body: dict[str, Any]) -> tuple[int, Any]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


def check(server: ServerProcess) -> None:
    """Each contender validates and answers alike, or the comparison means nothing: ServerError if not."""
    status, answer = post(server.url + PATH, VALID)
    if status != 200 or answer != {"source": "web", "order": VALID}:
        raise ServerError(f"{server.name} answered the valid body {status} {answer!r}")
    status, answer = post(server.url + PATH, INVALID)
    if not 400 <= status < 500:  # 422 (aiorest, FastAPI), 400 (Litestar's choice)
        raise ServerError(f"{server.name} answered the invalid body {status} {answer!r}")


def run_rounds(contenders: list[Contender], rounds: int, seconds: float, connections: int, raw: list[Record]) -> None:
    """Append one record per measured run to ``raw`` (so a failure keeps what was measured)."""
    started = time.monotonic()
    for round_number in range(rounds):
        shift = round_number % len(contenders)
        for contender in contenders[shift:] + contenders[:shift]:
            bodies = [(VALID_KEY, VALID)] + ([(INVALID_KEY, INVALID)] if contender.name == BASE else [])
            server = ServerProcess(contender.name, contender.command, dict(os.environ))
            try:
                server.wait_ready("/ready")
                check(server)
                for key, body in bodies:
                    print(
                        f"round {round_number + 1}/{rounds}  {contender.name:8s} {key:28s} "
                        f"elapsed {time.monotonic() - started:6.0f} s  load {os.getloadavg()[0]:5.1f}",
                        file=sys.stderr,
                        flush=True,
                    )
                    figures = measure(
                        server, PATH, connections, seconds, False, script=LUA, script_args=[json.dumps(body)]
                    )
                    raw.append(
                        {"round": round_number, "contender": contender.name, "path": key, "connections": connections}
                        | figures
                    )
            finally:
                server.stop()


def invalid_cell(raw: list[Record]) -> Record:
    """aiorest's invalid body: its rate, paired per round with the valid body's, and what it answered."""
    valid, invalid = (
        {r["round"]: r for r in raw if r["contender"] == BASE and r["path"] == key} for key in (VALID_KEY, INVALID_KEY)
    )
    paired = sorted(set(valid) & set(invalid))
    good, bad = [valid[n]["requests_per_sec"] for n in paired], [invalid[n]["requests_per_sec"] for n in paired]
    done = [r for r in invalid.values() if r["requests"]]
    return {
        "rps": summarise([r["requests_per_sec"] for r in invalid.values()]).__dict__,
        "ratio": {
            **paired_ratio(bad, good).__dict__,
            "median": median([b / g for b, g in zip(bad, good, strict=True) if g]),
        },
        "server_cpu_us": median([r["server_cpu_us_per_request"] for r in invalid.values()]),
        "p99_ms": median([r["p99_ms"] for r in invalid.values()]),
        # every answer should be the 422: a 2xx here means the constraint was not checked
        "answers_not_4xx": sum(r["requests"] - r["non_2xx"] for r in done),
        "socket_errors": sum(r["errors"] - r["non_2xx"] for r in invalid.values()),
    }


def verdicts(summary: Record) -> list[Record]:
    cell = summary["table"].get(f"{VALID_KEY} c={summary['connections']}", {})
    found = {**{key: cell[key] for key in summary["ratios"]}, "aiorest invalid/valid": summary["invalid"]["ratio"]}
    out = []
    for key, target in TARGETS:
        if key not in found or math.isnan(found[key]["mean"]):
            continue
        ratio = found[key]
        verdict = "met" if ratio["ci_low"] >= target else "missed" if ratio["ci_high"] < target else "undecided"
        if ratio["n"] < 2:
            verdict += " (one round: no interval)"
        out.append({"ratio": key, "target": target, **ratio, "verdict": verdict})
    return out


def report(summary: Record) -> str:
    inv = summary["invalid"]
    lines = [markdown(summary), ""]
    if inv["rps"]["n"]:
        ratio, rps = inv["ratio"], Summary(**inv["rps"])
        lines += [
            f"aiorest, invalid body (422): {rps.mean:,.0f} req/s ± {rps.half_width:,.0f}; "
            f"invalid/valid {ratio['mean']:.2f} ({ratio['ci_low']:.2f}–{ratio['ci_high']:.2f}; {ratio['median']:.2f}); "
            f"server CPU {inv['server_cpu_us']:.1f} µs/req; p99 {inv['p99_ms']:.1f} ms; "
            f"answers not 4xx {inv['answers_not_4xx']}; socket errors {inv['socket_errors']}",
            "",
        ]
    lines += ["Targets (met: the 95% CI is above the target; missed: below; undecided: it spans the target):", ""]
    for v in summary["verdicts"]:
        interval = f"95% CI {v['ci_low']:.2f}–{v['ci_high']:.2f}"
        lines.append(f"- {v['ratio']} ≥ {v['target']}: {v['mean']:.2f} ({interval}) — {v['verdict']}")
    return "\n".join(lines)


def plot(summary: Record, path: Path) -> bool:
    nothing = Summary(0, math.nan, math.nan, math.nan, math.nan)
    valid = summary["table"].get(f"{VALID_KEY} c={summary['connections']}", {})
    series = {
        name: [Summary(**valid[name]["rps"]) if name in valid else nothing, nothing] for name in summary["contenders"]
    }
    if BASE in series and summary["invalid"]["rps"]["n"]:
        series[BASE][1] = Summary(**summary["invalid"]["rps"])
    groups = ["valid body", "invalid body (422; aiorest only)"]
    return bar_chart(path, "POST /orders, typed: requests/s (95% CI)", groups, series, "requests/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--duration", type=float, default=5.0, help="seconds of measured load per run")
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--contenders", default=None, help="comma-separated subset, e.g. aiorest,litestar")
    parser.add_argument("--smoke", action="store_true", help="a quick check: 1 round of 1 s")
    parser.add_argument("--out", type=Path, default=None, help="default: bench/out/<time>-typed")
    args = parser.parse_args()
    require_wrk()
    if args.smoke:
        args.rounds, args.duration = 1, 1.0
    contenders = select(CONTENDERS, lambda c: c.name, args.contenders, "contender")
    host = describe()  # before the load: its load average says how busy the machine was
    out = args.out or ROOT / "bench" / "out" / f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}-typed"
    out.mkdir(parents=True, exist_ok=True)
    raw: list[Record] = []
    failure = keep_measuring(
        out, raw, lambda: run_rounds(contenders, args.rounds, args.duration, args.connections, raw)
    )
    names = [c.name for c in contenders]
    summary = summarise_suite([r for r in raw if r["path"] == VALID_KEY], "typed", names, [VALID_KEY])
    summary |= {"connections": args.connections, "invalid": invalid_cell(raw), "command": " ".join(sys.argv)}
    summary["verdicts"] = verdicts(summary)
    summary["host"] = host
    write_summary(out, summary, report(summary), plot)
    if failure:
        raise SystemExit(failure)


if __name__ == "__main__":
    main()

"""Bodies and files: uploads and forms in, files out, aiorest beside its peers in one run.

    python bench/uploads.py --rounds 5 --duration 5     # the figures docs/forms.rst quotes
    python bench/uploads.py --smoke                     # 1 round of 1 s, no 1 GiB upload: checks the harness
    python bench/uploads.py --contenders aiorest,nginx  # a subset (each part keeps those it has)

Three parts, each printed as a table and plotted:

- **uploads**: ``POST /upload`` with a 1 MiB and a 64 MiB file, ``POST /form`` with
  20 small fields, each read with its framework's own form API (files to disk as
  that API puts them): aiorest, Starlette and Litestar (on uvicorn, httptools,
  uvloop) and aiohttp.web (uvloop); and the floor, a bare protocol that writes each
  chunk of the body to a temporary file as it comes (bench/servers/uploads_floor.py:
  no server that puts an upload on disk can spend less). requests/s and server CPU
  per MiB, with the kernel's part of it.
- **files**: ``GET /files/`` a 1 KiB and a 1 MiB file with each one's file
  response: aiorest, aiohttp.web, Starlette, and nginx serving the same folder
  (one worker, sendfile: the limit). requests/s and server CPU per request.
- **rss**: aiorest's resident memory while one 1 GiB upload streams to disk.

One server process each, pinned to CPU 0, wrk on CPU 1 (bench/upload.lua sends
the bodies), the contenders' order rotating between rounds, a second of
warm-up before each measured run (shared/BENCH.md). CPU ratios are a peer's
median server CPU over aiorest's: above 1, aiorest spends less. Results go to
bench/out/<time>-uploads/.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import socket
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script: bench/ is a package

from bench.host import describe, one_line  # noqa: E402
from bench.run import SERVERS, Record, keep_measuring, measure  # noqa: E402
from bench.stats import Summary, bar_chart, median, paired_ratio, summarise  # noqa: E402
from bench.wrk import require_wrk  # noqa: E402
from harness.processes import ServerError, ServerProcess  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
LUA = str(Path(__file__).resolve().parent / "upload.lua")
BOUNDARY = "aiorestBenchBoundary0123456789"
MiB = 1024 * 1024


@dataclass(frozen=True)
class Case:
    key: str  # the row's name
    path: str
    body: str | None  # the file of the body wrk posts, in the work folder; None: a GET
    mib: float  # MiB a request carries (uploads) or brings back (files)
    connections: int


def serve(name: str, root: Path, prefix: Path) -> list[str]:
    script = SERVERS / ("files_nginx.py" if name == "nginx" else f"uploads_{name}.py")
    command = [sys.executable, str(script), "--port", "{port}", "--root", str(root)]
    return command + (["--prefix", str(prefix)] if name == "nginx" else [])


UPLOADERS = ["aiorest", "starlette", "litestar", "aiohttp", "floor"]  # floor: bench/servers/uploads_floor.py
SERVERS_OF_FILES = ["aiorest", "aiohttp", "starlette", "nginx"]


def multipart(fields: list[tuple[str, bytes, str | None]]) -> bytes:
    out = []
    for name, value, filename in fields:
        disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
        kind = "\r\nContent-Type: application/octet-stream" if filename else ""
        out.append(f"--{BOUNDARY}\r\nContent-Disposition: {disposition}{kind}\r\n\r\n".encode() + value + b"\r\n")
    return b"".join(out) + f"--{BOUNDARY}--\r\n".encode()


def prepare(work: Path) -> tuple[Path, list[Case], list[Case]]:
    """The bodies wrk posts and the files the servers serve, in ``work``; the upload and file cases."""
    work.chmod(0o755)  # nginx's worker process, a user of its own, reads the files
    root = work / "files"
    root.mkdir(mode=0o755)
    (root / "1k.bin").write_bytes(os.urandom(1024))
    (root / "1m.bin").write_bytes(os.urandom(MiB))
    (work / "1m.body").write_bytes(multipart([("file", os.urandom(MiB), "a.bin")]))
    (work / "64m.body").write_bytes(multipart([("file", os.urandom(64 * MiB), "a.bin")]))
    (work / "form.body").write_bytes(multipart([(f"field{i}", b"value number %d" % i, None) for i in range(20)]))
    uploads = [
        Case("upload 1 MiB", "/upload", "1m.body", (work / "1m.body").stat().st_size / MiB, 16),
        Case("upload 64 MiB", "/upload", "64m.body", (work / "64m.body").stat().st_size / MiB, 2),
        Case("form of 20 fields", "/form", "form.body", (work / "form.body").stat().st_size / MiB, 64),
    ]
    files = [Case("file 1 KiB", "/files/1k.bin", None, 1 / 1024, 64), Case("file 1 MiB", "/files/1m.bin", None, 1, 16)]
    return root, uploads, files


def expected(case: Case) -> bytes:
    return {"upload 1 MiB": b'"size":1048576', "upload 64 MiB": b'"size":67108864'}.get(case.key, b'"fields":20')


def check(server: ServerProcess, case: Case, work: Path) -> None:
    """The contender answers the case as the others do, or the comparison means nothing: ServerError if not."""
    if case.body is None:
        status, body = fetch(server.port, "GET", case.path)
        wanted = (work / "files" / case.path.rsplit("/", 1)[1]).read_bytes()
        if status != 200 or body != wanted:
            raise ServerError(f"{server.name} answered {case.path} {status} ({len(body)} bytes)")
        return
    content_type = f"multipart/form-data; boundary={BOUNDARY}"
    status, body = fetch(server.port, "POST", case.path, (work / case.body).read_bytes(), content_type)
    if status != 200 or expected(case) not in body.replace(b" ", b""):
        raise ServerError(f"{server.name} answered {case.key} {status} {body[:200]!r}")


def fetch(port: int, method: str, path: str, body: bytes | None = None, content_type: str = "") -> tuple[int, bytes]:
    """One request; the status and the whole body (http.client undoes a chunked one)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request(method, path, body, {"Content-Type": content_type} if content_type else {})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def run_part(
    part: str, names: list[str], cases: list[Case], work: Path, root: Path, args: argparse.Namespace, raw: list[Record]
) -> None:
    """Append a record per measured run to ``raw``; every contender, every case, rotating between rounds."""
    started = time.monotonic()
    for round_number in range(args.rounds):
        shift = round_number % len(names)
        for name in names[shift:] + names[:shift]:
            prefix = Path(tempfile.mkdtemp(prefix="bench-nginx-", dir=work))
            server = ServerProcess(name, serve(name, root, prefix), dict(os.environ))
            try:
                server.wait_ready("/ready")
                for case in cases:
                    check(server, case, work)
                    print(
                        f"{part} round {round_number + 1}/{args.rounds}  {name:9s} {case.key:18s} "
                        f"elapsed {time.monotonic() - started:6.0f} s  load {os.getloadavg()[0]:5.1f}",
                        file=sys.stderr,
                        flush=True,
                    )
                    if case.body is None:
                        figures = measure(server, case.path, case.connections, args.duration, False)
                    else:
                        body_args = [str(work / case.body), f"multipart/form-data; boundary={BOUNDARY}"]
                        figures = measure(
                            server, case.path, case.connections, args.duration, False, script=LUA, script_args=body_args
                        )
                    raw.append({"part": part, "round": round_number, "contender": name, "case": case.key} | figures)
            finally:
                server.stop()
                shutil.rmtree(prefix, ignore_errors=True)


def summarise_part(raw: list[Record], part: str, names: list[str], cases: list[Case]) -> Record:
    table: Record = {}
    for case in cases:
        runs = {
            name: [r for r in raw if (r["part"], r["contender"], r["case"]) == (part, name, case.key)] for name in names
        }
        cell: Record = {}
        for name, mine in runs.items():
            cpu = median([r["server_cpu_us_per_request"] for r in mine])
            kernel = median([r["server_kernel_us_per_request"] for r in mine])
            errors = sum(r["errors"] for r in mine)  # socket errors and answers not 2xx
            cell[name] = {
                "rps": summarise([r["requests_per_sec"] for r in mine]).__dict__,
                "cpu_us_per_request": cpu,
                "cpu_ms_per_mib": cpu / 1000 / case.mib,
                "kernel_us_per_request": kernel,
                "kernel_ms_per_mib": kernel / 1000 / case.mib,
                "errors": errors,
            }
        base = {r["round"]: r for r in runs.get("aiorest", [])}
        for name in names:
            if name == "aiorest" or not base:
                continue
            theirs = {r["round"]: r for r in runs[name]}
            paired = sorted(set(base) & set(theirs))
            ratio = paired_ratio(
                [base[n]["requests_per_sec"] for n in paired], [theirs[n]["requests_per_sec"] for n in paired]
            )
            cell[f"aiorest/{name}"] = {
                "rps_ratio": ratio.__dict__,
                "cpu_ratio": cell[name]["cpu_us_per_request"] / cell["aiorest"]["cpu_us_per_request"],
            }
        table[case.key] = cell
    return table


def markdown(table: Record, names: list[str], per_mib: bool) -> str:
    """The part's table; a CPU cell gives the kernel's share of it too, ``(k …)``: receiving, copying, writing."""
    unit = "server CPU ms/MiB" if per_mib else "server CPU µs/request"
    others = [n for n in names if n != "aiorest"]
    columns = ["case", *(f"{n} req/s" for n in names), *(f"{n} {unit}" for n in names)]
    columns += [f"aiorest/{n} req/s · CPU" for n in others] + ["errors"]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for key, cell in table.items():
        row = [key]
        row += [f"{Summary(**cell[n]['rps']).mean:,.0f}" if n in cell else "–" for n in names]
        cost, kernel = (
            ("cpu_ms_per_mib", "kernel_ms_per_mib") if per_mib else ("cpu_us_per_request", "kernel_us_per_request")
        )
        row += [f"{cell[n][cost]:.2f} (k {cell[n][kernel]:.2f})" if n in cell else "–" for n in names]
        for n in others:
            ratio = cell.get(f"aiorest/{n}")
            row.append("–" if ratio is None else f"{ratio['rps_ratio']['mean']:.2f}× · {ratio['cpu_ratio']:.2f}×")
        row.append(" ".join(str(cell[n]["errors"]) for n in names if n in cell))
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def plot(table: Record, names: list[str], title: str, path: Path) -> bool:
    groups = list(table)
    series = {n: [Summary(**table[g][n]["rps"]) for g in groups] for n in names}
    return bar_chart(path, title, groups, series, "requests/s")


def rss_during_upload(work: Path, root: Path, size: int) -> Record:
    """aiorest's RSS before and at most while one upload of ``size`` bytes streams to disk."""
    server = ServerProcess("aiorest", serve("aiorest", root, work), dict(os.environ))
    try:
        server.wait_ready("/ready")
        status_file = Path(f"/proc/{server.process.pid}/status")

        def rss() -> int:
            line = next(line for line in status_file.read_text().splitlines() if line.startswith("VmRSS:"))
            return int(line.split()[1]) * 1024

        head = f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="big"\r\n\r\n'.encode()
        tail = f"\r\n--{BOUNDARY}--\r\n".encode()
        request = (
            f"POST /upload HTTP/1.1\r\nHost: b\r\nConnection: close\r\n"
            f"Content-Type: multipart/form-data; boundary={BOUNDARY}\r\n"
            f"Content-Length: {len(head) + size + len(tail)}\r\n\r\n"
        ).encode()
        before = peak = rss()
        chunk = os.urandom(MiB)
        with socket.create_connection(("127.0.0.1", server.port), timeout=60) as sock:
            sock.sendall(request + head)
            for sent in range(size // MiB):
                sock.sendall(chunk)
                if sent % 16 == 0:
                    peak = max(peak, rss())
                if sent % 128 == 0:
                    print(f"rss: {sent} of {size // MiB} MiB sent", file=sys.stderr, flush=True)
            sock.sendall(tail)
            answer = sock.recv(4096)
        peak = max(peak, rss())
        ok = b" 200 " in answer.split(b"\r\n", 1)[0] + b" " and f'"size":{size}'.encode() in answer
        return {"bytes": size, "rss_before": before, "rss_peak": peak, "growth_mib": (peak - before) / MiB, "ok": ok}
    finally:
        server.stop()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--duration", type=float, default=5.0, help="seconds of measured load per run")
    parser.add_argument("--smoke", action="store_true", help="1 round of 1 s, and no 1 GiB upload")
    parser.add_argument("--parts", default="uploads,files,rss")
    parser.add_argument("--contenders", default=None, help="a comma-separated subset, e.g. aiorest,nginx")
    parser.add_argument("--out", type=Path, default=None, help="default: bench/out/<time>-uploads")
    args = parser.parse_args(argv)
    require_wrk()
    if args.smoke:
        args.rounds, args.duration = 1, 1.0
    parts = {p.strip() for p in args.parts.split(",")}
    host = describe()
    out = args.out or ROOT / "bench" / "out" / f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}-uploads"
    out.mkdir(parents=True, exist_ok=True)
    raw: list[Record] = []
    summary: Record = {"command": " ".join(sys.argv), "host": host, "parts": {}}
    text = []
    with tempfile.TemporaryDirectory(prefix="bench-uploads-") as folder:
        work = Path(folder)
        root, uploads, files = prepare(work)
        wanted = set(args.contenders.split(",")) if args.contenders else None
        todo = [
            (part, [n for n in names if wanted is None or n in wanted], cases, per_mib)
            for part, names, cases, per_mib in (
                ("uploads", UPLOADERS, uploads, True),
                ("files", SERVERS_OF_FILES, files, False),
            )
        ]

        def run_all() -> None:
            for part, names, cases, _ in todo:
                if part in parts:
                    run_part(part, names, cases, work, root, args, raw)

        failure = keep_measuring(out, raw, run_all) if parts & {"uploads", "files"} else None
        for part, names, cases, per_mib in todo:
            if part not in parts:
                continue
            table = summarise_part(raw, part, names, cases)
            summary["parts"][part] = table
            text += [f"## {part}", "", markdown(table, names, per_mib), ""]
            title = f"{part}: requests/s (95% CI)"
            plot(table, names, title, out / f"{part}.png")
        if "rss" in parts and not args.smoke:
            rss = rss_during_upload(work, root, 1024 * MiB)
            summary["rss"] = rss
            text += [
                "## rss",
                "",
                f"aiorest, one 1 GiB upload streamed to disk: RSS {rss['rss_before'] / MiB:.1f} MiB before, "
                f"{rss['rss_peak'] / MiB:.1f} MiB at most: grew {rss['growth_mib']:.1f} MiB "
                f"({'answered 200 with the size' if rss['ok'] else 'NOT answered as expected'})",
                "",
            ]
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=lambda o: None))
    report = "\n".join(text)
    (out / "summary.md").write_text(f"`{summary['command']}`\n\n{one_line(host)}\n\n{report}\n")
    print(report)
    print(f"written to {out}")
    if failure:
        raise SystemExit(failure)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

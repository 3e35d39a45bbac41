"""What PgBouncer in transaction mode costs on ``/db``: the example app (one worker) through it,
without prepared statements, against a direct connection with them (and without them, which splits
the cost between the extra hop and the statements no longer prepared).

    python -m load.prod_pooler [--duration 10] [--rounds 3] [--dsn postgresql://...]

Without ``--dsn`` (or ``DATABASE_URL``) it starts a private PostgreSQL (pgserver). The three
contenders run in turn, interleaved, for ``rounds`` rounds of ``duration`` seconds each
(wrk, loopback); requests/s are summed over the rounds, and the ratios printed against the
direct, prepared contender. ``measure()`` returns the same figures as a dict.

``run_pgbouncer`` starts a real PgBouncer (the Debian package, in the foreground, as a user
that may reach PostgreSQL's socket) in front of a server; the tests use it too.
"""

from __future__ import annotations

import argparse
import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO
from urllib.parse import parse_qs, urlsplit

from bench.process import ServerProcess, free_port
from load.procs import stop_process

PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
WRK = shutil.which("wrk") or "/usr/bin/wrk"
ROOT = Path(__file__).resolve().parent.parent
MIGRATIONS = ROOT / "migrations"


@contextmanager
def run_pgbouncer(
    server_url: str, *, pool_mode: str = "transaction", pool_size: int = 8, port: int | None = None
) -> Iterator[str]:
    """A PgBouncer on 127.0.0.1 (``port``, or a free one) before ``server_url``'s PostgreSQL; yields a URL template.

    The template has ``{database}`` where the database name goes: every database of the
    server is served (``* =``), as the user of ``server_url``, with ``auth_type = any``
    (loopback tests only). PgBouncer refuses to run as root: it runs as the owner of a
    unix-socket directory (pgserver's ``pgserver`` user), else ``nobody``. It is stopped,
    and killed if need be, on the way out.
    """
    parts = urlsplit(server_url)
    query = parse_qs(parts.query)
    host = query.get("host", [parts.hostname or "127.0.0.1"])[0]
    server_port = query.get("port", [str(parts.port or 5432)])[0]
    user = parts.username or "postgres"
    owner = pwd.getpwuid(os.stat(host).st_uid).pw_name if host.startswith("/") else "nobody"
    directory = tempfile.mkdtemp(prefix="aiorest-pgbouncer-")
    os.chmod(directory, 0o755)
    listen = port or free_port()
    config = Path(directory) / "pgbouncer.ini"
    config.write_text(
        f"[databases]\n* = host={host} port={server_port} user={user}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {listen}\nunix_socket_dir =\n"
        f"auth_type = any\npool_mode = {pool_mode}\ndefault_pool_size = {pool_size}\n"
        "max_client_conn = 2000\nlogfile =\npidfile =\n"
        # an aiorest pool's connections live long; keep PgBouncer's own log to errors
        "log_connections = 0\nlog_disconnections = 0\nstats_period = 3600\n"
    )
    config.chmod(0o644)
    log = tempfile.TemporaryFile()
    process = subprocess.Popen(
        [PGBOUNCER, "-u", owner, str(config)], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 10
        # Its own word, not a connect: something else may listen on a port it failed to bind.
        while f"listening on 127.0.0.1:{listen}".encode() not in _read(log):
            if process.poll() is not None:
                raise RuntimeError(f"pgbouncer exited with {process.returncode}: {_read(log).decode()[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"pgbouncer did not listen within 10 s: {_read(log).decode()[-2000:]}")
            time.sleep(0.05)
        yield f"postgresql://{user}@127.0.0.1:{listen}/{{database}}?sslmode=disable&connect_timeout=5"
    finally:
        stop_process(process, 10)
        log.close()
        shutil.rmtree(directory, ignore_errors=True)


def _read(log: IO[bytes]) -> bytes:
    log.seek(0)
    return log.read()


def database_name(url: str) -> str:
    return urlsplit(url).path.lstrip("/") or "postgres"


@contextmanager
def _postgres(dsn: str | None) -> Iterator[str]:
    """``dsn``, or ``$DATABASE_URL``, or a private pgserver for this run; migrated."""
    dsn = dsn or os.environ.get("DATABASE_URL")
    if dsn:
        _migrate(dsn)
        yield dsn
        return
    import pgserver  # type: ignore[import-untyped]

    with tempfile.TemporaryDirectory(prefix="aiorest-pooler-pg-") as directory:
        server = pgserver.get_server(directory, cleanup_mode="delete")
        try:
            url = str(server.get_uri())
            _migrate(url)
            yield url
        finally:
            server.cleanup()


def _migrate(dsn: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "aiorest", "migrate", "--dir", str(MIGRATIONS), "--dsn", dsn],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )


def wrk(url: str, duration: float, connections: int) -> tuple[int, int]:
    """(requests, errors) of one wrk run: errors are non-2xx/3xx answers and socket errors."""
    output = subprocess.run(
        [WRK, "-t1", f"-c{connections}", f"-d{max(1, round(duration))}s", "--timeout", "10s", url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found = re.search(r"(\d+) requests in", output)
    if found is None:
        raise RuntimeError(f"unexpected wrk output: {output}")
    errors = sum(int(n) for n in re.findall(r"Non-2xx or 3xx responses: (\d+)", output))
    socket_errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output)
    if socket_errors:
        errors += sum(int(n) for n in socket_errors.groups())
    return int(found.group(1)), errors


def measure(
    duration: float = 10,
    rounds: int = 3,
    connections: int = 64,
    dsn: str | None = None,
    pool_size: int = 16,
) -> dict[str, float]:
    """/db requests/s of the example app (one worker, a pool of ``pool_size``) in three setups.

    Keys: ``pgbouncer_rps`` (transaction mode, statements not prepared), ``direct_prepared_rps``,
    ``direct_unprepared_rps``, their ratios ``pgbouncer_vs_direct`` and
    ``unprepared_vs_prepared`` (both against direct prepared), ``errors`` (all runs), ``seconds``
    (per contender). The contenders alternate within each round, so a machine that slows down
    during the run slows them all alike.
    """
    with _postgres(dsn) as server, run_pgbouncer(server, pool_size=pool_size) as pooled:
        contenders = {
            "pgbouncer": (pooled.format(database=database_name(server)), {"DATABASE_POOLER": "transaction"}),
            "direct_prepared": (server, {}),
            "direct_unprepared": (server, {"DATABASE_PREPARE": "0"}),
        }
        requests = dict.fromkeys(contenders, 0)
        errors = 0
        for _ in range(rounds):
            for name, (url, extra) in contenders.items():
                env = {key: value for key, value in os.environ.items() if not key.startswith("DATABASE_")}
                env.update(
                    DATABASE_URL=url,
                    DATABASE_POOL_MAX=str(pool_size),
                    DATABASE_POOL_MIN=str(pool_size),
                    PYTHONPATH=str(ROOT),
                    **extra,
                )
                app = ServerProcess(
                    name, [sys.executable, "-m", "aiorest", "run", "example_app.app:app", "--port", "{port}"], env
                )
                try:
                    app.wait_ready("/db")
                    wrk(f"{app.url}/db", 1, connections)  # warm: every connection open and its statement prepared
                    count, failed = wrk(f"{app.url}/db", duration, connections)
                finally:
                    app.stop()
                requests[name] += count
                errors += failed
    seconds = rounds * max(1, round(duration))
    rps = {name: count / seconds for name, count in requests.items()}
    return {
        "pgbouncer_rps": rps["pgbouncer"],
        "direct_prepared_rps": rps["direct_prepared"],
        "direct_unprepared_rps": rps["direct_unprepared"],
        "pgbouncer_vs_direct": rps["pgbouncer"] / rps["direct_prepared"],
        "unprepared_vs_prepared": rps["direct_unprepared"] / rps["direct_prepared"],
        "errors": errors,
        "seconds": seconds,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m load.prod_pooler", description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=10, help="seconds per contender and round (default 10)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    parser.add_argument("--connections", type=int, default=64, help="wrk connections (default 64)")
    parser.add_argument("--dsn", help="a PostgreSQL URL (default $DATABASE_URL, else a private pgserver)")
    args = parser.parse_args(argv)
    figures = measure(args.duration, args.rounds, args.connections, args.dsn)
    print(f"/db, example app, 1 worker, pool 16, wrk -c{args.connections}, {args.rounds} interleaved rounds")
    print(f"  direct, prepared statements      {figures['direct_prepared_rps']:9.0f} requests/s   1.00")
    print(
        f"  direct, not prepared             {figures['direct_unprepared_rps']:9.0f} requests/s"
        f"   {figures['unprepared_vs_prepared']:.2f}"
    )
    print(
        f"  PgBouncer transaction mode       {figures['pgbouncer_rps']:9.0f} requests/s"
        f"   {figures['pgbouncer_vs_direct']:.2f}"
    )
    print(f"  errors: {figures['errors']}")


if __name__ == "__main__":
    main()

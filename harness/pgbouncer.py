"""A real PgBouncer (the Debian package, in the foreground) in front of a PostgreSQL, on loopback.

    with run_pgbouncer(server_url, pool_mode="transaction") as template:
        dsn = template.format(database=database_name(server_url))

For the tests and ``python -m load production pooler``.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO
from urllib.parse import parse_qs, urlsplit

from harness.ports import free_port
from harness.processes import stop_process

PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"


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
    """The database ``url`` names (``postgres`` when it names none)."""
    return urlsplit(url).path.lstrip("/") or "postgres"

"""``python -m example_app``: migrate and serve, with a private PostgreSQL if none is configured.

What it does is in ``EPILOG`` (its ``--help``). The private PostgreSQL's data folder is
under the temp directory, never in the repository; it is stopped on exit, SIGTERM and
Ctrl-C included. It runs as the system user ``pgserver`` under root because PostgreSQL
refuses to run as root.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import tempfile
import warnings
from pathlib import Path

DESCRIPTION = "Run the aiorest example service: a notes API with users, on PostgreSQL."
EPILOG = """serve applies the migrations, seeds the data, then serves; migrate only applies the
migrations; status lists them. DATABASE_URL (postgresql://...) names the database;
without it, a private PostgreSQL (pgserver) runs from a folder under the temp
directory and stops on exit. Run as root, pgserver runs PostgreSQL as the system
user 'pgserver' and creates it (useradd) if it is missing.
"""


def embedded_postgres_url() -> str:
    """Start (or reuse) the private PostgreSQL and return its URL."""
    try:
        with warnings.catch_warnings():
            # platformdirs warns at pgserver's import when XDG_RUNTIME_DIR is unset (a container,
            # a cron job), then uses the temp directory for pgserver's lock file: all is well.
            warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
            import pgserver
    except ImportError:
        raise SystemExit(
            "DATABASE_URL is not set and pgserver is not installed: "
            "pip install -e '.[example]', or set DATABASE_URL=postgresql://..."
        ) from None
    data = Path(tempfile.gettempdir()) / f"aiorest-pgdata-{os.getuid()}"
    # pgserver logs each pg_ctl command it runs, with its output, at INFO: a dozen lines at exit
    logging.getLogger("pgserver").setLevel(logging.WARNING)
    if os.geteuid() == 0:
        print("running as root: PostgreSQL runs as the system user 'pgserver' (created if missing)", flush=True)
    _prune_dead_pids(data / ".handle_pids.json")
    try:
        server = pgserver.get_server(str(data), cleanup_mode="stop")  # type: ignore[attr-defined]
    except Exception as exc:  # pgserver's own errors (initdb, pg_ctl start timing out) carry no common type
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise SystemExit(f"cannot start the embedded PostgreSQL in {data}: {type(exc).__name__}: {first}") from None
    return str(server.get_uri())


def _prune_dead_pids(path: Path) -> None:
    # pgserver counts users of a data folder by pid; a process killed before its
    # atexit ran leaves its pid behind and the server is never stopped.
    if not path.exists():
        return
    try:
        pids = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    alive = [pid for pid in pids if _alive(pid)]
    if alive != pids:
        path.write_text(json.dumps(alive))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m example_app", description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument(
        "command", nargs="?", choices=["serve", "migrate", "status"], default="serve", help="(default serve)"
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to serve on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8080, help="port to serve on (default 8080)")
    parser.add_argument(
        "--reload", action="store_true", help="restart the service when its code changes (development; watchfiles)"
    )
    args = parser.parse_args(argv)
    # SIGTERM must end the process through normal exit, so that pgserver's atexit stops PostgreSQL.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    if not os.environ.get("DATABASE_URL"):
        os.environ["DATABASE_URL"] = embedded_postgres_url()
        print("using an embedded PostgreSQL (set DATABASE_URL to use your own)", flush=True)

    from aiorest.cli import main as aiorest_main

    from .app import MIGRATE_ARGS

    if args.command in ("migrate", "status"):
        aiorest_main(["migrate", "up" if args.command == "migrate" else "status", *MIGRATE_ARGS])
        return
    # Once it listens, the server logs "aiorest serving on http://HOST:PORT": its page / lists the
    # routes. A startup that fails (a port taken included) logs why and raises SystemExit(1):
    # the exit status is 1, and pgserver's atexit still stops PostgreSQL.
    reload = ["--reload"] if args.reload else []
    aiorest_main(["run", "example_app:app", "--host", args.host, "--port", str(args.port), *reload])


if __name__ == "__main__":
    main()

"""``aiorest run module:app``, ``migrate``, ``routes`` and ``openapi``: the command line."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Literal

from .. import __version__
from ..server.config import ServerConfig
from ..server.listeners import inherited_socket, systemd_socket
from ..server.process.loading import load_app, split_spec
from ..server.process.running import supervise, watch_options
from ..server.server import run
from .options import add_flags, config_from

__all__ = ["main", "load_app"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="aiorest", description="Serve an aiorest App.")
    parser.add_argument("--version", action="version", version=f"aiorest {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="serve an app: aiorest run myapp:app --port 8080")
    run.add_argument("app", help="MODULE:APP, e.g. myapp:app")
    add_flags(run)
    migrate = commands.add_parser("migrate", help="apply numbered SQL migrations: aiorest migrate --dir migrations")
    migrate.add_argument("action", nargs="?", choices=["up", "status"], default="up", help="up (default) or status")
    migrate.add_argument(
        "--dir",
        action="append",
        dest="dirs",
        help="folder of NNNN_name.sql files, or aiorest:NAME for aiorest's own (default migrations);"
        " repeat it to apply several folders in the order given",
    )
    routes = commands.add_parser("routes", help="list an app's routes: aiorest routes myapp:app")
    routes.add_argument("app", help="MODULE:APP, e.g. myapp:app")
    openapi = commands.add_parser(
        "openapi", help="write an app's OpenAPI document: aiorest openapi myapp:app [--output openapi.json]"
    )
    openapi.add_argument("app", help="MODULE:APP, e.g. myapp:app")
    openapi.add_argument("--output", "-o", help="a file to write (default stdout)")
    openapi.add_argument("--indent", type=int, default=2, help="JSON indentation (default 2; 0: one line)")
    migrate.add_argument("--dsn", help="PostgreSQL URL (default $DATABASE_URL)")
    migrate.add_argument(
        "--driver",
        choices=["psycopg2", "aiopg"],
        default=os.environ.get("DATABASE_DRIVER") or "psycopg2",
        help="the database driver (default $DATABASE_DRIVER, else psycopg2)",
    )
    return parser


def _prepare_metrics(args: argparse.Namespace) -> None:
    """Before the app is imported (it may import prometheus_client): check it is there, prepare its directory."""
    if not args.metrics:
        return
    from ..ops.metrics import prepare_multiprocess_dir, prometheus_available

    if not prometheus_available():
        raise SystemExit("aiorest: --metrics needs prometheus_client: pip install '.[metrics]' in aiorest's checkout")
    if args.workers is not None:  # before anything imports prometheus_client (the app included)
        prepare_multiprocess_dir()


def _on_worker_exit(args: argparse.Namespace) -> Callable[[int], None] | None:
    """What the parent does when a worker exits: the metrics forget its live gauges."""
    if not args.metrics:
        return None
    from ..ops.metrics import worker_exited

    return worker_exited


def _migrate(action: str, directories: Sequence[str], dsn: str | None, driver: Literal["psycopg2", "aiopg"]) -> int:
    import asyncio

    from ..db.database import Database
    from ..db.migrations import MigrationError, migrate, migration_status

    async def go() -> int:
        db = Database(dsn, min_size=1, max_size=1, driver=driver)
        await db.open()
        try:
            for directory in directories:
                if action == "status":
                    for migration, state in await migration_status(db, directory):
                        print(f"{migration.version:04d} {migration.name:40s} {state}")
                else:
                    applied = await migrate(db, directory)
                    for migration in applied:
                        print(f"applied {migration.version:04d} {migration.name}")
                    print(f"{len(applied)} migration(s) applied")
        finally:
            await db.close()
        return 0

    try:
        return asyncio.run(go())
    except (MigrationError, RuntimeError) as exc:
        print(f"aiorest migrate: {exc}", file=sys.stderr)
        return 1


def main(argv: Sequence[str] | None = None) -> None:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "run":
        _check_reload_flags(parser, args)
    if args.command == "run":
        _run(args)
    elif args.command == "migrate":
        raise SystemExit(_migrate(args.action, args.dirs or ["migrations"], args.dsn, args.driver))
    elif args.command == "routes":
        from .inspecting import route_lines

        print("\n".join(route_lines(load_app(args.app))))
    elif args.command == "openapi":
        from .inspecting import write_openapi

        write_openapi(load_app(args.app), args.output, args.indent or None)


def _check_reload_flags(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """--reload runs one worker; its own flags need it (an argparse error: exit status 2)."""
    if args.reload and (args.workers or 1) > 1:
        parser.error("--reload runs one worker, which it restarts on a change: drop --workers (or give 1)")
    given = [flag for flag in ("reload_dir", "reload_include", "reload_exclude") if getattr(args, flag)]
    if given and not args.reload:
        parser.error(f"--{given[0].replace('_', '-')} is an option of --reload, which is not given")


def _run(args: argparse.Namespace) -> None:
    _prepare_metrics(args)  # before the app is imported
    config = config_from(args)
    watch = (
        watch_options(args.app, args.reload_dir or (), args.reload_include or (), args.reload_exclude or ())
        if args.reload
        else None
    )
    try:
        sock = inherited_socket(args.fd) if args.fd is not None else systemd_socket()
    except ValueError as exc:
        raise SystemExit(f"aiorest: {exc}") from None
    if args.workers is None and watch is None:
        run(load_app(args.app), config, sock=sock)
        return
    split_spec(args.app)  # the parent never imports the app: each worker does (server/process/running.py)
    code = supervise(
        args.app,
        ServerConfig.of(config, {"sock": sock}, what="aiorest run") if sock is not None else config,
        count=args.workers or 1,
        start_timeout=args.start_timeout,
        on_exit=_on_worker_exit(args),
        watch=watch,
    )
    raise SystemExit(code)

"""``aiorest run module:app``, ``migrate``, ``routes`` and ``openapi``: the command line."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Literal

from .. import __version__
from .._support.errors import one_line
from ..app.application import App
from ..server.listeners import bind_tcp, bind_unix, inherited_socket, remove_unix_socket, systemd_socket
from ..server.process.supervisor import run_workers
from ..server.server import WORKERS_LOG_FORMAT, configure_logging, run
from .options import add_flags, config_from

# Seconds a stopping worker has, past --graceful-timeout, for the app's shutdown before SIGKILL.
_SHUTDOWN_MARGIN = 10.0

__all__ = ["main", "load_app"]


def load_app(spec: str) -> App:
    """Import ``"package.module:attribute"`` and check that it is an App."""
    module_name, attribute = _split_spec(spec)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # ImportError, or whatever the module's code raised (SyntaxError, ...)
        raise SystemExit(f"aiorest: cannot import {module_name!r}: {one_line(exc)}") from exc
    try:
        app = getattr(module, attribute)
    except AttributeError:
        raise SystemExit(f"aiorest: module {module_name!r} has no attribute {attribute!r}") from None
    if not isinstance(app, App):
        raise SystemExit(f"aiorest: {spec} is a {type(app).__name__}, not an aiorest.App")
    return app


def _split_spec(spec: str) -> tuple[str, str]:
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise SystemExit(f"aiorest: expected MODULE:APP (for example myapp:app), got {spec!r}")
    return module_name, attribute


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
    args = _parser().parse_args(argv)
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


def _run(args: argparse.Namespace) -> None:
    _prepare_metrics(args)  # before the app is imported
    config = config_from(args)
    try:
        sock = inherited_socket(args.fd) if args.fd is not None else systemd_socket()
    except ValueError as exc:
        raise SystemExit(f"aiorest: {exc}") from None
    if args.workers is None:
        run(load_app(args.app), config, sock=sock)
        return
    # The parent never imports the app: each worker does, so that one started
    # by a reload (SIGHUP) runs the code on disk then.
    _split_spec(args.app)
    # The workers inherit this configuration; the pid tells whose line it is.
    configure_logging(args.log_level, args.log_format, WORKERS_LOG_FORMAT)
    bound: os.stat_result | None = None  # the unix socket file bound here, removed at exit
    if sock is None:
        where = f"unix:{args.unix}" if args.unix else f"{config.host}:{config.port}"
        try:
            sock = (
                bind_unix(args.unix, args.unix_mode, args.backlog)
                if args.unix
                else bind_tcp(config.host, config.port, args.backlog)
            )
        except OSError as exc:
            logging.getLogger("aiorest.server").error("cannot listen on %s: %s", where, exc)
            raise SystemExit(1) from None
        if args.unix:
            bound = os.stat(args.unix)
    listener = sock

    def serve(ready: Callable[[], object], failed: Callable[[str], object]) -> None:
        try:
            app = load_app(args.app)
        except SystemExit as exc:
            failed(str(exc.code).removeprefix("aiorest: "))
            raise SystemExit(1) from None
        run(app, config, sock=listener, ready=ready, startup_failed=failed)

    try:
        code = run_workers(
            args.workers,
            serve,
            listener=listener,
            start_timeout=args.start_timeout,
            stop_timeout=args.graceful_timeout + _SHUTDOWN_MARGIN,
            on_exit=_on_worker_exit(args),
        )
    finally:
        if bound is not None:
            remove_unix_socket(args.unix, bound)
    raise SystemExit(code)

"""``aiorest run module:app``: the command line."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Callable, Sequence

from .app import App
from .server import LOG_FORMAT

__all__ = ["main", "load_app"]


def load_app(spec: str) -> App:
    """Import ``"package.module:attribute"`` and check that it is an App."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise SystemExit(f"aiorest: expected MODULE:APP (for example myapp:app), got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SystemExit(f"aiorest: cannot import {module_name!r}: {exc}") from exc
    try:
        app = getattr(module, attribute)
    except AttributeError:
        raise SystemExit(f"aiorest: module {module_name!r} has no attribute {attribute!r}") from None
    if not isinstance(app, App):
        raise SystemExit(f"aiorest: {spec} is a {type(app).__name__}, not an aiorest.App")
    return app


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="aiorest", description="Serve an aiorest App.")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="serve an app: aiorest run myapp:app --port 8080")
    run.add_argument("app", help="MODULE:APP, e.g. myapp:app")
    run.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    run.add_argument("--port", type=int, default=8080, help="port to bind (default 8080)")
    run.add_argument("--unix", help="serve on this unix socket path instead of TCP")
    run.add_argument("--workers", type=int, default=1, help="worker processes sharing the port (default 1)")
    run.add_argument(
        "--unix-mode", type=lambda text: int(text, 8), default=0o666, help="unix socket mode (default 666)"
    )
    run.add_argument("--backlog", type=int, default=2048, help="listen backlog (default 2048)")
    run.add_argument("--loop-lag-report", metavar="FILE", help="write event-loop lag percentiles (JSON) at exit")
    run.add_argument(
        "--graceful-timeout", type=float, default=30.0, help="seconds to finish requests on SIGTERM (default 30)"
    )
    run.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    # request ids, trusted proxies, access log
    run.add_argument(
        "--forwarded-allow-ips",
        default=os.environ.get("AIOREST_FORWARDED_ALLOW_IPS"),
        metavar="LIST",
        help="proxies whose X-Forwarded-*/Forwarded headers are believed: addresses, CIDR ranges, "
        "'unix', '*', comma-separated (default $AIOREST_FORWARDED_ALLOW_IPS, else none)",
    )
    run.add_argument(
        "--access-log",
        nargs="?",
        const="-",
        default=os.environ.get("AIOREST_ACCESS_LOG") or None,
        metavar="FILE",
        help="write a line per request to FILE, or to stdout if none or '-' (default $AIOREST_ACCESS_LOG, else off)",
    )
    run.add_argument(
        "--access-log-format",
        choices=["combined", "json"],
        default=os.environ.get("AIOREST_ACCESS_LOG_FORMAT", "combined"),
        help="combined (default) or json lines ($AIOREST_ACCESS_LOG_FORMAT)",
    )
    migrate = commands.add_parser("migrate", help="apply numbered SQL migrations: aiorest migrate --dir migrations")
    migrate.add_argument("action", nargs="?", choices=["up", "status"], default="up", help="up (default) or status")
    migrate.add_argument("--dir", default="migrations", help="folder of NNNN_name.sql files (default migrations)")
    migrate.add_argument("--dsn", help="PostgreSQL URL (default $DATABASE_URL)")
    return parser


def _migrate(action: str, directory: str, dsn: str | None) -> int:
    import asyncio

    from .db import Database
    from .migrations import MigrationError, migrate, migration_status

    async def go() -> int:
        db = Database(dsn, min_size=1, max_size=1)
        await db.open()
        try:
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
        app = load_app(args.app)
        options = {
            "log_level": args.log_level,
            "backlog": args.backlog,
            "graceful_timeout": args.graceful_timeout,
            "loop_lag_report": args.loop_lag_report,
            "forwarded_allow_ips": args.forwarded_allow_ips,
            "access_log": args.access_log,
            "access_log_format": args.access_log_format,
        }
        if args.workers == 1:
            app.run(host=args.host, port=args.port, unix=args.unix, unix_mode=args.unix_mode, **options)
            return
        if args.unix:
            raise SystemExit("aiorest: --workers needs TCP (SO_REUSEPORT); put nginx in front for a unix socket")
        from .workers import run_workers

        logging.basicConfig(level=args.log_level.upper(), format=LOG_FORMAT)

        def serve(ready: Callable[[], object]) -> None:
            app.run(host=args.host, port=args.port, reuse_port=True, ready=ready, **options)

        raise SystemExit(run_workers(args.workers, serve))
    elif args.command == "migrate":
        raise SystemExit(_migrate(args.action, args.dir, args.dsn))

"""``aiorest run module:app``: the command line."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Callable, Sequence

from .. import __version__
from ..app.application import App
from ..server.listeners import bind_tcp, bind_unix, inherited_socket, remove_unix_socket, systemd_socket
from ..server.process.supervisor import run_workers
from ..server.server import WORKERS_LOG_FORMAT, _one_line, run

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
        raise SystemExit(f"aiorest: cannot import {module_name!r}: {_one_line(exc)}") from exc
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


def _env(name: str, convert: Callable[[str], object]) -> object:
    """The default of a flag: the environment variable ``name`` converted, or None (unset or empty)."""
    value = os.environ.get(name)
    if not value:
        return None
    try:
        return convert(value)
    except ValueError:
        raise SystemExit(f"aiorest: {name}={value!r} is not valid") from None


def _at_least_one(text: str) -> int:
    count = int(text)
    if count < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {count}")
    return count


def _positive(name: str, default: float) -> float:
    """The default of a flag of seconds: ``$name`` if set (it must be positive), else ``default``."""
    value = _env(name, float)
    if value is None:
        return default
    assert isinstance(value, float)
    if value <= 0:
        raise SystemExit(f"aiorest: {name}={value!r} must be positive")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="aiorest", description="Serve an aiorest App.")
    parser.add_argument("--version", action="version", version=f"aiorest {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="serve an app: aiorest run myapp:app --port 8080")
    run.add_argument("app", help="MODULE:APP, e.g. myapp:app")
    run.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    run.add_argument("--port", type=int, default=8080, help="port to bind (default 8080)")
    run.add_argument("--unix", help="serve on this unix socket path instead of TCP")
    run.add_argument(
        "--workers",
        type=_at_least_one,
        help="worker processes under a parent that reloads them on SIGHUP (default: one process, no parent)",
    )
    run.add_argument(
        "--unix-mode", type=lambda text: int(text, 8), default=0o666, help="unix socket mode (default 666)"
    )
    run.add_argument("--backlog", type=int, default=2048, help="listen backlog (default 2048)")
    run.add_argument("--loop-lag-report", metavar="FILE", help="write event-loop lag percentiles (JSON) at exit")
    run.add_argument(
        "--graceful-timeout",
        type=float,
        default=_positive("AIOREST_GRACEFUL_TIMEOUT", 30.0),
        help="seconds to finish requests on SIGTERM (default 30, $AIOREST_GRACEFUL_TIMEOUT)",
    )
    run.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="level of the server's log (default info)",
    )
    _add_production_options(run)
    # the process model: inherited sockets, reloads
    run.add_argument(
        "--fd",
        type=int,
        default=_env("AIOREST_FD", int),
        help="serve the listening socket (TCP or unix) inherited as this file descriptor ($AIOREST_FD)",
    )
    run.add_argument(
        "--start-timeout",
        type=float,
        default=_positive("AIOREST_START_TIMEOUT", 60.0),
        help="with --workers: seconds a new worker has to start serving (default 60, $AIOREST_START_TIMEOUT)",
    )
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
    migrate.add_argument(
        "--dir",
        action="append",
        dest="dirs",
        help="folder of NNNN_name.sql files, or aiorest:NAME for aiorest's own (default migrations);"
        " repeat it to apply several folders in the order given",
    )
    migrate.add_argument("--dsn", help="PostgreSQL URL (default $DATABASE_URL)")
    return parser


# -- admission control, cancellation, health and metrics (docs/deployment.rst) ----------------


def _flag(text: str) -> bool:
    value = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}
    try:
        return value[text.strip().lower()]
    except KeyError:
        raise ValueError(text) from None


def _add_production_options(run: argparse.ArgumentParser) -> None:
    run.add_argument(
        "--max-concurrency", type=int, default=_env("AIOREST_MAX_CONCURRENCY", int),
        help="handlers running at most per worker; past it requests wait, then 503 (default off);"
        " a request takes its slot once its body is in (up to the body buffer), so slow uploads hold none",
    )  # fmt: skip
    run.add_argument(
        "--max-queue", type=int, default=_env("AIOREST_MAX_QUEUE", int),
        help="requests waiting at most for a handler slot (default: a quarter of --max-concurrency)",
    )  # fmt: skip
    run.add_argument(
        "--queue-timeout", type=float, default=_env("AIOREST_QUEUE_TIMEOUT", float),
        help="seconds a request waits for a handler slot before its 503 (default 1)",
    )  # fmt: skip
    for name, help_text in (
        ("cancel-on-disconnect", "cancel a handler whose client has gone (default off)"),
        ("health", "serve /healthz and /readyz (default off)"),
        ("metrics", "serve Prometheus metrics at /metrics (default off; needs prometheus_client)"),
    ):
        env = "AIOREST_" + name.upper().replace("-", "_")
        run.add_argument(
            f"--{name}", action=argparse.BooleanOptionalAction, default=_env(env, _flag) or False, help=help_text
        )


def _production_options(args: argparse.Namespace) -> dict[str, object]:
    options: dict[str, object] = {
        "max_concurrency": args.max_concurrency,
        "max_queue": args.max_queue,
        "cancel_on_disconnect": args.cancel_on_disconnect,
        "health": args.health,
        "metrics": args.metrics,
    }
    if args.queue_timeout is not None:
        options["queue_timeout"] = args.queue_timeout
    if args.metrics:
        from ..ops.metrics import prepare_multiprocess_dir, prometheus_available

        if not prometheus_available():
            raise SystemExit(
                "aiorest: --metrics needs prometheus_client: pip install '.[metrics]' in aiorest's checkout"
            )
        if args.workers is not None:  # before anything imports prometheus_client (the app included)
            prepare_multiprocess_dir()
    return options


def _on_worker_exit(args: argparse.Namespace) -> Callable[[int], None] | None:
    """What the parent does when a worker exits: the metrics forget its live gauges."""
    if not args.metrics:
        return None
    from ..ops.metrics import worker_exited

    return worker_exited


def _migrate(action: str, directories: Sequence[str], dsn: str | None) -> int:
    import asyncio

    from ..db.database import Database
    from ..db.migrations import MigrationError, migrate, migration_status

    async def go() -> int:
        db = Database(dsn, min_size=1, max_size=1)
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
        raise SystemExit(_migrate(args.action, args.dirs or ["migrations"], args.dsn))


def _run(args: argparse.Namespace) -> None:
    options = {
        "log_level": args.log_level,
        "backlog": args.backlog,
        "graceful_timeout": args.graceful_timeout,
        "loop_lag_report": args.loop_lag_report,
        "forwarded_allow_ips": args.forwarded_allow_ips,
        "access_log": args.access_log,
        "access_log_format": args.access_log_format,
        **_production_options(args),  # before the app is imported: it prepares the metrics' directory
    }
    try:
        sock = inherited_socket(args.fd) if args.fd is not None else systemd_socket()
    except ValueError as exc:
        raise SystemExit(f"aiorest: {exc}") from None
    if args.workers is None:
        app = load_app(args.app)
        if sock is not None:
            app.run(sock=sock, **options)
        else:
            app.run(host=args.host, port=args.port, unix=args.unix, unix_mode=args.unix_mode, **options)
        return
    # The parent never imports the app: each worker does, so that one started
    # by a reload (SIGHUP) runs the code on disk then.
    _split_spec(args.app)
    # The workers inherit this configuration; the pid tells whose line it is.
    logging.basicConfig(level=args.log_level.upper(), format=WORKERS_LOG_FORMAT)
    bound: os.stat_result | None = None  # the unix socket file bound here, removed at exit
    if sock is None:
        where = f"unix:{args.unix}" if args.unix else f"{args.host}:{args.port}"
        try:
            sock = (
                bind_unix(args.unix, args.unix_mode, args.backlog)
                if args.unix
                else bind_tcp(args.host, args.port, args.backlog)
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
        run(app, sock=listener, ready=ready, startup_failed=failed, **options)

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

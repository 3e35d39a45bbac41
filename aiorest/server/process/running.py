"""``aiorest run --workers N`` and ``--reload``: workers forked by a parent that binds the socket and
supervises them (supervisor.py), and ``app.run(reload=True)``.

The parent never imports the app: each worker does, after the fork, so that one
started by a reload runs the code on disk then. Under ``--reload`` a worker first
forgets the modules of the directories watched (``app.run(reload=True)`` imported
them in the parent), and reports an app that cannot be imported with its
traceback: that is the developer's loop.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import socket
import sys
import traceback
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...ops.blocking import DEVELOPMENT_THRESHOLD
from ...ops.logformat import WORKERS_LOG_FORMAT, configure_logging
from ..config import ServerConfig
from ..listeners import bind_tcp, bind_unix, remove_unix_socket
from ..server import run
from .loading import load_app
from .supervisor import run_workers
from .watch import Watcher, WatchOptions, watchfiles_available

if TYPE_CHECKING:
    from ...app.application import App

logger = logging.getLogger("aiorest.server")

# Seconds a stopping worker has, past --graceful-timeout, for the app's shutdown before SIGKILL.
_SHUTDOWN_MARGIN = 10.0
_in_worker = False  # set in a worker under --reload, where app.run(reload=True) must not run again

__all__ = ["run_app_reloading", "supervise", "watch_options"]


def supervise(
    spec: str,
    config: ServerConfig,
    *,
    count: int,
    start_timeout: float,
    on_exit: Callable[[int], object] | None = None,
    watch: WatchOptions | None = None,
) -> int:
    """Serve ``spec`` (``module:attribute``) in ``count`` workers on ``config``'s socket (bound here unless
    ``config.sock`` is one), reloading on a change under ``watch``; returns the exit code."""
    # The workers inherit this configuration; the pid tells whose line it is.
    configure_logging(config.log_level, config.log_format, WORKERS_LOG_FORMAT)
    bound: os.stat_result | None = None  # the unix socket file bound here, removed at exit
    listener = config.sock
    if listener is None:
        listener = _bind(config)
        if config.unix:
            bound = os.stat(config.unix)
    config = ServerConfig.of(config, {"sock": listener}, what="supervise()")

    def serve(ready: Callable[[], object], failed: Callable[[str], object]) -> None:
        global _in_worker
        if watch is not None:
            _in_worker = True
            _forget_modules(watch.dirs)
        try:
            app = load_app(spec)
        except SystemExit as exc:
            reason = str(exc.code).removeprefix("aiorest: ")
            if watch is not None:  # the traceback of a SyntaxError, an ImportError, ...: the developer's loop
                logger.error("%s%s", reason, _traceback(exc.__cause__))
            failed(reason)
            raise SystemExit(1) from None
        run(app, config, ready=ready, startup_failed=failed if watch is None else _logged(failed))

    watcher = Watcher(watch) if watch is not None else None
    try:
        if watcher is not None:
            watcher.start()
        return run_workers(
            count,
            serve,
            listener=listener,
            start_timeout=start_timeout,
            stop_timeout=config.graceful_timeout + _SHUTDOWN_MARGIN,
            on_exit=on_exit,
            watcher=watcher,
        )
    finally:
        if watcher is not None:
            watcher.close()
        if bound is not None:
            assert config.unix is not None
            remove_unix_socket(config.unix, bound)


def watch_options(
    spec: str, dirs: Iterable[str] = (), includes: Iterable[str] = (), excludes: Iterable[str] = ()
) -> WatchOptions:
    """What ``--reload`` watches for ``spec``: the directory of its module's top-level package (that of
    the module itself when it is not in a package), and ``dirs``. SystemExit if that cannot be."""
    if not watchfiles_available():
        raise SystemExit("aiorest: --reload needs watchfiles: pip install '.[reload]' in aiorest's checkout")
    top = spec.partition(":")[0].partition(".")[0]
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        found = importlib.util.find_spec(top)  # a top-level name: found, not imported
    except (ImportError, ValueError):
        found = None
    if found is None or not (found.submodule_search_locations or found.origin):
        raise SystemExit(f"aiorest: --reload: cannot find the module {top!r} to watch (from {os.getcwd()})")
    locations = list(found.submodule_search_locations or [])
    package = locations[0] if locations else os.path.dirname(str(found.origin))
    try:
        return WatchOptions.of([package, *dirs], includes, excludes)
    except ValueError as exc:
        raise SystemExit(f"aiorest: {exc}") from None


def run_app_reloading(app: App, config: ServerConfig | None, options: Mapping[str, Any]) -> None:
    """``app.run(reload=True, ...)``: ``app_spec`` (``"module:attribute"``) names the app for the worker to
    import, else the global of ``__main__`` it is; ``reload_dirs``, ``reload_includes``, ``reload_excludes``
    as ``--reload-dir`` and the others; the rest are ServerConfig's fields, over ``config``."""
    if _in_worker:
        raise RuntimeError(
            "app.run(reload=True) ran while a worker imported the app: call it under if __name__ == '__main__':"
        )
    rest = dict(options)
    spec = rest.pop("app_spec", None) or _main_spec(app)
    watch = watch_options(
        spec, rest.pop("reload_dirs", ()), rest.pop("reload_includes", ()), rest.pop("reload_excludes", ())
    )
    if "blocked_loop_threshold" not in rest and (config is None or config.blocked_loop_threshold is None):
        rest["blocked_loop_threshold"] = DEVELOPMENT_THRESHOLD  # on in development, as with aiorest run --reload
    config = ServerConfig.of(config, rest, what="App.run()")
    if config.workers != 1:
        raise ValueError(f"app.run(reload=True) runs one worker, got workers={config.workers}")
    code = supervise(spec, config, count=1, start_timeout=60.0, watch=watch)
    if code:
        raise SystemExit(code)


def _main_spec(app: App) -> str:
    """``module:attribute`` of ``app`` as a global of the script run (``__main__``), imported under its own name."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    hint = "pass app_spec='module:attribute' to app.run(reload=True)"
    if main is None or path is None:
        raise RuntimeError(f"app.run(reload=True) needs the app's module, and __main__ has no file: {hint}")
    names = [name for name, value in vars(main).items() if value is app]
    if not names:
        raise RuntimeError(f"app.run(reload=True): the app is not a global of {path}: {hint}")
    module_spec = getattr(main, "__spec__", None)  # python -m package.module: its name
    module = module_spec.name if module_spec is not None else Path(path).stem
    return f"{module}:{names[0]}"


def _forget_modules(dirs: Iterable[str]) -> None:
    """Remove from sys.modules the modules loaded from ``dirs`` (aiorest's own and __main__ stay)."""
    roots = [Path(d) for d in dirs]
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if name == "__main__" or name == "aiorest" or name.startswith("aiorest.") or not path:
            continue
        if any(Path(path).is_relative_to(root) for root in roots):
            del sys.modules[name]


def _traceback(exc: BaseException | None) -> str:
    """``exc``'s traceback on the lines after a log line, without the frames of the import machinery."""
    if exc is None:
        return ""
    shown = traceback.TracebackException.from_exception(exc)
    machinery = ("<frozen importlib", importlib.__file__ or "<none>", load_app.__code__.co_filename)
    shown.stack = traceback.StackSummary.from_list(
        [frame for frame in shown.stack if not frame.filename.startswith(machinery)]
    )
    return "\n" + "".join(shown.format()).rstrip()


def _logged(failed: Callable[[str], object]) -> Callable[[str], None]:
    """``failed``, which logs the reason first: the app's startup failed."""

    def startup_failed(reason: str) -> None:
        logger.error("the app's startup failed: %s", reason)
        failed(reason)

    return startup_failed


def _bind(config: ServerConfig) -> socket.socket:
    where = f"unix:{config.unix}" if config.unix else f"{config.host}:{config.port}"
    try:
        if config.unix:
            return bind_unix(config.unix, config.unix_mode, config.backlog)
        return bind_tcp(config.host, config.port, config.backlog)
    except OSError as exc:
        logger.error("cannot listen on %s: %s", where, exc)
        raise SystemExit(1) from None

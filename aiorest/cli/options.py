"""``aiorest run``'s flags, made from ServerConfig's fields (and the few the command line adds)."""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Callable, Iterable
from typing import Any

from ..http.limits import Limits, limit_help
from ..ops.blocking import DEVELOPMENT_THRESHOLD
from ..server.config import Flag, ServerConfig, at_least_one, flags, positive

__all__ = ["add_flags", "config_from", "COMMAND_LINE_FLAGS", "LIMIT_FLAGS"]


#: What the command line adds to ServerConfig: the process model's flags (and the app, a positional argument).
COMMAND_LINE_FLAGS: dict[str, Flag] = {
    "fd": Flag(
        "serve the listening socket (TCP or unix) inherited as this file descriptor", env="AIOREST_FD", parse=int
    ),
    "start_timeout": Flag(
        "with --workers: seconds a new worker has to start serving (default 60)",
        env="AIOREST_START_TIMEOUT",
        parse=positive,
        cli_default=60.0,
    ),
    # aiorest run --reload (docs/server.rst: Reload while developing)
    "reload": Flag(
        "restart the worker when the app's code changes, for development (needs pip install '.[reload]')",
        parse=bool,
        cli_default=False,
    ),
    "reload_dir": Flag(
        "with --reload: watch this directory too (repeat it for more; the app's package is always watched)",
        metavar="DIR",
        repeat=True,
    ),
    "reload_include": Flag(
        "with --reload: a change to a file matching this glob reloads (repeat it for more; *.py always)",
        metavar="GLOB",
        repeat=True,
    ),
    "reload_exclude": Flag(
        "with --reload: a change to a file or directory matching this glob does not reload (repeat it for more;"
        " .* *.py[cod] *~ ~* __pycache__ always)",
        metavar="GLOB",
        repeat=True,
    ),
}


#: A flag per field of Limits, over the app's limits (ServerConfig.limit_overrides): absent, the app's value stays.
LIMIT_FLAGS: dict[str, Flag] = {
    option.name: Flag(
        limit_help()[option.name],
        env=f"AIOREST_{option.name.upper()}",
        parse=positive if isinstance(option.default, float) else at_least_one,
        cli_default=None,
    )
    for option in dataclasses.fields(Limits)
}


def _flag(text: str) -> bool:
    value = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}
    try:
        return value[text.strip().lower()]
    except KeyError:
        raise ValueError(f"expected 1/0, true/false, yes/no or on/off, got {text!r}") from None


def _checked(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """``parse`` for argparse: its ValueError is the usage error's message."""

    def checked(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    checked.__name__ = getattr(parse, "__name__", "value")
    return checked


def _default(flag: Flag, default: Any) -> Any:
    """The flag's default: ``$env`` if set and not empty, else ``default``."""
    text = os.environ.get(flag.env) if flag.env else None
    if not text:
        return default
    assert flag.env is not None
    try:
        return (_flag if flag.parse is bool else flag.parse)(text)
    except ValueError as exc:
        raise SystemExit(f"aiorest: {flag.env}={text!r} is not valid: {exc}") from None


def _add(parser: argparse.ArgumentParser, name: str, flag: Flag, default: Any) -> None:
    help_text = flag.help if flag.env is None else f"{flag.help} (${flag.env})"
    options: dict[str, Any] = {"default": _default(flag, default), "help": help_text}
    if flag.parse is bool:
        options["action"] = argparse.BooleanOptionalAction
    elif flag.parse is not str:
        options["type"] = _checked(flag.parse)
    if flag.choices is not None:
        options["choices"] = list(flag.choices)
    if flag.metavar is not None:
        options["metavar"] = flag.metavar
    if flag.const is not None:
        options.update(nargs="?", const=flag.const)
    if flag.repeat:
        options["action"] = "append"
    parser.add_argument("--" + name.replace("_", "-"), **options)


def add_flags(parser: argparse.ArgumentParser) -> None:
    """A flag for each field of ServerConfig that has one, then the command line's own."""
    for option, flag in flags():
        _add(parser, option.name, flag, option.default if flag.cli_default is ... else flag.cli_default)
    for name, flag in COMMAND_LINE_FLAGS.items():
        _add(parser, name, flag, None if flag.cli_default is ... else flag.cli_default)
    limits = parser.add_argument_group("limits", "each over the app's Limits (docs/server.rst: Limits and timeouts)")
    for name, flag in LIMIT_FLAGS.items():
        _add(limits, name, flag, None)  # type: ignore[arg-type]  # an argument group adds arguments alike


def config_from(args: argparse.Namespace, **more: Any) -> ServerConfig:
    """The ServerConfig the parsed flags give (``--workers`` absent: one), with ``more`` fields.

    With ``--reload``, the blocked-loop detector is on at ``DEVELOPMENT_THRESHOLD`` unless a threshold is given.

    ``--host`` or ``--port`` with ``--unix`` is refused (SystemExit): one of them would be ignored.
    """
    given = {option.name: getattr(args, option.name) for option, _ in flags()}
    if given["unix"] and (given["host"] is not None or given["port"] is not None):
        raise SystemExit(
            "aiorest: --unix serves on a unix socket: --host and --port do not apply, give one or the other"
        )
    for option in dataclasses.fields(ServerConfig):
        if option.name in ("host", "port") and given[option.name] is None:
            given[option.name] = option.default
    given["workers"] = given["workers"] or 1
    if getattr(args, "reload", False) and given["blocked_loop_threshold"] is None:  # on in development, unless given
        given["blocked_loop_threshold"] = DEVELOPMENT_THRESHOLD
    overrides = {name: getattr(args, name) for name in LIMIT_FLAGS if getattr(args, name, None) is not None}
    try:
        return ServerConfig(**given, limit_overrides=overrides or None, **more)
    except ValueError as exc:
        raise SystemExit(f"aiorest: {exc}") from None


def flag_names() -> Iterable[str]:
    """The ``--names`` add_flags adds, in order."""
    for option, _ in flags():
        yield "--" + option.name.replace("_", "-")
    for name in [*COMMAND_LINE_FLAGS, *LIMIT_FLAGS]:
        yield "--" + name.replace("_", "-")

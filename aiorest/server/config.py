"""ServerConfig: every option of the server, declared once.

:class:`~aiorest.server.Server`, :func:`~aiorest.server.run` and ``aiorest run``
all read it: Server and run take ``config=`` or the same keywords, and the command
line's flags, their help and their environment variables are made from the
fields' metadata (cli/options.py).
"""

from __future__ import annotations

import dataclasses
import inspect
import socket
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..http.limits import Limits
from ..ops.accesslog import FORMATS as ACCESS_LOG_FORMATS
from ..ops.logformat import LOG_FORMATS

if TYPE_CHECKING:
    from ..ops.tracing import Tracing

__all__ = ["ServerConfig", "Flag", "DEFAULT_QUEUE_TIMEOUT", "tracing_of"]

#: seconds a request waits for a handler slot, by default (docs/deployment.rst: sizing)
DEFAULT_QUEUE_TIMEOUT = 1.0


@dataclass(frozen=True)
class Flag:
    """How a field is given on the command line: ``--name`` (from the field's name), help, ``$env``.

    ``parse`` turns the text of the flag or of ``env`` into the value (``bool``: a
    ``--x/--no-x`` pair, and ``1/0``, ``true/false``, ``yes/no``, ``on/off`` in ``env``).
    ``cli_default``: the flag's default when it differs from the field's (``--workers``:
    none means one process, with no parent).
    """

    help: str
    env: str | None = None
    parse: Callable[[str], Any] = str
    choices: Sequence[str] | None = None
    metavar: str | None = None
    const: str | None = None  # the value of the flag given without one (``--access-log``)
    repeat: bool = False  # given several times, a list (``--reload-dir``)
    cli_default: Any = ...  # ...: the field's default


def _option(default: Any, flag: Flag | None = None, *, why_not: str = "") -> Any:
    """A field: ``flag`` says how the command line gives it; without one, ``why_not`` says why it cannot."""
    assert (flag is None) != (not why_not), "a field has a flag, or a reason for having none"
    return field(default=default, metadata={"flag": flag, "why_not": why_not})


def _octal(text: str) -> int:
    return int(text, 8)


def at_least_one(text: str) -> int:
    count = int(text)
    if count < 1:
        raise ValueError(f"must be at least 1, got {count}")
    return count


def positive(text: str) -> float:
    """Seconds, more than 0 (a ValueError says why not)."""
    value = float(text)
    if not value > 0:
        raise ValueError(f"must be positive, got {text}")
    return value


def _seconds_or_off(text: str) -> float:
    """Seconds, 0 or more (0: off)."""
    value = float(text)
    if not value >= 0:
        raise ValueError(f"must be 0 (off) or more, got {text}")
    return value


@dataclass(frozen=True, kw_only=True)
class ServerConfig:
    """The options of a server: where it listens, its limits, and what it serves besides the app.

    Listening: ``host`` and ``port`` (port 0 picks a free one), or ``unix`` (a socket
    path, created with ``unix_mode``), or an already bound ``sock``. ``workers``: the
    worker processes sharing this host and its socket (``aiorest run --workers`` sets
    it); the server tells the app (``app.state.worker_processes``) before its startup,
    and a ``Database`` (docs/database.rst) shares ``max_total`` out between them.

    Production options (docs/deployment.rst): ``max_concurrency`` handlers at most
    running at a time, ``max_queue`` more waiting (default a quarter of it) up to
    ``queue_timeout`` seconds, the others answered 503
    (:class:`~aiorest.ops.admission.Admission`); ``cancel_on_disconnect`` cancels a
    handler whose client has gone; ``health`` serves ``/healthz`` and ``/readyz``;
    ``metrics`` serves Prometheus metrics at ``/metrics`` (needs ``prometheus_client``);
    ``blocked_loop_threshold`` (seconds; None or 0: off) logs and counts each time the event loop
    is blocked that long (:class:`~aiorest.ops.BlockedLoopDetector`).

    ``forwarded_allow_ips``: the proxies whose forwarding headers are believed
    (addresses, CIDR ranges, ``unix``, ``*``; a list or a comma-separated string;
    default none). ``access_log``: where to write a line per request (a path, or
    ``-`` for stdout; default none), in ``access_log_format`` (``combined`` or ``json``).
    ``log_level``: the level :func:`~aiorest.server.run` configures logging with; ``log_format``: ``text``, or
    ``json`` for :class:`~aiorest.ops.JSONLogFormatter`'s lines. ``tracing``: True, or a
    :class:`~aiorest.ops.tracing.Tracing`, traces with OpenTelemetry (:doc:`tracing`).
    """

    # None on the command line: not given, which --unix needs to know (cli/options.py)
    host: str = _option("127.0.0.1", Flag("address to bind (default 127.0.0.1)", cli_default=None))
    port: int = _option(8080, Flag("port to bind (default 8080)", parse=int, cli_default=None))
    unix: str | None = _option(None, Flag("serve on this unix socket path instead of TCP"))
    unix_mode: int = _option(0o666, Flag("unix socket mode (default 666)", parse=_octal))
    sock: socket.socket | None = _option(None, why_not="a socket object: the command line's --fd gives it")
    workers: int = _option(
        1,
        Flag(
            "worker processes under a parent that reloads them on SIGHUP (default: one process, no parent)",
            parse=at_least_one,
            cli_default=None,
        ),
    )
    backlog: int = _option(2048, Flag("listen backlog (default 2048)", parse=int))
    limits: Limits | None = _option(None, why_not="an object: the app's limits, else Limits()")
    limit_overrides: Mapping[str, float] | None = _option(
        None, why_not="a flag per field of Limits (--max-body-size, --body-timeout, ...), over the app's limits"
    )
    server_header: str | None = _option("aiorest", why_not="set in code, if at all")
    reuse_port: bool = _option(False, why_not="the command line binds once and shares the socket")
    graceful_timeout: float = _option(
        30.0, Flag("seconds to finish requests on SIGTERM (default 30)", env="AIOREST_GRACEFUL_TIMEOUT", parse=positive)
    )
    loop_lag_report: str | None = _option(None, Flag("write event-loop lag percentiles (JSON) at exit", metavar="FILE"))
    log_level: str = _option(
        "info", Flag("level of the server's log (default info)", choices=("debug", "info", "warning", "error"))
    )
    log_format: str = _option(
        "text",
        Flag(
            "text (default) or json: one JSON object a line, with the request id (the app's log and aiorest's)",
            env="AIOREST_LOG_FORMAT",
            choices=LOG_FORMATS,
        ),
    )
    # admission control, cancellation, health and metrics (docs/deployment.rst)
    max_concurrency: int | None = _option(
        None,
        Flag(
            "handlers running at most per worker; past it requests wait, then 503 (default off);"
            " a request takes its slot once its whole body is in, so slow uploads hold none",
            env="AIOREST_MAX_CONCURRENCY",
            parse=int,
        ),
    )
    max_queue: int | None = _option(
        None,
        Flag(
            "requests waiting at most for a handler slot (default: a quarter of --max-concurrency)",
            env="AIOREST_MAX_QUEUE",
            parse=int,
        ),
    )
    queue_timeout: float = _option(
        DEFAULT_QUEUE_TIMEOUT,
        Flag(
            "seconds a request waits for a handler slot before its 503 (default 1)",
            env="AIOREST_QUEUE_TIMEOUT",
            parse=float,
        ),
    )
    cancel_on_disconnect: bool = _option(
        False,
        Flag("cancel a handler whose client has gone (default off)", env="AIOREST_CANCEL_ON_DISCONNECT", parse=bool),
    )
    health: bool = _option(False, Flag("serve /healthz and /readyz (default off)", env="AIOREST_HEALTH", parse=bool))
    metrics: bool = _option(
        False,
        Flag(
            "serve Prometheus metrics at /metrics (default off; needs prometheus_client)",
            env="AIOREST_METRICS",
            parse=bool,
        ),
    )
    # the blocked-loop detector (ops/blocking.py); `aiorest run --reload` turns it on at DEVELOPMENT_THRESHOLD
    blocked_loop_threshold: float | None = _option(
        None,
        Flag(
            "log (with the stack where it is stuck) and count each time the event loop is blocked"
            " this many seconds or more, e.g. 0.1 (default off; 0 is off)",
            env="AIOREST_BLOCKED_LOOP_THRESHOLD",
            parse=_seconds_or_off,
            metavar="SECONDS",
        ),
    )
    # request ids, trusted proxies, access log
    forwarded_allow_ips: str | list[str] | None = _option(
        None,
        Flag(
            "proxies whose X-Forwarded-*/Forwarded headers are believed: addresses, CIDR ranges,"
            " 'unix', '*', comma-separated (default none)",
            env="AIOREST_FORWARDED_ALLOW_IPS",
            metavar="LIST",
        ),
    )
    access_log: str | None = _option(
        None,
        Flag(
            "write a line per request to FILE, or to stdout if none or '-' (default off)",
            env="AIOREST_ACCESS_LOG",
            metavar="FILE",
            const="-",
        ),
    )
    access_log_format: str = _option(
        "combined",
        Flag("combined (default) or json lines", env="AIOREST_ACCESS_LOG_FORMAT", choices=ACCESS_LOG_FORMATS),
    )

    # OpenTelemetry (docs/tracing.rst): True, or an aiorest.ops.tracing.Tracing saying where the spans go
    tracing: Any = _option(
        False,
        Flag(
            "trace requests, queries and stores with OpenTelemetry, exported over OTLP/HTTP as the OTEL_*"
            " variables say (default off; needs the otel extra)",
            env="AIOREST_TRACING",
            parse=bool,
        ),
    )

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError(f"workers must be at least 1, got {self.workers}")
        if self.blocked_loop_threshold is not None and not self.blocked_loop_threshold >= 0:
            raise ValueError(f"blocked_loop_threshold must be 0 (off) or more, got {self.blocked_loop_threshold}")
        if self.limit_overrides:
            self.limits_over(Limits())  # a name that is not a limit, or a value out of range: ValueError now

    def limits_over(self, base: Limits) -> Limits:
        """``limits`` (else ``base``) with ``limit_overrides`` replaced."""
        limits = self.limits or base
        if not self.limit_overrides:
            return limits
        unknown = self.limit_overrides.keys() - {option.name for option in dataclasses.fields(Limits)}
        if unknown:
            raise ValueError(f"limit_overrides: no such limit: {', '.join(sorted(unknown))}")
        return dataclasses.replace(limits, **self.limit_overrides)  # type: ignore[arg-type]  # checked by Limits

    @classmethod
    def of(cls, config: ServerConfig | None, options: Mapping[str, Any], *, what: str) -> ServerConfig:
        """``config`` with ``options`` (keywords named as the fields) replaced; unknown names raise TypeError."""
        unknown = options.keys() - _NAMES
        if unknown:
            raise TypeError(f"{what} got unexpected keyword argument(s): {', '.join(sorted(unknown))}")
        if config is None:
            return cls(**options)
        return dataclasses.replace(config, **options) if options else config


_NAMES = frozenset(f.name for f in dataclasses.fields(ServerConfig))


def tracing_of(value: Any) -> Tracing | None:
    """The server's Tracing for its ``tracing`` option (OpenTelemetry is imported only when it is on)."""
    if not value:
        return None
    from ..ops.tracing import Tracing

    return value if isinstance(value, Tracing) else Tracing()


def flags() -> Iterator[tuple[dataclasses.Field[Any], Flag]]:
    """The fields the command line gives, with how."""
    for option in dataclasses.fields(ServerConfig):
        flag = option.metadata["flag"]
        if flag is not None:
            yield option, flag


def keyword_parameters() -> list[inspect.Parameter]:
    """The fields as keyword-only parameters, for the signatures of Server and run."""
    return [
        inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=f.type)
        for f in dataclasses.fields(ServerConfig)
    ]


def with_keywords(function: Callable[..., object], *, after: str) -> None:
    """Give ``function`` a signature that lists ServerConfig's fields as keywords, after the parameter ``after``."""
    signature = inspect.signature(function)
    parameters = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    at = [p.name for p in parameters].index(after) + 1
    keywords = [p for p in keyword_parameters() if p.name not in signature.parameters]
    function.__signature__ = signature.replace(parameters=[*parameters[:at], *keywords, *parameters[at:]])  # type: ignore[attr-defined]

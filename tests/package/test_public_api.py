"""The public import paths keep working, whatever the module layout behind them (issues 28 and 35).

Every name in ``aiorest.__all__``, and every package and name that the docs, the examples,
example_app/, load/ and bench/ import, are checked here; and the docs import from nothing else.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

import aiorest

#: package -> the names users import from it (README, docs/, examples, example_app/, load/, bench/).
#: The rule (docs/internals.rst, "Public paths"): a public path is a package, never a module inside one.
DOCUMENTED = {
    "aiorest.db": [
        "Database",
        "Transaction",
        "DatabaseError",
        "DatabaseUnavailable",
        "PoolTimeout",
        "StatementTimeout",
        "UniqueViolation",
        "ConstraintViolation",
        "InvalidValue",
        "NulCharacter",
        "Migration",
        "MigrationError",
        "load_migrations",
        "migrate",
        "migration_status",
        "Notification",
        "NotificationGap",
        "Subscription",
        "SubscriberTooSlow",
    ],
    "aiorest.security": [
        "AnyIdentity",
        "checks_login",
        "remember_identity",
        "Auth",
        "BearerTokenIdentity",
        "Hit",
        "LimitStore",
        "LimitStoreUnavailable",
        "LoginRateLimiter",
        "Passwords",
        "PermissionsPolicy",
        "PostgresLimitStore",
        "RateLimit",
        "RedisLimitStore",
        "SessionIdentity",
        "hash_password",
        "identity",
        "login_required",
        "permits",
        "requires",
        "token_hash",
        "verify_password",
    ],
    "aiorest.typed": [
        "Body",
        "Form",
        "Cookie",
        "Header",
        "Query",
        "Parameter",
        "HandlerSignature",
        "read_signature",
        "VALIDATION_MESSAGE",
        "TypedEndpoint",
        "build_openapi",
        "raises",
        "HasRoutes",
        "OPENAPI_VERSION",
        "SECURED",
    ],
    "aiorest.middleware": ["CORS", "Compression", "Decompression", "BROTLI_AVAILABLE"],
    "aiorest.middleware.sessions": [
        "Session",
        "SessionStore",
        "SessionMiddleware",
        "CookieSessionStore",
        "RedisSessionStore",
        "PostgresSessionStore",
        "stored_id",
    ],
    "aiorest.middleware.idempotency": [
        "Idempotency",
        "IdempotencyStore",
        "MemoryIdempotencyStore",
        "RedisIdempotencyStore",
        "PostgresIdempotencyStore",
        "idempotency_exempt",
        "Claim",
        "Stored",
        "KEPT_HEADERS",
        "REPLAYED_HEADER",
        "SECRET_HEADERS",
    ],
    "aiorest.http": [
        "JSONCodec",
        "get_codec",
        "HTTPError",
        "HTTPNotFound",
        "ClientDisconnected",
        "RouteMatch",
        "SessionData",
        "bad_body",
        "add_vary",
        "ETag",
        "HTTPNotModified",
        "check_preconditions",
        "parse_etags",
        "FileResponse",
        "FormData",
        "FormLimits",
        "UploadFile",
        "Uploads",
        "BackgroundTasks",
        "BackgroundTasksFull",
        "RequestTasks",
        "EventSourceResponse",
        "EventStreamParser",
        "ServerSentEvent",
        "WebSocket",
        "WebSocketDisconnect",
        "WebSocketLimits",
    ],
    "aiorest.ops": [
        "Admission",
        "BlockedLoopDetector",
        "HealthProbes",
        "JSONLogFormatter",
        "Metrics",
        "prepare_multiprocess_dir",
        "worker_exited",
    ],
    "aiorest.ops.tracing": ["Tracing"],
    "aiorest.testing": ["TestClient", "AiorestTestServer", "EventStream"],
    "aiorest.cli": ["main", "load_app"],
    "aiorest.server": [
        "Server",
        "ServerConfig",
        "ServerState",
        "Limits",
        "run",
        "new_event_loop",
        "LOG_FORMAT",
        "WORKERS_LOG_FORMAT",
        "DEFAULT_QUEUE_TIMEOUT",
        "IDLE_GRACE",
    ],
    "aiorest.routing": [
        "Route",
        "Router",
        "RouteOptions",
        "RouteTable",
        "NoMatchFound",
        "PREFLIGHT_MIDDLEWARE",
        "WebSocketEndpoint",
        "WebSocketHandler",
        "OriginPolicy",
    ],
    "aiorest.app": ["App", "EndpointLayer", "Readiness"],
    "aiorest.pytest_plugin": [],
}
#: Modules, not packages, that are public all the same: the entry points a tool names by module.
ENTRY_MODULES = {"aiorest.testing", "aiorest.pytest_plugin"}

ROOT = Path(__file__).resolve().parents[2]
#: Where users read imports: the docs (pages and their examples), README and example_app/.
READ_BY_USERS = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").rglob("*.rst")),
    *sorted((ROOT / "docs").rglob("*.inc")),
    *sorted((ROOT / "docs" / "examples").rglob("*.py")),
    *sorted((ROOT / "example_app").rglob("*.py")),
]
_IMPORTED = re.compile(r"^\s*(?:from\s+(aiorest(?:\.\w+)*)\s+import\b|import\s+(aiorest(?:\.\w+)*))", re.M)
# ``.. autoclass:: aiorest.ops.Admission``: the documented path of a name, which follows the rule too.
_AUTODOC = re.compile(r"^\s*\.\. auto\w+:: (aiorest(?:\.\w+)+)\.\w+", re.M)


def documented_paths() -> dict[str, set[str]]:
    """Every module path the files users read import from (or document a name under), and where."""
    found: dict[str, set[str]] = {}
    for path in READ_BY_USERS:
        text = path.read_text()
        for match in [*_IMPORTED.finditer(text), *_AUTODOC.finditer(text)]:
            module = next(group for group in match.groups() if group)
            found.setdefault(module, set()).add(str(path.relative_to(ROOT)))
    return found


@pytest.mark.parametrize("name", aiorest.__all__)
def test_every_public_name_imports(name):
    assert getattr(aiorest, name) is not None


@pytest.mark.parametrize("module", sorted(DOCUMENTED))
def test_documented_module_paths_keep_working(module):
    imported = importlib.import_module(module)
    missing = [name for name in DOCUMENTED[module] if not hasattr(imported, name)]
    assert not missing, f"{module} lost {missing}"
    for name in getattr(imported, "__all__", ()):
        assert hasattr(imported, name), f"{module}.__all__ names {name}, which is not there"


def test_the_docs_import_only_public_paths():
    """What the docs, README and example_app/ import from is ``aiorest`` or a package listed above."""
    stray = {
        module: sorted(where)
        for module, where in documented_paths().items()
        if module != "aiorest" and module not in DOCUMENTED
    }
    assert not stray, f"imports from paths that are not public packages: {stray}"


def test_public_paths_are_packages():
    """One rule: a public path is a package (``aiorest.security``), never a module inside one."""
    for module in set(DOCUMENTED) - ENTRY_MODULES:
        assert hasattr(importlib.import_module(module), "__path__"), f"{module} is a module, not a package"


def test_a_package_hands_out_the_defining_objects():
    """Re-exports, never copies: one class object, one module state (requestid's fork hook, the codec)."""
    from aiorest.http.exceptions import HTTPError
    from aiorest.security.auth import Auth

    assert importlib.import_module("aiorest.http").HTTPError is HTTPError is aiorest.HTTPError
    assert importlib.import_module("aiorest.security").Auth is Auth
    assert aiorest.Request is importlib.import_module("aiorest.http.request").Request
    assert aiorest.BackgroundTasksFull is importlib.import_module("aiorest.http").BackgroundTasksFull


def test_entry_points():
    """``aiorest = aiorest.cli:main`` (the script), the pytest plugin, and ``python -m aiorest``."""
    assert callable(importlib.import_module("aiorest.cli").main)
    assert importlib.util.find_spec("aiorest.__main__") is not None
    assert importlib.import_module("aiorest.pytest_plugin").__name__ == "aiorest.pytest_plugin"

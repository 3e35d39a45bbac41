"""The public import paths keep working, whatever the package layout behind them (issue 28).

Every name in ``aiorest.__all__``, and every module path and name that the docs, the examples,
example_app/, load/ and bench/ import, are checked here.
"""

from __future__ import annotations

import importlib

import pytest

import aiorest

#: module -> the names users import from it (README, docs/, examples, example_app/, load/, bench/).
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
    ],
    "aiorest.auth": [
        "AnyIdentity",
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
        "Cookie",
        "Header",
        "Query",
        "Parameter",
        "HandlerSignature",
        "read_signature",
        "VALIDATION_MESSAGE",
        "TypedEndpoint",
    ],
    "aiorest.openapi": ["build_openapi", "raises", "OPENAPI_VERSION", "SECURED"],
    "aiorest.sessions": [
        "Session",
        "SessionStore",
        "SessionMiddleware",
        "CookieStore",
        "RedisStore",
        "PostgresStore",
        "stored_id",
    ],
    "aiorest.testing": ["TestClient", "AiorestTestServer"],
    "aiorest.migrations": ["Migration", "MigrationError", "load_migrations", "migrate", "migration_status"],
    "aiorest.jsoncodec": ["JSONCodec", "get_codec"],
    "aiorest.cli": ["main", "load_app"],
    "aiorest.server": [
        "Server",
        "Limits",
        "run",
        "new_event_loop",
        "LOG_FORMAT",
        "WORKERS_LOG_FORMAT",
        "DEFAULT_QUEUE_TIMEOUT",
        "IDLE_GRACE",
    ],
    "aiorest.routing": ["Route", "Router", "RouteOptions", "RouteTable", "NoMatchFound", "PREFLIGHT_MIDDLEWARE"],
    "aiorest.compression": ["Compression", "Decompression", "BROTLI_AVAILABLE"],
    "aiorest.cors": ["CORS"],
    "aiorest.exceptions": ["HTTPError", "HTTPNotFound", "ClientDisconnected"],
    "aiorest.app": ["App", "EndpointLayer"],
    "aiorest.pytest_plugin": [],
}


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


def test_a_shim_hands_out_the_same_objects():
    """Re-exports, never copies: one class object, one module state (requestid's fork hook, the codec)."""
    from aiorest.http.exceptions import HTTPError
    from aiorest.security.auth import Auth

    assert importlib.import_module("aiorest.exceptions").HTTPError is HTTPError
    assert importlib.import_module("aiorest.auth").Auth is Auth
    assert aiorest.Request is importlib.import_module("aiorest.http.request").Request


def test_entry_points():
    """``aiorest = aiorest.cli:main`` (the script), the pytest plugin, and ``python -m aiorest``."""
    assert callable(importlib.import_module("aiorest.cli").main)
    assert importlib.util.find_spec("aiorest.__main__") is not None
    assert importlib.import_module("aiorest.pytest_plugin").__name__ == "aiorest.pytest_plugin"

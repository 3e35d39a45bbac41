"""Identity and authorization, password hashing, and rate limits with the stores they count in.

The public path of everything here is :mod:`aiorest.security` (``from aiorest.security import
Auth, requires``); the modules behind it are the package's own business.
"""

from .auth import (
    Auth,
    AuthorizationPolicy,
    HasPermissions,
    PermissionsPolicy,
    checks_login,
    identity,
    login_required,
    permits,
    remember_identity,
    requires,
    unauthorized,
)
from .identities import (
    AnyIdentity,
    BearerTokenIdentity,
    IdentityPolicy,
    SessionIdentity,
    bearer_token,
    token_hash,
    tokens_equal,
)
from .limits import (
    Hit,
    LimitStore,
    LimitStoreUnavailable,
    LoginAttempt,
    LoginRateLimiter,
    PostgresLimitStore,
    RateLimit,
    RedisLimitStore,
)
from .passwords import Passwords, hash_password, needs_rehash, verify_password

__all__ = [
    "AnyIdentity",
    "Auth",
    "AuthorizationPolicy",
    "BearerTokenIdentity",
    "HasPermissions",
    "Hit",
    "IdentityPolicy",
    "LimitStore",
    "LimitStoreUnavailable",
    "LoginAttempt",
    "LoginRateLimiter",
    "Passwords",
    "PermissionsPolicy",
    "PostgresLimitStore",
    "RateLimit",
    "RedisLimitStore",
    "SessionIdentity",
    "bearer_token",
    "checks_login",
    "hash_password",
    "identity",
    "login_required",
    "needs_rehash",
    "permits",
    "remember_identity",
    "requires",
    "token_hash",
    "tokens_equal",
    "unauthorized",
    "verify_password",
]

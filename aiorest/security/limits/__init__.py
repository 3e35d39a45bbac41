"""Rate limits (:mod:`.ratelimit`) and the shared stores they count in across processes (:mod:`.stores`)."""

from .ratelimit import LoginAttempt, LoginRateLimiter, RateLimit
from .stores import Hit, LimitStore, LimitStoreUnavailable, PostgresLimitStore, RedisLimitStore

__all__ = [
    "Hit",
    "LimitStore",
    "LimitStoreUnavailable",
    "LoginAttempt",
    "LoginRateLimiter",
    "PostgresLimitStore",
    "RateLimit",
    "RedisLimitStore",
]

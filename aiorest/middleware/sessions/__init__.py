"""Server-side sessions: the middleware, the session and where sessions live (its stores)."""

from .middleware import SessionMiddleware
from .session import Session
from .stores import (
    COOKIE_LIMIT,
    CookieSessionStore,
    PostgresSessionStore,
    RedisSessionStore,
    SessionStore,
    stored_id,
)

__all__ = [
    "SessionMiddleware",
    "Session",
    "SessionStore",
    "CookieSessionStore",
    "RedisSessionStore",
    "PostgresSessionStore",
    "stored_id",
    "COOKIE_LIMIT",
]

"""PostgreSQL: the pool bound to the app, queries, transactions, error mapping and migrations."""

from .database import Database, Transaction
from .errors import (
    ConstraintViolation,
    DatabaseError,
    DatabaseUnavailable,
    InvalidValue,
    NulCharacter,
    PoolTimeout,
    StatementTimeout,
    UniqueViolation,
)
from .listening import Notification, NotificationGap, SubscriberTooSlow, Subscription
from .migrations import Migration, MigrationError, load_migrations, migrate, migration_status

__all__ = [
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
]

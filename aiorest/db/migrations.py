"""Numbered SQL migrations: ``migrations/0001_create_notes.sql``, applied in order, once.

Each applied version is recorded with the SHA-256 of its file. Each migration
runs in its own transaction, which holds a PostgreSQL advisory lock: runners
are serialised, so several workers starting at once apply each migration
exactly once, and no lock outlives a transaction (behind PgBouncer in
transaction mode, or when a runner is cancelled). A file
changed after it was applied is an error, never silently skipped — unless the
new text names the checksum of the text that was applied in a leading comment,
``-- aiorest:supersedes <sha256>``: its author vouches that the new text, run
where the old one ran, would change nothing, so a database that recorded the
old text counts it as applied (and keeps that record). Only the named texts are
accepted; any other change is still an error.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from .database import Database, Transaction

__all__ = ["Migration", "MigrationError", "load_migrations", "migrate", "migration_status"]

_FILE_RE = re.compile(r"^(\d+)_([\w\-]+)\.sql$")
_SUPERSEDES_RE = re.compile(r"--\s*aiorest:supersedes\b(.*)")
_SHA256_RE = re.compile(r"[0-9a-f]{64}")
_LOCK_KEY = 0x6169_6F72_6573_74  # "aiorest": one advisory lock for every runner

_CREATE_TABLE = """
CREATE TABLE IF NOT EXISTS aiorest_migrations (
    version integer PRIMARY KEY,
    name text NOT NULL,
    checksum text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""


class MigrationError(Exception):
    """The migrations folder and the database disagree."""


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    path: Path
    sql: str
    supersedes: frozenset[str] = frozenset()  # checksums of earlier texts this one replaces

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()

    def matches(self, recorded: str) -> bool:
        """Whether ``recorded``, a checksum in aiorest_migrations, is this text or one it supersedes."""
        return recorded == self.checksum or recorded in self.supersedes


def _superseded(file_name: str, sql: str) -> frozenset[str]:
    """The checksums named by ``-- aiorest:supersedes`` in the comment lines that open ``sql``."""
    checksums: set[str] = set()
    for line in sql.splitlines():
        line = line.strip()
        if not line:
            continue
        if not line.startswith("--"):
            break
        match = _SUPERSEDES_RE.match(line)
        if match is None:
            continue
        named = match.group(1).split()
        if not named or not all(_SHA256_RE.fullmatch(checksum) for checksum in named):
            raise MigrationError(
                f"{file_name}: '-- aiorest:supersedes' takes the SHA-256 of the replaced text, "
                f"64 lowercase hex digits (sha256sum prints it), got {line!r}"
            )
        checksums.update(named)
    return frozenset(checksums)


# aiorest's own migrations: ``aiorest:NAME`` is the folder aiorest/sql/NAME. They are
# recorded under negative versions (-1 for 0001), which an app's NNNN files never
# have, so that they share aiorest_migrations with the app's without colliding.
BUILTIN_PREFIX = "aiorest:"
_BUILTIN_DIR = Path(__file__).parent / "sql"


def load_migrations(directory: str | Path) -> list[Migration]:
    """The ``NNNN_name.sql`` files of ``directory``, by version.

    ``"aiorest:sessions"`` names the migrations aiorest ships (here, the table of
    :class:`~aiorest.PostgresSessionStore`), recorded under negative versions.
    """
    sign = 1
    if isinstance(directory, str) and directory.startswith(BUILTIN_PREFIX):
        name = directory[len(BUILTIN_PREFIX) :]
        shipped = sorted(path.name for path in _BUILTIN_DIR.iterdir() if path.is_dir())
        if name not in shipped:
            raise MigrationError(f"aiorest ships no migrations named {name!r}; it has: {', '.join(shipped)}")
        directory, sign = _BUILTIN_DIR / name, -1
    directory = Path(directory)
    if not directory.is_dir():
        raise MigrationError(f"no migrations folder at {directory}")
    migrations: dict[int, Migration] = {}
    for path in sorted(directory.iterdir()):
        if path.suffix != ".sql":
            continue
        match = _FILE_RE.match(path.name)
        if match is None:
            raise MigrationError(f"{path.name}: migration files are named NNNN_name.sql")
        version = int(match.group(1))
        if version in migrations:
            raise MigrationError(f"{path.name}: version {version} is also {migrations[version].path.name}")
        sql = path.read_text(encoding="utf-8")
        migrations[version] = Migration(sign * version, match.group(2), path, sql, _superseded(path.name, sql))
    return [migrations[v] for v in sorted(migrations)]


async def _applied(conn: Transaction) -> dict[int, str]:
    await conn.execute_script(_CREATE_TABLE)
    rows = await conn.fetchall("SELECT version, checksum FROM aiorest_migrations ORDER BY version")
    return {row["version"]: row["checksum"] for row in rows}


def _check_edited(migrations: list[Migration], applied: dict[int, str]) -> None:
    for migration in migrations:
        recorded = applied.get(migration.version)
        if recorded is not None and not migration.matches(recorded):
            raise MigrationError(
                f"{migration.path.name} was changed after it was applied; add a new migration "
                "instead of editing an applied one, or, if the new text changes nothing where the "
                f"old one ran, name the old text with '-- aiorest:supersedes {recorded}'"
            )


async def migrate(db: Database, directory: str | Path) -> list[Migration]:
    """Apply pending migrations; returns those applied by this call.

    Each migration runs in a transaction that first takes the advisory lock
    (released with the transaction: nothing outlives it, which also holds behind
    PgBouncer in transaction mode) and reads again what is applied, so runners
    that start together apply each migration once, in order.
    """
    migrations = load_migrations(directory)
    done: list[Migration] = []
    while True:
        async with db.transaction() as tx:
            await tx.fetchval("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
            applied = await _applied(tx)
            _check_edited(migrations, applied)
            pending = [migration for migration in migrations if migration.version not in applied]
            if not pending:
                return done
            migration = pending[0]
            await tx.execute_script(migration.sql)
            await tx.execute(
                "INSERT INTO aiorest_migrations (version, name, checksum) VALUES (%s, %s, %s)",
                (migration.version, migration.name, migration.checksum),
            )
        done.append(migration)


async def migration_status(db: Database, directory: str | Path) -> list[tuple[Migration, str]]:
    """Each migration with ``"applied"``, ``"pending"`` or ``"edited"``."""
    migrations = load_migrations(directory)
    async with db.connection() as conn:
        applied = await _applied(conn)
    status = []
    for migration in migrations:
        recorded = applied.get(migration.version)
        state = "pending" if recorded is None else "applied" if migration.matches(recorded) else "edited"
        status.append((migration, state))
    return status

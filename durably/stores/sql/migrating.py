"""Bringing a database's durably schema to this durably's version (durably.stores.sql.schema
holds the versions' statements), and reading which version it is at, for both stores: their
openers call these in a transaction of their own."""

from __future__ import annotations

import shlex
from typing import Any, Protocol

from durably.errors import ConfigError, SchemaTooOld
from durably.stores.sql.rows import check_version
from durably.stores.sql.schema import CREATE_META, LATEST_VERSION, migrations

__all__ = ["check_schema", "migrate", "not_current", "schema_version"]

# Whether the version table exists, asked without failing (and so aborting the transaction).
# On PostgreSQL, read from pg_class: to_regclass may answer from a cache that has not yet
# heard of a table another opener made while this one waited for the migration lock.
_HAS_META = {
    "sqlite": "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'durably_meta'",
    "postgres": "SELECT count(*) FROM pg_catalog.pg_class"
    " WHERE relname = 'durably_meta' AND pg_catalog.pg_table_is_visible(oid)",
}


class _Connection(Protocol):
    """What `migrate` needs of a connection: sqlite3's and psycopg's both have it."""

    def execute(self, sql: Any, params: Any = ..., /) -> Any: ...


def migrate(db: _Connection, dialect: str, url: str) -> int:
    """Bring the schema up to date, inside the caller's transaction: read the version, refuse
    one newer than this durably knows, apply the migrations it lacks and record the version.
    Returns the version it found (0: none). A current schema is only read, never changed: a
    role that may read and write rows, and not change the schema, opens it."""
    mark = "?" if dialect == "sqlite" else "%s"
    current = schema_version(db, dialect)
    check_version(current, LATEST_VERSION, url)
    if current == 0:
        db.execute(CREATE_META)
    for version, statements in migrations(dialect, current):
        for statement in statements:
            db.execute(statement)
        db.execute(
            f"INSERT INTO durably_meta (key, value) VALUES ('schema_version', {mark})"
            " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (str(version),),
        )
    return current


def schema_version(db: _Connection, dialect: str) -> int:
    """The version of the durably schema in the database (0: it holds none), read without
    changing anything."""
    if not db.execute(_HAS_META[dialect]).fetchone()[0]:
        return 0
    row = db.execute("SELECT value FROM durably_meta WHERE key = 'schema_version'").fetchone()
    return int(row[0]) if row else 0


def check_schema(db: _Connection, dialect: str, url: str) -> None:
    """Refuse, without changing anything, a database that holds no durably store, one that a
    newer durably migrated, or one that an older durably left behind (this durably reads and
    writes the columns of its own version: `durably migrate` brings it up to date)."""
    current = schema_version(db, dialect)
    if current < LATEST_VERSION:
        raise not_current(current, url)
    check_version(current, LATEST_VERSION, url)


def not_current(found: int, url: str, why: str = "") -> ConfigError | SchemaTooOld:
    """The error for a schema at version `found`, older than this durably's, that its opener
    does not bring up to date (`why`: what kept it from doing so, if it tried): what it is, and
    the command that migrates it."""
    command = f"durably migrate --store {shlex.quote(url)}"
    if found == 0:
        return ConfigError(
            f"{url} is not a durably store: it has no durably tables{why}. Check the URL; "
            f"`{command}` creates them (so do a worker and `durably start`, unless "
            "$DURABLY_MIGRATE is never)"
        )
    owner = " as the database's owner" if url.startswith("postgres") else ""
    return SchemaTooOld(
        f"the durably schema in {url} is at version {found}, but this durably needs version "
        f"{LATEST_VERSION}{why}: run `{command}`{owner}, then try again"
    )

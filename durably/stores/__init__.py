"""Stores: where runs and their histories live. `open_store` picks one from a URL."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlsplit

from durably.codec.encryption import Keyring
from durably.errors import ConfigError
from durably.stores.encrypted import EncryptedStore
from durably.stores.protocol import Store
from durably.stores.records import (
    Checkpoint,
    Claim,
    Delivery,
    Lease,
    Message,
    NewRun,
    RunRecord,
    Sent,
    SentOutcome,
)
from durably.stores.sql.schema import LATEST_VERSION

if TYPE_CHECKING:
    from durably.stores.postgres.store import PostgresStore
    from durably.stores.sqlite.store import SQLiteStore

__all__ = [
    "DEFAULT_URL",
    "Checkpoint",
    "Claim",
    "Delivery",
    "Lease",
    "Message",
    "Migration",
    "NewRun",
    "RunRecord",
    "Sent",
    "SentOutcome",
    "Store",
    "may_migrate",
    "migrate_store",
    "open_store",
    "resolve_url",
]

DEFAULT_URL = "sqlite:///durably.db"
_MIGRATE_SETTINGS = ("auto", "never")


@dataclass(frozen=True, slots=True)
class Migration:
    """What `migrate_store` found and left: the schema's versions before (0: there was none)
    and after."""

    url: str  # safe to print: the password is redacted
    found: int
    now: int


def resolve_url(url: str | None) -> str:
    """The URL to use: the one given, else $DURABLY_STORE, else ./durably.db."""
    return url or os.environ.get("DURABLY_STORE") or DEFAULT_URL


def open_store(
    url: str | None = None, *, create: bool = True, keys: Keyring | None = None
) -> Store:
    """Open (and migrate) the store a URL names.

    sqlite:///relative/path.db (relative to the current directory), sqlite:////absolute/path.db
    (?synchronous=NORMAL to trade durability of the last commits on power loss for speed), a
    bare file path, or postgresql://user:password@host:port/database (?pgbouncer=transaction
    behind a transaction pooler, with listen_url= straight to the server for wake-ups:
    durably.stores.postgres.options).

    `create=False` opens only a durably store that exists, as it is: a SQLite file that does
    not exist, or a database without durably's tables, is a ConfigError naming it, a schema an
    older durably left is SchemaTooOld (naming `durably migrate`), and nothing is created or
    migrated. The CLI opens stores so, except to start a run. A current schema is opened
    without DDL either way.

    Payloads are encrypted at rest with `keys`, or with the keys DURABLY_KEYS or
    DURABLY_KEYS_FILE give (durably.codec.encryption); with neither, they are stored as JSON.
    """
    keys = keys if keys is not None else Keyring.from_environment()
    store = _open(url, create=create)
    return store if keys is None else EncryptedStore(store, keys)


def migrate_store(url: str | None = None) -> Migration:
    """Create or migrate the schema of the store a URL names, whatever $DURABLY_MIGRATE says:
    what `durably migrate` does, as a role that may change the schema."""
    store = _open(url, create=True)
    try:
        keep = getattr(store, "keep_partitions", None)  # PostgreSQL's (SQLite has none)
        if keep is not None:  # the history's partitions of the days ahead
            keep(time.time())
        return Migration(store.url, found=store.schema_found, now=LATEST_VERSION)
    finally:
        store.close()


def may_migrate() -> bool:
    """Whether the workers, the server and `durably start` create and migrate the schema they
    open: yes, unless $DURABLY_MIGRATE is `never` (their role may only read and write rows;
    `durably migrate` changes the schema, as its owner)."""
    setting = os.environ.get("DURABLY_MIGRATE", "").strip().lower() or "auto"
    if setting not in _MIGRATE_SETTINGS:
        raise ConfigError(
            f"$DURABLY_MIGRATE is {setting!r}: use auto (the default: the workers, the server "
            "and `durably start` create and migrate the schema) or never (they only check it, "
            "and `durably migrate` changes it)"
        )
    return setting == "auto"


def _open(url: str | None, *, create: bool) -> PostgresStore | SQLiteStore:
    url = resolve_url(url)
    scheme = url.split("://", 1)[0] if "://" in url else ""
    if scheme in ("postgres", "postgresql"):
        from durably.stores.postgres.store import PostgresStore

        return PostgresStore(url, create=create)
    if scheme in ("sqlite", ""):
        return _open_sqlite(url, create=create)
    raise ConfigError(
        f"durably cannot open a store at {url!r}: use sqlite:///path/to/file.db "
        "or postgresql://user@host/database"
    )


def _open_sqlite(url: str, *, create: bool) -> SQLiteStore:
    from durably.stores.sqlite.store import SQLiteStore

    if "://" not in url:
        return SQLiteStore(Path(url), create=create)
    parts = urlsplit(url)
    path = parts.path[1:] if parts.path.startswith("/") else parts.path
    if not path:
        raise ConfigError(f"the SQLite URL {url!r} names no file: write sqlite:///durably.db")
    options = {key: values[-1] for key, values in parse_qs(parts.query).items()}
    unknown = set(options) - {"synchronous"}
    if unknown:
        raise ConfigError(f"unknown SQLite store option(s) {sorted(unknown)} in {url!r}")
    synchronous = options.get("synchronous", "FULL")
    return SQLiteStore(Path(path), synchronous=synchronous, create=create)

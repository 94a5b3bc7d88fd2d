"""What a PostgreSQL store URL says to durably rather than to libpq, taken out of it before
libpq (which refuses query parameters it does not know) sees the URL:

- `synchronous_commit=off` (or another level): how durably's connections commit;
- `pgbouncer=transaction`: the URL reaches the server through a pooler in transaction mode
  (PgBouncer's `pool_mode = transaction`, or any pooler that hands a server connection to
  another client between transactions), so nothing may live on a session: no server-side
  prepared statements, no session SET, and no LISTEN through it;
- `listen_url=...`: where to LISTEN for wake-ups instead of the URL itself, a connection
  straight to the same database (percent-encoded if it has `&` or `%` in it). Behind a
  transaction pooler without one, nothing listens: workers and waiters poll;
- `history_partition=7d` (1d by default): how wide a range of run births each partition of
  the history this process makes holds (durably.stores.postgres.partitions).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import unquote, urlsplit, urlunsplit

from psycopg import ProgrammingError
from psycopg.conninfo import conninfo_to_dict

from durably.durations import parse_duration
from durably.errors import ConfigError
from durably.stores.postgres.partitions import DEFAULT_WIDTH, check_width

__all__ = ["POOL_MODES", "SYNCHRONOUS_COMMIT", "StoreOptions", "store_options"]

SYNCHRONOUS_COMMIT = ("on", "off", "local", "remote_write", "remote_apply")
POOL_MODES = ("session", "transaction")  # session pooling keeps a server connection a client's


@dataclass(frozen=True, slots=True)
class StoreOptions:
    url: str  # for libpq: without durably's options
    synchronous_commit: str | None  # None: the server's (role's, database's) setting
    transaction_pooling: bool  # behind a pooler in transaction mode
    listen_url: str | None  # where LISTEN connects; None: nowhere (wake-ups by polling only)
    history_partition: timedelta = DEFAULT_WIDTH  # the births a history partition holds


def store_options(
    url: str,
    *,
    synchronous_commit: str | None = None,
    pgbouncer: str | None = None,
    listen_url: str | None = None,
) -> StoreOptions:
    """The options of a store URL; a keyword given wins over the URL's. ConfigError for a
    value durably does not know, or a combination that cannot work."""
    url, from_url = without_option(url, "synchronous_commit")
    synchronous_commit = synchronous_commit or from_url
    url, from_url = without_option(url, "pgbouncer")
    pool_mode = (pgbouncer or from_url or "session").strip().lower()
    url, from_url = without_option(url, "listen_url")
    listen_url = listen_url or from_url
    url, width = without_option(url, "history_partition")
    if synchronous_commit is not None and synchronous_commit not in SYNCHRONOUS_COMMIT:
        raise ConfigError(
            f"synchronous_commit={synchronous_commit!r} is not a PostgreSQL setting: use one "
            f"of {', '.join(SYNCHRONOUS_COMMIT)} (on, the default, is the durable one)"
        )
    if pool_mode not in POOL_MODES:
        why = (
            "statement pooling allows no transaction of more than one statement, which "
            "durably's writes need; "
            if pool_mode == "statement"
            else ""
        )
        raise ConfigError(
            f"pgbouncer={pool_mode!r} is not a pool mode durably runs behind: {why}use "
            "transaction (PgBouncer's pool_mode = transaction) or session (the default: "
            "nothing changes)"
        )
    pooled = pool_mode == "transaction"
    if pooled and synchronous_commit is not None:
        raise ConfigError(
            f"synchronous_commit={synchronous_commit} cannot be set through a transaction "
            "pooler (pgbouncer=transaction): a SET stays on the server connection that ran it, "
            "which serves other clients next. Set it on the role instead, for every connection "
            f"of it: ALTER ROLE <durably's role> SET synchronous_commit = {synchronous_commit}"
        )
    if listen_url is not None:
        try:
            conninfo_to_dict(listen_url)
        except ProgrammingError as exc:
            raise ConfigError(
                f"listen_url is not a PostgreSQL URL ({' '.join(str(exc).split())}): give a "
                "URL straight to the store's database, percent-encoded in the store's URL"
            ) from None
    elif not pooled:
        listen_url = url
    return StoreOptions(url, synchronous_commit, pooled, listen_url, _width(width))


def _width(text: str | None) -> timedelta:
    if text is None:
        return DEFAULT_WIDTH
    try:
        return check_width(parse_duration(text, what="history_partition"))
    except ValueError as exc:
        raise ConfigError(f"history_partition={text!r} in the store URL: {exc}") from None


def without_option(url: str, name: str) -> tuple[str, str | None]:
    """The URL without the query option `name` (which libpq would refuse), and its value.

    The other options are kept byte for byte: libpq decodes them itself."""
    parts = urlsplit(url)
    kept, value = [], None
    for pair in parts.query.split("&") if parts.query else []:
        key, _, raw = pair.partition("=")
        if unquote(key) == name:
            value = unquote(raw)
        else:
            kept.append(pair)
    return urlunsplit(parts._replace(query="&".join(kept))), value

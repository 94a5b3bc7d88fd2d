"""PostgreSQL connections that outlive a server restart.

A pooled connection that died with the server (a restart, a crash, a terminated backend) is
found out by the statement that uses it: nothing is spent checking connections that work.
Then the pool drops its dead idle connections, and the work is tried once more on a fresh
connection. What the second try does is the caller's choice: a read or an idempotent write
runs again as it was; a write whose outcome is unknown re-reads the state first. If the
second try fails too, the caller gets StoreUnavailable, which a worker retries with backoff.

psycopg prepares a statement on the server once a connection has run it 5 times. Behind a
pooler in transaction mode that statement stays on one server connection while the client
moves on to others: `prepare=False` (pgbouncer=transaction in the store URL) turns it off,
and without it such a failure says in the log what to add to the URL.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from contextlib import suppress
from datetime import timedelta
from typing import Any, TypeVar

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from durably.errors import StoreUnavailable

__all__ = ["Connections", "redact"]

T = TypeVar("T")
Work = Callable[[psycopg.Connection[Any]], T]
log = logging.getLogger("durably.store")

# SQLSTATEs that say the session is over: class 08 (connection exception), and the server
# shutting down, crashing, or not accepting connections yet. A query cancel (57014) or a
# serialization failure (40001) is an OperationalError too, but leaves the connection usable.
_SESSION_OVER = ("57P01", "57P02", "57P03")
# What psycopg's own prepared statements (named _pg3_N) run into on a server connection
# other clients share: one gone ("does not exist"), or one of another client's ("exists").
_PREPARED_ELSEWHERE = (
    psycopg.errors.InvalidSqlStatementName,
    psycopg.errors.DuplicatePreparedStatement,
)


class Connections:
    """A psycopg pool in autocommit, and `run()`, which rides out one lost connection."""

    def __init__(
        self,
        url: str,
        shown_url: str,
        *,
        size: int,
        connect_timeout: timedelta,
        configure: Callable[[psycopg.Connection[Any]], None],
        prepare: bool = True,
    ) -> None:
        self.url = shown_url
        self._hinted = not prepare  # said once what a lost prepared statement means
        wait = connect_timeout.total_seconds()
        settings: dict[str, Any] = {"autocommit": True}  # a one-statement write: a transaction
        if not prepare:
            settings["prepare_threshold"] = None  # never: behind a transaction pooler
        self._pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
            url,
            min_size=1,
            max_size=max(1, size),
            open=False,
            timeout=wait,
            # The pool reconnects in the background with a doubling pause (1 s, 2 s, 4 s...).
            # Giving up after `wait` keeps that pause short after a long outage: the next
            # request then starts a fresh attempt at once, so the store is used again within
            # seconds of coming back instead of after a pause grown to minutes.
            reconnect_timeout=wait,
            name="durably",
            kwargs=settings,
            configure=configure,
        )
        try:  # one plain connection first: a refused one is reported at once, with why
            psycopg.connect(url, connect_timeout=max(1, int(wait))).close()
        except psycopg.Error as exc:
            raise StoreUnavailable(
                f"cannot reach the PostgreSQL store at {shown_url}: {_reason(exc)}; "
                "is the server running and the URL right?"
            ) from None
        try:
            self._pool.open(wait=True, timeout=wait)
        except PoolTimeout as exc:
            self._pool.close()
            raise StoreUnavailable(
                f"cannot reach the PostgreSQL store at {shown_url} within {wait:g}s; "
                "is the server running and the URL right?"
            ) from exc

    def run(
        self,
        work: Work[T],
        *,
        transaction: bool = False,
        after_loss: Work[T] | None = None,
    ) -> T:
        """work(db) on a pooled connection (in one transaction if `transaction`).

        If the connection turns out to be dead, run `after_loss` (default: `work` again) on
        a fresh one. `work` may have been applied when the connection broke (during COMMIT,
        or before its answer arrived): only a `work` that is safe to repeat may go without
        an `after_loss` that finds out what happened.
        """
        try:
            return self._once(work, transaction)
        except _ConnectionLost as lost:
            log.info("a connection to %s was lost (%s); trying on a fresh one", self.url, lost)
            self._pool.check()  # drop every idle connection that died along with this one
        try:
            return self._once(after_loss or work, transaction)
        except _ConnectionLost as again:
            raise StoreUnavailable(
                f"the PostgreSQL store at {self.url} is unavailable: {again}"
            ) from again.__cause__

    def close(self) -> None:
        self._pool.close()

    def _once(self, work: Work[T], transaction: bool) -> T:
        try:
            with self._pool.connection() as db:
                try:
                    if not transaction:
                        return work(db)
                    with db.transaction():
                        return work(db)
                except psycopg.OperationalError as exc:
                    if not _connection_lost(db, exc):
                        raise
                    with suppress(psycopg.Error):
                        db.close()  # so that the pool replaces it rather than hands it out
                    raise _ConnectionLost(_reason(exc)) from exc
        except (psycopg.OperationalError, PoolTimeout) as exc:
            raise StoreUnavailable(
                f"the PostgreSQL store at {self.url} is unavailable: {_reason(exc)}"
            ) from exc
        except psycopg.errors.ReadOnlySqlTransaction as exc:
            # A standby (before a failover promotes it) or a database set read-only: no write
            # was made, and the same write succeeds once the URL leads to a primary again.
            raise StoreUnavailable(
                f"the PostgreSQL store at {self.url} takes no writes: {_reason(exc)}. It is a "
                "standby or a read-only database (default_transaction_read_only); point the "
                "store URL at the primary, or wait for the failover to promote this one"
            ) from exc
        except _PREPARED_ELSEWHERE as exc:
            if not self._hinted and "_pg3_" in str(exc):
                self._hinted = True
                log.warning(
                    "%s on %s: is it a pooler in transaction mode (PgBouncer's pool_mode = "
                    "transaction)? Then add ?pgbouncer=transaction to the store URL, which "
                    "turns prepared statements off",
                    _reason(exc),
                    self.url,
                )
            raise


class _ConnectionLost(Exception):
    """The connection a statement ran on is dead; the statement may or may not have applied."""


def _connection_lost(db: psycopg.Connection[Any], error: psycopg.OperationalError) -> bool:
    """Whether `error` means the connection itself is gone, not just this statement failed."""
    state = error.sqlstate or ""
    return db.closed or db.broken or state.startswith("08") or state in _SESSION_OVER


def _reason(error: BaseException) -> str:
    """The error's message on one line (libpq's run over several), without passwords."""
    return redact(" ".join(str(error).split()))


def redact(url: str) -> str:
    """The URL with its password replaced by ***, safe for logs and errors."""
    url = re.sub(r"(://[^:/@]*:)[^@/]*@", r"\1***@", url)
    return re.sub(r"(password=)[^&\s]*", r"\1***", url)

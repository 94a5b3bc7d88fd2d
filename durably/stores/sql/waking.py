"""Making pending runs due now, for a gate that opened for them: one implementation for both
stores (each wakes its workers after, as it does for a message: durably.stores.sql.inbox)."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from durably.stores.sql.reads import Connection, Dialect
from durably.stores.sql.rows import ts

__all__ = ["wake"]

_IDS_PER_STATEMENT = 500  # under SQLite's limit on a statement's parameters


def wake(db: Connection, dialect: Dialect, run_ids: Collection[str], *, now: datetime) -> int:
    """Inside the caller's write transaction, make those of `run_ids` that are pending and
    wait for later (or for a message only) due now; return how many. A running run's
    available_at is its lease's expiry, and a parked run's its deadline: both are left be."""
    mark, at = dialect.mark, ts(now)
    ids = sorted(set(run_ids))
    woken = 0
    for first in range(0, len(ids), _IDS_PER_STATEMENT):
        which, params = dialect.one_of("id", ids[first : first + _IDS_PER_STATEMENT])
        woken += db.execute(
            f"UPDATE durably_runs SET available_at = {mark}"
            f" WHERE {which} AND status = 'pending'"
            f" AND (available_at IS NULL OR available_at > {mark})",
            [at, *params, at],
        ).rowcount
    return woken

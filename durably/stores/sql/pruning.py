"""Deleting ended runs past their retention, the same SQL for both stores: a batch of runs
that ended (completed, failed, timed out, cancelled) before a time, with their events, any
messages left in their inbox, their attributes and their delivered webhook deliveries, in one
transaction. A parked run
(needs_attention, compensation_failed), a paused one and one still to run are never
deleted."""

from __future__ import annotations

from datetime import datetime

from durably.core.status import FINAL
from durably.stores.sql import attributes, outputs
from durably.stores.sql.reads import Connection, Dialect
from durably.stores.sql.rows import ts

__all__ = ["prunable", "prune"]


def prune(db: Connection, dialect: Dialect, before: datetime, *, limit: int) -> int:
    """Delete up to `limit` runs that ended before `before`; how many were deleted. Through
    the (status, updated_at) index: oldest first."""
    ended, params = dialect.one_of("status", sorted(FINAL))
    mark = dialect.mark
    rows = db.execute(
        f"SELECT id FROM durably_runs WHERE {ended} AND updated_at < {mark}"
        f" ORDER BY updated_at LIMIT {mark}",
        [*params, ts(before), limit],
    ).fetchall()
    ids = [row[0] for row in rows]
    if not ids:
        return 0
    which, more = dialect.one_of("run_id", ids)
    db.execute(f"DELETE FROM durably_events WHERE {which}", more)
    db.execute(f"DELETE FROM durably_inbox WHERE {which}", more)
    runs, more = dialect.one_of("id", ids)
    # the status again: a run a person acted on since the SELECT is no longer deleted
    deleted = db.execute(f"DELETE FROM durably_runs WHERE {runs} AND {ended}", [*more, *params])
    count = int(deleted.rowcount)
    attributes.forget(db, dialect, ids)
    outputs.forget(db, dialect, ids)
    # their webhook deliveries that were delivered (a due one is still to send, a dead one
    # waits for a person in the dead-letter list)
    db.execute(f"DELETE FROM durably_deliveries WHERE {which} AND state = 'delivered'", more)
    return count


def prunable(db: Connection, dialect: Dialect, before: datetime) -> int:
    """How many runs ended before `before`: what `prune` would delete, batch after batch."""
    ended, params = dialect.one_of("status", sorted(FINAL))
    row = db.execute(
        f"SELECT count(*) FROM durably_runs WHERE {ended} AND updated_at < {dialect.mark}",
        [*params, ts(before)],
    ).fetchone()
    return int(row[0])

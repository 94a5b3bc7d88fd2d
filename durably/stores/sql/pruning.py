"""Deleting ended runs past their retention, the same SQL for both stores: a batch of runs
that ended (completed, failed, timed out, cancelled) before a time, with their events, any
messages left in their inbox, their attributes and their delivered webhook deliveries, in one
transaction. A parked run (needs_attention, compensation_failed), a paused one and one still
to run are never deleted. On PostgreSQL, runs whose history partition can be dropped whole
are deleted first, by durably.stores.postgres.partitions, with this module's `delete_runs`."""

from __future__ import annotations

from datetime import datetime

from durably.core.status import FINAL
from durably.stores.sql import attributes, outputs
from durably.stores.sql.reads import Connection, Dialect
from durably.stores.sql.rows import ts
from durably.stores.sql.schema import BIRTH

__all__ = ["delete_runs", "prunable", "prune"]


def prune(db: Connection, dialect: Dialect, before: datetime, *, limit: int) -> int:
    """Delete up to `limit` runs that ended before `before`; how many were deleted. Through
    the (status, updated_at) index: oldest first."""
    ended, params = dialect.one_of("status", sorted(FINAL))
    mark = dialect.mark
    birth = f", {BIRTH}" if dialect.partitioned else ""
    rows = db.execute(
        f"SELECT id{birth} FROM durably_runs WHERE {ended} AND updated_at < {mark}"
        f" ORDER BY updated_at LIMIT {mark}",
        [*params, ts(before), limit],
    ).fetchall()
    if not rows:
        return 0
    deleted = delete_runs(db, dialect, [row[0] for row in rows])
    if not deleted:
        return 0
    which, more = dialect.one_of("run_id", deleted)
    if dialect.partitioned:  # each run's events in the partition of its birth alone
        births = [row[1] for row in rows if row[0] in set(deleted)]
        which, more = f"{which} AND born = ANY({mark})", [*more, births]
    db.execute(f"DELETE FROM durably_events WHERE {which}", more)
    return len(deleted)


def delete_runs(db: Connection, dialect: Dialect, ids: list[str]) -> list[str]:
    """Delete those of these runs that have ended, with any messages left in their inbox,
    their attributes, what they published and their delivered webhook deliveries; not their
    events. The ids of the runs deleted: a run a person acted on since it was chosen is not
    (its status is read again), nor is anything of it."""
    ended, params = dialect.one_of("status", sorted(FINAL))
    runs, more = dialect.one_of("id", ids)
    rows = db.execute(
        f"DELETE FROM durably_runs WHERE {runs} AND {ended} RETURNING id", [*more, *params]
    ).fetchall()
    deleted = [row[0] for row in rows]
    if not deleted:
        return deleted
    which, more = dialect.one_of("run_id", deleted)
    db.execute(f"DELETE FROM durably_inbox WHERE {which}", more)
    attributes.forget(db, dialect, deleted)
    outputs.forget(db, dialect, deleted)
    # their webhook deliveries that were delivered (a due one is still to send, a dead one
    # waits for a person in the dead-letter list)
    db.execute(f"DELETE FROM durably_deliveries WHERE {which} AND state = 'delivered'", more)
    return deleted


def prunable(db: Connection, dialect: Dialect, before: datetime) -> int:
    """How many runs ended before `before`: what `prune` would delete, batch after batch."""
    ended, params = dialect.one_of("status", sorted(FINAL))
    row = db.execute(
        f"SELECT count(*) FROM durably_runs WHERE {ended} AND updated_at < {dialect.mark}",
        [*params, ts(before)],
    ).fetchone()
    return int(row[0])

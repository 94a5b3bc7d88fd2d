"""What a metrics scrape asks of a store, the same queries for both stores: runs by status,
the creation time of the oldest run not ended, and the due runs waiting to be claimed; and
what the dashboard's chart of the last hour asks: runs ended per minute."""

from __future__ import annotations

from datetime import datetime

from durably.core.status import FINAL, PARKED, RunStatus
from durably.stores.records import Ended, RunStats
from durably.stores.sql.reads import Connection, Dialect
from durably.stores.sql.rows import from_ts, ts
from durably.stores.sql.tally import Tally

__all__ = ["activity", "run_stats"]


def run_stats(db: Connection, dialect: Dialect, tally: Tally, *, now: datetime) -> RunStats:
    """The runs not ended are read through the (status, updated_at) index, theirs alone; the
    ended ones, the bulk of a store's runs, are counted by `tally` (durably.stores.sql.tally):
    neither grows with how many runs ended."""
    mark, at = dialect.mark, ts(now)
    live, params = dialect.one_of("status", _LIVE)
    rows = db.execute(
        "SELECT status, count(*), min(created_at),"
        f" sum(CASE WHEN status = 'pending' AND available_at <= {mark} THEN 1 ELSE 0 END),"
        f" min(CASE WHEN status = 'pending' AND available_at <= {mark} THEN available_at END),"
        f" sum(CASE WHEN status = 'running' AND available_at <= {mark} THEN 1 ELSE 0 END)"
        f" FROM durably_runs WHERE {live} GROUP BY status",
        [at, at, at, *params],
    ).fetchall()
    by_status = {str(status): int(count) for status, count, *_ in rows}
    by_status |= tally.ended(db, dialect, now=now)
    open_since = [created for _, _, created, *_ in rows]
    due = sum(int(row[3] or 0) for row in rows)
    oldest = [row[4] for row in rows if row[4] is not None]
    expired = sum(int(row[5] or 0) for row in rows)
    # The named queues' runs that are due or hold a slot, through their own index.
    queues = db.execute(
        "SELECT queue,"
        f" sum(CASE WHEN status = 'pending' AND available_at <= {mark} THEN 1 ELSE 0 END),"
        f" sum(CASE WHEN status = 'running' AND available_at > {mark} THEN 1 ELSE 0 END)"
        " FROM durably_runs WHERE available_at IS NOT NULL AND queue IS NOT NULL GROUP BY queue",
        (at, at),
    ).fetchall()
    return RunStats(
        by_status,
        from_ts(min(open_since)) if open_since else None,
        due,
        from_ts(min(oldest)) if oldest else None,
        expired,
        {str(queue): int(due or 0) for queue, due, _ in queues},
        {str(queue): int(running or 0) for queue, _, running in queues},
    )


_LIVE = sorted(str(status) for status in RunStatus if status not in FINAL)


def activity(db: Connection, dialect: Dialect, *, since: datetime) -> list[Ended]:
    """How many runs ended (or were parked) in each minute since `since`, by status: one
    query over the (status, updated_at) index."""
    statuses, params = dialect.one_of("status", sorted(str(s) for s in FINAL | PARKED))
    minute = dialect.whole.format("updated_at / 60")
    rows = db.execute(
        f"SELECT {minute} AS minute, status, count(*) FROM durably_runs"
        f" WHERE {statuses} AND updated_at >= {dialect.mark} GROUP BY minute, status",
        [*params, ts(since)],
    ).fetchall()
    return sorted(Ended(from_ts(int(row[0]) * 60), str(row[1]), int(row[2])) for row in rows)

"""The audit trail's queries, one implementation for both stores: an entry recorded inside
the transaction of the write that does its action (an action of a bulk job also settles the
job's run there, once), and the trail read back newest first, a bounded page at a time
(durably.core.audit)."""

from __future__ import annotations

from datetime import datetime

from durably.core.audit import Audit, AuditEntry
from durably.stores.sql import bulk
from durably.stores.sql.reads import Connection, Dialect
from durably.stores.sql.rows import from_ts, ts

__all__ = ["record", "trail"]

_COLUMNS = "id, at, actor, action, via, run_id, workflow, detail"


def record(
    db: Connection, dialect: Dialect, entry: Audit, *, now: datetime, run_id: str | None = None
) -> None:
    """Append `entry`, inside the caller's write transaction; with `run_id`, the workflow is
    the run's, read from its row by the same statement. An entry of a bulk job settles the
    job's run as acted on, or raises AlreadySettled (the caller's transaction rolls back)."""
    mark = dialect.mark
    values = (ts(now), entry.by, str(entry.action), str(entry.via))
    insert = "INSERT INTO durably_audit (at, actor, action, via, run_id, workflow, detail)"
    if run_id is None:
        db.execute(
            f"{insert} VALUES ({mark}, {mark}, {mark}, {mark}, NULL, NULL, {mark})",
            (*values, entry.detail),
        )
        return
    if entry.job is not None:
        bulk.mark_acted(db, dialect, entry.job, run_id, now=now)
    db.execute(
        f"{insert} SELECT {mark}, {mark}, {mark}, {mark}, {mark},"
        f" (SELECT workflow FROM durably_runs WHERE id = {mark}), {mark}",
        (*values, run_id, run_id, entry.detail),
    )


def trail(
    db: Connection,
    dialect: Dialect,
    *,
    limit: int,
    before: tuple[datetime, int] | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    by: str | None = None,
    run_id: str | None = None,
) -> list[AuditEntry]:
    """Up to `limit` entries, newest first (ties by id, descending): those recorded at or
    after `since` and before `until`, by `by`, on `run_id`, and after `before` (the (at, id)
    of the last entry of the previous page) in that order. Only the filters given are
    written into the query, so that it walks the index that fits (by actor, by run, by time)."""
    mark = dialect.mark
    where: list[str] = []
    params: list[object] = []
    if by is not None:
        where.append(f"actor = {mark}")
        params.append(by)
    if run_id is not None:
        where.append(f"run_id = {mark}")
        params.append(run_id)
    if since is not None:
        where.append(f"at >= {mark}")
        params.append(ts(since))
    if until is not None:
        where.append(f"at < {mark}")
        params.append(ts(until))
    if before is not None:
        at = ts(before[0])
        where.append(f"at <= {mark} AND (at < {mark} OR id < {mark})")
        params += [at, at, before[1]]
    condition = f" WHERE {' AND '.join(where)}" if where else ""
    rows = db.execute(
        f"SELECT {_COLUMNS} FROM durably_audit{condition} ORDER BY at DESC, id DESC LIMIT {mark}",
        (*params, limit),
    )
    return [
        AuditEntry(id_, from_ts(at), actor, action, via, run, workflow, detail)
        for id_, at, actor, action, via, run, workflow, detail in rows
    ]

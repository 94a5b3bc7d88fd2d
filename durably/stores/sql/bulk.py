"""Bulk jobs' queries, one implementation for both stores (durably.core.bulk): a job made with
its runs selected in the same statement, the runs it has yet to settle, a run marked acted on
in the transaction of the action (with its audit entry), and the runs it skipped."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from durably.core.audit import Via
from durably.core.bulk import (
    AlreadySettled,
    BulkAction,
    BulkJob,
    BulkRun,
    Matching,
    NewBulkJob,
    Outcome,
    RunFilter,
)
from durably.core.status import RunStatus
from durably.stores.sql import reads
from durably.stores.sql.reads import Connection, Dialect
from durably.stores.sql.rows import from_ts, ts

__all__ = ["create", "job", "jobs", "mark_acted", "matching", "runs", "settle"]

_COLUMNS = (
    "id, action, filter, reason, actor, via, created_at, updated_at, finished_at, total, acted,"
    " skipped"
)


def create(
    db: Connection, dialect: Dialect, new: NewBulkJob, *, now: datetime
) -> tuple[BulkJob, bool]:
    """Make the job and select its runs, in the caller's transaction; or, if the same person
    has an unfinished job of the same action and filter, that job and False."""
    mark, at = dialect.mark, ts(now)
    made = db.execute(
        "INSERT INTO durably_bulk_jobs (id, action, filter, fingerprint, reason, actor, via,"
        f" created_at, updated_at) VALUES ({', '.join([mark] * 9)})"
        " ON CONFLICT (actor, fingerprint) WHERE finished_at IS NULL DO NOTHING RETURNING id",
        (
            new.id,
            str(new.action),
            new.filter.to_json(),
            new.fingerprint,
            new.reason,
            new.by,
            str(new.via),
            at,
            at,
        ),
    ).fetchone()
    if made is None:
        row = db.execute(
            f"SELECT {_COLUMNS} FROM durably_bulk_jobs WHERE actor = {mark}"
            f" AND fingerprint = {mark} AND finished_at IS NULL",
            (new.by, new.fingerprint),
        ).fetchone()
        return _job_of(row), False
    where, params = _selection(dialect, new.filter)
    db.execute(
        f"INSERT INTO durably_bulk_runs (job, run_id) SELECT {mark}, id FROM durably_runs{where}",
        [new.id, *params],
    )
    db.execute(
        "UPDATE durably_bulk_jobs SET total = (SELECT count(*) FROM durably_bulk_runs"
        f" WHERE job = {mark}) WHERE id = {mark}",
        (new.id, new.id),
    )
    _finish_if_settled(db, mark, new.id, at)
    found = job(db, dialect, new.id)
    assert found is not None
    return found, True


def matching(db: Connection, dialect: Dialect, run_filter: RunFilter, *, limit: int) -> Matching:
    """How many runs the filter matches now, by status, and the first `limit` of their ids."""
    where, params = _selection(dialect, run_filter)
    counts = db.execute(
        f"SELECT status, count(*) FROM durably_runs{where} GROUP BY status", params
    ).fetchall()
    first = db.execute(
        f"SELECT id FROM durably_runs{where} ORDER BY id LIMIT {dialect.mark}", [*params, limit]
    ).fetchall()
    return Matching({RunStatus(status): count for status, count in counts}, [r[0] for r in first])


def job(db: Connection, dialect: Dialect, job_id: str) -> BulkJob | None:
    row = db.execute(
        f"SELECT {_COLUMNS} FROM durably_bulk_jobs WHERE id = {dialect.mark}", (job_id,)
    ).fetchone()
    return None if row is None else _job_of(row)


def jobs(db: Connection, dialect: Dialect, *, limit: int, unfinished: bool) -> list[BulkJob]:
    """The newest first (only the unfinished ones, with `unfinished`)."""
    where = " WHERE finished_at IS NULL" if unfinished else ""
    rows = db.execute(
        f"SELECT {_COLUMNS} FROM durably_bulk_jobs{where}"
        f" ORDER BY created_at DESC, id DESC LIMIT {dialect.mark}",
        (limit,),
    ).fetchall()
    return [_job_of(row) for row in rows]


def runs(
    db: Connection, dialect: Dialect, job_id: str, *, outcome: Outcome | None, limit: int
) -> list[BulkRun]:
    """Up to `limit` of the job's runs settled so (None: not settled yet), by id."""
    mark = dialect.mark
    which = "outcome IS NULL" if outcome is None else f"outcome = {mark}"
    params: list[object] = [job_id] if outcome is None else [job_id, str(outcome)]
    rows = db.execute(
        f"SELECT run_id, outcome, note FROM durably_bulk_runs WHERE job = {mark} AND {which}"
        f" ORDER BY run_id LIMIT {mark}",
        [*params, limit],
    ).fetchall()
    return [BulkRun(run_id, None if o is None else Outcome(o), note) for run_id, o, note in rows]


def mark_acted(
    db: Connection, dialect: Dialect, job_id: str, run_id: str, *, now: datetime
) -> None:
    """Settle the job's run as acted on, inside the transaction of the action's write; if the
    job settled it already (or never selected it), AlreadySettled, which rolls the action
    back: a job acts on a run at most once."""
    mark = dialect.mark
    row = db.execute(
        f"UPDATE durably_bulk_runs SET outcome = '{Outcome.ACTED}' WHERE job = {mark}"
        f" AND run_id = {mark} AND outcome IS NULL RETURNING run_id",
        (job_id, run_id),
    ).fetchone()
    if row is None:
        raise AlreadySettled(
            f"bulk job {job_id!r} has settled run {run_id!r} already (or did not select it): "
            "it does not act on it again"
        )
    db.execute(
        f"UPDATE durably_bulk_jobs SET acted = acted + 1, updated_at = {mark} WHERE id = {mark}",
        (ts(now), job_id),
    )


def settle(
    db: Connection, dialect: Dialect, job_id: str, skipped: Mapping[str, str], *, now: datetime
) -> BulkJob | None:
    """Settle these runs of the job as skipped, with why (those it has not settled yet), and
    mark the job finished if none is left; the job as it is then."""
    mark, at = dialect.mark, ts(now)
    count = 0
    for run_id, note in sorted(skipped.items()):
        count += len(
            db.execute(
                f"UPDATE durably_bulk_runs SET outcome = '{Outcome.SKIPPED}', note = {mark}"
                f" WHERE job = {mark} AND run_id = {mark} AND outcome IS NULL RETURNING run_id",
                (note, job_id, run_id),
            ).fetchall()
        )
    db.execute(
        f"UPDATE durably_bulk_jobs SET skipped = skipped + {mark}, updated_at = {mark}"
        f" WHERE id = {mark}",
        (count, at, job_id),
    )
    _finish_if_settled(db, mark, job_id, at)
    return job(db, dialect, job_id)


def _finish_if_settled(db: Connection, mark: str, job_id: str, at: float) -> None:
    db.execute(
        f"UPDATE durably_bulk_jobs SET finished_at = {mark} WHERE id = {mark}"
        " AND finished_at IS NULL AND NOT EXISTS (SELECT 1 FROM durably_bulk_runs"
        f" WHERE job = {mark} AND outcome IS NULL)",
        (at, job_id, job_id),
    )


def _selection(dialect: Dialect, run_filter: RunFilter) -> tuple[str, list[object]]:
    """The WHERE clause (with its leading space; none for every run) of the filter's runs."""
    where, params = reads.conditions(dialect, **run_filter.keywords())
    if run_filter.ids is not None:
        which, more = dialect.one_of("id", run_filter.ids)
        where.append(which)
        params += more
    return (f" WHERE {' AND '.join(where)}" if where else ""), params


def _job_of(row: Sequence[Any]) -> BulkJob:
    id_, action, text, reason, actor, via, created, updated, finished, total, acted, skipped = row
    return BulkJob(
        id=id_,
        action=BulkAction(action),
        filter=RunFilter.from_json(text),
        by=actor,
        via=Via(via),
        reason=reason,
        created_at=from_ts(created),
        updated_at=from_ts(updated),
        finished_at=None if finished is None else from_ts(finished),
        total=total,
        acted=acted,
        skipped=skipped,
    )

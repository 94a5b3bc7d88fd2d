"""A debounced start, one statement for both stores (durably.core.debounce): an upsert on the
unique index of gathering runs (durably_runs_gathering: one per workflow and debounce key,
until a worker first claims the run). No gathering run: it inserts one, as a plain start
does. One gathering: it gives that run the start's input and due time, counts the start,
and writes nothing else; the history is the run's first start's.

Concurrent starts of one key cannot make two runs: the index refuses the second insert, which
updates the first's row instead (PostgreSQL waits for the first's transaction to end; SQLite's
writers take turns). A claim and a start of the same run at once cannot lose the start nor
change the input of a run that began: PostgreSQL locks the row for either; if the claim
commits first, the start finds the row gone from the index (its epoch raised) and inserts a
new run; if the start commits first, the claim leases the run with its new input.
"""

from __future__ import annotations

from datetime import datetime

from durably.core.history import EventKind
from durably.stores.records import NewRun, RunRecord
from durably.stores.sql import audit
from durably.stores.sql.reads import POSTGRES, Connection, Dialect
from durably.stores.sql.rows import RUN_COLUMNS, run_of, ts
from durably.stores.sql.schema import BIRTH

__all__ = ["gather"]

# A start that joins pushes the due time to its own, but never past the run's due_by (its
# first start's + max_wait); a run with mail (a cancel, a signal) was made due for it, and
# keeps that due time.
_JOIN = (
    " ON CONFLICT (workflow, debounce) WHERE debounce IS NOT NULL AND lease_epoch = 0"
    " DO UPDATE SET input = excluded.input, updated_at = excluded.updated_at,"
    " gathered = durably_runs.gathered + 1, available_at = CASE"
    " WHEN durably_runs.inbox > 0 THEN durably_runs.available_at"
    " WHEN durably_runs.due_by < excluded.available_at THEN durably_runs.due_by"
    " ELSE excluded.available_at END"
)


def gather(
    db: Connection, dialect: Dialect, run: NewRun, *, now: datetime
) -> tuple[RunRecord, bool]:
    """Make the debounced `run`, or join the gathering run of its workflow and key, inside the
    caller's write transaction (on PostgreSQL, a start of nobody's, outside any: it is one
    statement); that run's record, and whether this start made it. A person's start
    (`run.audit`) is recorded on the run either way."""
    assert run.debounce is not None, "a debounced start"
    mark, at = dialect.mark, ts(now)
    # PostgreSQL keeps the first start's run_started data in the run's row too (schema V15),
    # for its first claim; a start that joins leaves it, as it leaves the history.
    kept, kept_mark = (", started", f", {mark}") if dialect == POSTGRES else ("", "")
    upsert = (
        "INSERT INTO durably_runs (id, workflow, status, input, created_at, updated_at,"
        " available_at, event_count, priority, version, correlation_id, queue, queue_key,"
        f" debounce, due_by, gathered{kept})"
        f" VALUES ({mark}, {mark}, 'pending', {', '.join([mark] * 4)}, 1,"
        f" {', '.join([mark] * 7)}, 1{kept_mark}){_JOIN} RETURNING {RUN_COLUMNS}"
    )
    values = (
        run.id,
        run.workflow,
        run.input,
        at,
        at,
        at if run.due is None else ts(run.due),
        run.priority,
        run.version,
        run.correlation_id,
        run.queue,
        run.key,
        run.debounce,
        None if run.due_by is None else ts(run.due_by),
    )
    started = (run.id, str(EventKind.RUN_STARTED), at, run.started)
    if dialect == POSTGRES:  # one round trip: the run_started event by the same statement
        # the event's birth is its run's (schema.BIRTH), as the run's row says
        row = db.execute(
            f"WITH gathered AS ({upsert}, {BIRTH} AS birth), started AS (INSERT INTO"
            " durably_events (run_id, seq, kind, at, data, born) SELECT id, 1, %s, %s, %s,"
            f" birth FROM gathered WHERE id = %s) SELECT {RUN_COLUMNS} FROM gathered",
            (*values, run.started, *started[1:], run.id),
        ).fetchone()
        record = run_of(row)
    else:
        record = run_of(db.execute(upsert, values).fetchone())
        if record.id == run.id:
            db.execute(
                "INSERT INTO durably_events (run_id, seq, kind, at, data)"
                f" VALUES ({mark}, 1, {mark}, {mark}, {mark})",
                started,
            )
    if run.audit is not None:
        audit.record(db, dialect, run.audit, now=now, run_id=record.id)
    return record, record.id == run.id

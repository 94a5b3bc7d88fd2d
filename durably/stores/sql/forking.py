"""Restarting an ended run as a new one, one implementation for both stores: the new run is
created with a history given whole (its `run_started` and the recorded calls it reuses), and
the ended run gets a note saying what it was restarted as, in one transaction."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from durably.core.audit import Audit
from durably.core.history import Event
from durably.core.status import FINAL, RunStatus
from durably.stores.records import NewRun
from durably.stores.sql import audit as trail
from durably.stores.sql.effects import insert_event, insert_run
from durably.stores.sql.reads import Connection, Dialect
from durably.stores.sql.schema import BIRTH

__all__ = ["fork"]


def fork(
    db: Connection,
    dialect: Dialect,
    run: NewRun,
    events: Sequence[Event],
    *,
    source: str,
    note: Event,
    now: datetime,
    audit: Audit | None = None,
) -> bool:
    """Inside the caller's write transaction: create `run`, pending and due now, with
    `events` as its history, append `note` to the history of `source` after its last event,
    and `audit` to the trail (an action on `source`). False, writing nothing, if `source` has
    not ended or `run.id` is taken."""
    mark = dialect.mark
    lock = " FOR UPDATE" if dialect.arrays else ""  # SQLite: the writer holds the file's lock
    row = db.execute(f"SELECT status FROM durably_runs WHERE id = {mark}{lock}", (source,))
    status = row.fetchone()
    if status is None or RunStatus(status[0]) not in FINAL:
        return False
    if not insert_run(db, dialect, run, events, now=now):
        return False
    # on PostgreSQL, in the partition of the run's birth alone (pruned as the statement runs)
    born = f" AND born = (SELECT {BIRTH} FROM durably_runs WHERE id = {mark})"
    last = db.execute(
        f"SELECT max(seq) FROM durably_events WHERE run_id = {mark}"
        + (born if dialect.partitioned else ""),
        (source, source) if dialect.partitioned else (source,),
    )
    seq = last.fetchone()[0] + 1
    insert_event(db, dialect, source, replace(note, seq=seq))
    db.execute(f"UPDATE durably_runs SET event_count = {mark} WHERE id = {mark}", (seq, source))
    if audit is not None:
        trail.record(db, dialect, audit, now=now, run_id=source)
    return True

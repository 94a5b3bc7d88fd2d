"""Starting runs on PostgreSQL: a run, or a batch of them, with its run_started event, its
attributes and a wake-up for workers, in one statement (an audited start: and its audit
entry, in the caller's transaction; a start that claims its run for a worker of its process:
the run inserted running, with its claim, and no wake-up). Run by the store
(durably.stores.postgres.store) on its connections."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from datetime import datetime, timedelta
from typing import Any

import psycopg

from durably.core.history import EventKind
from durably.core.status import RunStatus
from durably.stores.records import NewRun, RunRecord
from durably.stores.sql import audit, debounce, reads
from durably.stores.sql.rows import RUN_COLUMNS, claimed_data, created_record, run_of, ts

__all__ = ["claimed_before", "create", "create_claimed", "create_each", "create_many", "runs_by_id"]

_CREATE_ROWS = """
WITH created AS (
    INSERT INTO durably_runs (id, workflow, status, input, created_at, updated_at, available_at,
        event_count, priority, version, correlation_id, queue, queue_key, started)
    VALUES (%(id)s, %(workflow)s, 'pending', %(input)s, %(at)s, %(at)s, %(due)s, 1, %(priority)s,
        %(version)s, %(correlation_id)s, %(queue)s, %(key)s, %(started)s)
    ON CONFLICT (id) DO NOTHING
    RETURNING id
), started AS (
    INSERT INTO durably_events (run_id, seq, kind, at, data, born)
    SELECT id, 1, %(kind)s, %(at)s, %(started)s, %(at)s FROM created
), attributes AS (
    INSERT INTO durably_attributes (run_id, name, value)
    SELECT id, a.name, a.value
    FROM created, unnest(%(names)s::text[], %(values)s::text[]) AS a(name, value)
)"""
_CREATE = (
    _CREATE_ROWS
    + """, woken AS (
    SELECT pg_notify('durably_due', %(workflow)s) FROM created
)
SELECT count(*) FROM created WHERE (SELECT count(*) FROM woken) >= 0
"""
)
# A start that claims its run (create_claimed): the run inserted already running under its
# first lease, with its run_started and claimed events, and no wake-up (the worker that claims
# it runs it). One statement, so one round trip and its own transaction (with an audit entry:
# two, in a transaction): a row inserted pending and then leased by an UPDATE cost four round
# trips (BEGIN, the two statements, COMMIT) and a second version of the row, with an entry in
# each of its indexes. `durably changes on` hears it by its trigger on inserts
# (schema.CHANGES_TRIGGERS), as it hears a claim's UPDATE.
_CREATE_CLAIMED = """
WITH created AS (
    INSERT INTO durably_runs (id, workflow, status, input, created_at, updated_at, available_at,
        event_count, priority, version, correlation_id, queue, queue_key, started, lease_owner,
        lease_epoch, began_at)
    VALUES (%(id)s, %(workflow)s, 'running', %(input)s, %(at)s, %(at)s, %(expires)s, 2,
        %(priority)s, %(version)s, %(correlation_id)s, %(queue)s, %(key)s, %(started)s,
        %(owner)s, 1, %(at)s)
    ON CONFLICT (id) DO NOTHING
    RETURNING id
), started AS (
    INSERT INTO durably_events (run_id, seq, kind, at, data, born)
    SELECT id, 1, %(kind)s, %(at)s, %(started)s, %(at)s FROM created
    UNION ALL SELECT id, 2, 'claimed', %(at)s, %(claimed)s, %(at)s FROM created
), attributes AS (
    INSERT INTO durably_attributes (run_id, name, value)
    SELECT id, a.name, a.value
    FROM created, unnest(%(names)s::text[], %(values)s::text[]) AS a(name, value)
)
SELECT count(*) FROM created
"""
# Whether the run with this id is one an earlier try of create_claimed made for this owner
# (its connection lost before the answer came): running under that owner's first lease.
_CLAIMED_BY = (
    "SELECT status = 'running' AND lease_owner = %s AND lease_epoch = 1 FROM durably_runs"
    " WHERE id = %s"
)
_CREATE_MANY = """
WITH v AS (
    SELECT * FROM unnest(%(id)s::text[], %(workflow)s::text[], %(input)s::text[],
        %(priority)s::int[], %(version)s::text[], %(correlation_id)s::text[],
        %(started)s::text[], %(queue)s::text[], %(key)s::text[], %(due)s::float8[])
        WITH ORDINALITY AS v(id, workflow, input, priority, version, correlation_id, started,
            queue, key, due, n)
), created AS (
    INSERT INTO durably_runs (id, workflow, status, input, created_at, updated_at, available_at,
        event_count, priority, version, correlation_id, queue, queue_key, started)
    SELECT id, workflow, 'pending', input, %(at)s, %(at)s, coalesce(due, %(at)s), 1, priority,
        version, correlation_id, queue, key, started
    FROM v ORDER BY n
    ON CONFLICT (id) DO NOTHING
    RETURNING id, workflow
), started AS (
    INSERT INTO durably_events (run_id, seq, kind, at, data, born)
    SELECT DISTINCT ON (v.id) v.id, 1, %(kind)s, %(at)s, v.started, %(at)s
    FROM created JOIN v ON v.id = created.id ORDER BY v.id, v.n  -- an id given twice: its first
), attributes AS (
    INSERT INTO durably_attributes (run_id, name, value)
    SELECT a.id, a.name, a.value
    FROM unnest(%(attribute_run)s::text[], %(attribute_name)s::text[],
        %(attribute_value)s::text[]) AS a(id, name, value)
    JOIN created ON created.id = a.id
), woken AS (
    SELECT pg_notify('durably_due', workflow) FROM (SELECT DISTINCT workflow FROM created) AS w
)
SELECT id FROM created WHERE (SELECT count(*) FROM woken) >= 0
"""
# A new run's birth (schema.BIRTH) is its created_at: its first event's `born` is that time.
# Its run_started data is also kept in its row (`started`, schema V15), for its first claim.
# A batch of starts in one statement. An id given twice is inserted once (ON CONFLICT DO
# NOTHING skips the second row), by its first occurrence: the rows go in in the batch's order.
# The attributes given are only those of each id's first occurrence (create_runs picks them).


def create_many(db: psycopg.Connection[Any], runs: Sequence[NewRun], now: datetime) -> set[str]:
    """Insert the runs whose ids are free, in one statement (their audit entries after it,
    in the caller's transaction); the ids of those it made."""
    params = {
        "id": [run.id for run in runs],
        "workflow": [run.workflow for run in runs],
        "input": [run.input for run in runs],
        "priority": [run.priority for run in runs],
        "version": [run.version for run in runs],
        "correlation_id": [run.correlation_id for run in runs],
        "started": [run.started for run in runs],
        "queue": [run.queue for run in runs],
        "key": [run.key for run in runs],
        "due": [None if run.due is None else ts(run.due) for run in runs],
        "at": ts(now),
        "kind": str(EventKind.RUN_STARTED),
    }
    firsts = {run.id: run for run in reversed(runs)}  # an id given twice: its first
    audited = {run_id: run.audit for run_id, run in firsts.items() if run.audit is not None}
    named = [(run.id, *item) for run in firsts.values() for item in run.attributes.items()]
    params["attribute_run"] = [run_id for run_id, _, _ in named]
    params["attribute_name"] = [name for _, name, _ in named]
    params["attribute_value"] = [value for _, _, value in named]
    made = {row[0] for row in db.execute(_CREATE_MANY, params)}
    for run_id in made & audited.keys():
        audit.record(db, reads.POSTGRES, audited[run_id], now=now, run_id=run_id)
    return made


def create(db: psycopg.Connection[Any], run: NewRun, now: datetime) -> bool:
    """Insert `run` with its run_started event and a wake-up, unless its id is taken; its
    audit entry in the same transaction (the caller's, when it has one)."""
    row = db.execute(_CREATE, _create_params(run, now)).fetchone()
    created = row is not None and row[0] == 1
    if created and run.audit is not None:
        audit.record(db, reads.POSTGRES, run.audit, now=now, run_id=run.id)
    return created


def create_claimed(
    db: psycopg.Connection[Any], run: NewRun, owner: str, now: datetime, lease: timedelta
) -> bool:
    """Insert `run` claimed for `owner` (`create_claimed`), in the caller's transaction,
    unless its id is taken."""
    params = _create_params(run, now)
    params["owner"], params["expires"] = owner, ts(now + lease)
    params["claimed"] = claimed_data(owner, 1, RunStatus.PENDING, None)
    if db.execute(_CREATE_CLAIMED, params).fetchone() != (1,):
        return False
    if run.audit is not None:
        audit.record(db, reads.POSTGRES, run.audit, now=now, run_id=run.id)
    return True


def claimed_before(
    db: psycopg.Connection[Any], run: NewRun, owner: str, now: datetime, lease: timedelta
) -> bool:
    """`create_claimed` again after a try whose connection was lost: True if that try made
    the run (it committed before the answer was lost), else the create, if the id is free."""
    found = db.execute(_CLAIMED_BY, (owner, run.id)).fetchone()
    if found is not None:
        return bool(found[0])
    return create_claimed(db, run, owner, now, lease)


def create_each(
    db: psycopg.Connection[Any], runs: Sequence[NewRun], now: datetime
) -> list[tuple[RunRecord, bool]]:
    """A batch with debounced starts in it: each start in turn, in the caller's transaction,
    so that a start of a key finds the run an earlier one of the batch made. Safe to repeat,
    like create_run (a debounced start's count aside)."""
    outcomes: list[tuple[RunRecord, bool]] = []
    for run in runs:
        if run.debounce is not None:
            outcomes.append(debounce.gather(db, reads.POSTGRES, run, now=now))
        elif create(db, run, now):
            outcomes.append((created_record(run, now), True))
        else:
            outcomes.append((runs_by_id(db, [run.id])[run.id], False))
    return outcomes


def runs_by_id(db: psycopg.Connection[Any], ids: Sequence[str]) -> dict[str, RunRecord]:
    rows = db.execute(
        f"SELECT {RUN_COLUMNS} FROM durably_runs WHERE id = ANY(%s)", (list(ids),)
    ).fetchall()
    return {record.id: record for record in map(run_of, rows)}


def _create_params(run: NewRun, now: datetime) -> dict[str, Any]:
    """The parameters of _CREATE (and, with the lease's, _CREATE_CLAIMED) for `run`, created
    at `now`."""
    at = ts(now)
    params = {**asdict(run), "at": at, "kind": str(EventKind.RUN_STARTED)}
    params["due"] = at if run.due is None else ts(run.due)
    params["names"], params["values"] = list(run.attributes), list(run.attributes.values())
    del params["audit"], params["attributes"]
    return params

"""The PostgreSQL checkpoint commit: one statement for a whole batch, in the variants a
batch needs, and a batch of checkpoints as that statement's parameters (`Batch`), which the
store (durably.stores.postgres.store) runs on its connections."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg

from durably.core.status import RunStatus
from durably.stores.records import Checkpoint
from durably.stores.sql import audit, effects, outputs, reads
from durably.stores.sql.rows import checkpoint_params, event_row, ts

__all__ = ["EVENT_ARRAYS", "OUTPUTS_CHANNEL", "WAKE_CHANNEL", "Batch", "commit_sql"]

WAKE_CHANNEL = "durably_due"
OUTPUTS_CHANNEL = "durably_outputs"  # payload: the ids of runs that published, a line each

_COMMIT = """
WITH v AS (
    SELECT * FROM unnest(%(id)s::text[], %(epoch)s::bigint[], %(first_seq)s::int[],
        %(event_count)s::int[], %(status)s::text[], %(result)s::text[], %(error_class)s::text[],
        %(error_message)s::text[], %(available_at)s::float8[], %(consumed)s::int[])
        AS v(id, epoch, first_seq, event_count, status, result, error_class, error_message,
            available_at, consumed)
), e AS (
    SELECT * FROM unnest(%(e_run_id)s::text[], %(e_seq)s::int[], %(e_kind)s::text[],
        %(e_at)s::float8[], %(e_position)s::int[], %(e_name)s::text[], %(e_attempt)s::int[],
        %(e_data)s::text[]) AS e(run_id, seq, kind, at, position, name, attempt, data)
), applied AS (
    {applied}
), fenced AS (
    UPDATE durably_runs AS r SET
        updated_at = CASE WHEN v.status IS NULL THEN r.updated_at ELSE %(now)s END,
        event_count = coalesce(v.event_count, r.event_count),
        status = coalesce(v.status, r.status),
        result = CASE WHEN v.status IS NULL THEN r.result ELSE v.result END,
        error_class = CASE WHEN v.status IS NULL THEN r.error_class ELSE v.error_class END,
        error_message = CASE WHEN v.status IS NULL THEN r.error_message ELSE v.error_message END,
        available_at = CASE WHEN v.status IS NULL THEN r.available_at
            WHEN v.status = 'pending' AND r.inbox > v.consumed
                AND (v.available_at IS NULL OR v.available_at > %(now)s) THEN %(now)s
            ELSE v.available_at END,
        lease_owner = CASE WHEN v.status IS NULL THEN r.lease_owner ELSE NULL END,
        inbox = r.inbox - v.consumed
    FROM v
    WHERE r.id = v.id AND r.lease_epoch = v.epoch AND r.status = 'running'
        AND v.id NOT IN (SELECT id FROM applied)
    RETURNING r.id, r.available_at, coalesce(r.born, r.created_at) AS born
), appended AS (
    INSERT INTO durably_events (run_id, seq, kind, at, position, name, attempt, data, born)
    SELECT e.*, fenced.born FROM e JOIN fenced ON fenced.id = e.run_id
){consumed}, woken AS (
    SELECT pg_notify('durably_due', '') FROM v JOIN fenced USING (id)
    WHERE v.status = 'pending' AND fenced.available_at <= %(now)s
){finished}
SELECT id, true FROM fenced
WHERE (SELECT count(*) FROM woken) >= 0{finished_ref}
UNION ALL SELECT id, false FROM applied
"""
_CONSUMED = """, consumed AS (
    DELETE FROM durably_inbox AS i
    USING unnest(%(c_run_id)s::text[], %(c_id)s::bigint[]) AS c(run_id, id)
    WHERE i.run_id = c.run_id AND i.id = c.id AND c.run_id IN (SELECT id FROM fenced)
)"""
_FINISHED = """, ended AS (
    SELECT string_agg(v.id, E'\\n') AS ids FROM v JOIN fenced USING (id)
    WHERE v.status NOT IN ('pending', 'running')
), finished AS (
    SELECT pg_notify('durably_done', CASE WHEN length(ids) < 7900 THEN ids ELSE '' END)
    FROM ended WHERE ids IS NOT NULL
)"""
# A checkpoint that keeps its run running (no status) leaves updated_at as it was, with every
# other column an index holds: PostgreSQL then updates the run in place (a HOT update, when its
# page has room), adding no entry to any of the run's indexes. updated_at moves with the run's
# status (its start, a claim, a hand-back, its end); its history says when it last moved.
# One statement, so one round trip: the fenced update of every run in the batch, the insert of
# the events of those whose epoch held (a CTE sees the update's RETURNING), each with its run's
# birth (the partition of its history: durably.stores.postgres.partitions), the deletion of the
# inbox messages those events fold in (`consumed`; the update took their count off the run's
# `inbox`: only the holder deletes them, so each is still there), a wake-up for runs handed back
# due now (a hand-back to wait is due now all the same when messages came in while the run was
# leased: its next claim folds them), and a word to waiting handles for runs that end
# (`finished`: a final or parked status, so neither pending nor running; a checkpoint that keeps
# its run running has no status). That word is one NOTIFY a batch naming its ended runs, a line
# each (one per run cost ~10% of a batch), or "" (any run) past the 8,000-byte payload limit.
# Both are referenced so that PostgreSQL evaluates them. Each row says whether the checkpoint
# was fenced in by this statement (true) or found applied (false): only the former's effects
# on other runs (durably.stores.sql.effects) are then done, in the same transaction.
# A checkpoint whose first event is in the history already was applied by an earlier try of
# this commit, whose answer was lost with its connection: `applied` reports it and keeps it
# out of the update and the insert. The whole event is compared, not only its seq: after a
# takeover, the seq a stale writer would use holds the new owner's CLAIMED event.
# It reads each run's partition of the history alone (a lateral subquery: PostgreSQL prunes
# the partitions for each run it joins). That look-up costs ~5% of a large batch, so a commit
# first runs without it, and again with it only when the first answer may be wrong: its
# connection was lost, its events collide with ones already written, or a checkpoint was
# refused (all three rare).
_APPLIED = """SELECT v.id FROM v
    JOIN e ON e.run_id = v.id AND e.seq = v.first_seq
    JOIN durably_runs AS r ON r.id = v.id
    CROSS JOIN LATERAL (SELECT * FROM durably_events AS d WHERE d.run_id = e.run_id
        AND d.seq = e.seq AND d.born = coalesce(r.born, r.created_at) OFFSET 0) AS d
    WHERE d.kind = e.kind AND d.at = e.at AND d.position IS NOT DISTINCT FROM e.position
        AND d.name IS NOT DISTINCT FROM e.name AND d.attempt IS NOT DISTINCT FROM e.attempt"""


@functools.cache
def commit_sql(*, again: bool, consumes: bool, ends: bool) -> str:
    """The commit statement with only the parts a batch needs: the inbox deletion when it
    folds messages, the finish notice when it ends runs (each part costs a few % of a batch
    of 32 that needs neither), the applied look-up when its first answer may be wrong."""
    return _COMMIT.format(
        applied=_APPLIED if again else "SELECT NULL::text AS id WHERE false",
        consumed=_CONSUMED if consumes else "",
        finished=_FINISHED if ends else "",
        finished_ref=" AND (SELECT count(*) FROM finished) >= 0" if ends else "",
    )


EVENT_ARRAYS = (
    "e_run_id",
    "e_seq",
    "e_kind",
    "e_at",
    "e_position",
    "e_name",
    "e_attempt",
    "e_data",
)


def run_lines(run_ids: Sequence[str]) -> str:
    """A NOTIFY payload naming runs, a line each ("": any run, past the 8,000-byte limit)."""
    text = "\n".join(run_ids)
    return text if len(text) < 7_900 else ""


class Batch:
    """Checkpoints to commit in one statement: `apply(db)` runs it on a connection (in a
    transaction when `many`: their effects on other runs take more statements) and returns
    the ids of the runs whose checkpoint is in (fenced in now, or, with `again`, found
    applied by an earlier try whose answer was lost)."""

    def __init__(self, checkpoints: Sequence[Checkpoint], now: datetime) -> None:
        at = ts(now)
        params = [checkpoint_params(checkpoint, at) for checkpoint in checkpoints]
        columns = {key: [p[key] for p in params] for key in params[0] if key != "now"}
        rows = [event_row(c.run_id, event) for c in checkpoints for event in c.events]
        events = {name: [row[i] for row in rows] for i, name in enumerate(EVENT_ARRAYS)}
        consumed = [(c.run_id, message) for c in checkpoints for message in c.consumed]
        self._values: dict[str, Any] = {
            "now": at,
            **columns,
            **events,
            "c_run_id": [run_id for run_id, _ in consumed],
            "c_id": [message for _, message in consumed],
        }
        self._parts = {
            "consumes": bool(consumed),
            "ends": any(c.status not in (None, RunStatus.PENDING) for c in checkpoints),
        }
        self._now = now
        self._acting = [
            c
            for c in checkpoints
            if c.starts or c.messages or c.input is not None or c.audit is not None or c.publishes
        ]
        self.many = bool(self._acting)  # more than one statement: in one transaction

    def apply(self, db: psycopg.Connection[Any], *, again: bool = False) -> set[str]:
        rows = db.execute(commit_sql(again=again, **self._parts), self._values).fetchall()
        fenced_now = {row[0] for row in rows if row[1]}
        woken = False  # effects on other runs of what this statement fenced in
        published: list[str] = []
        for checkpoint in self._acting:
            if checkpoint.run_id not in fenced_now:
                continue
            if checkpoint.publishes and outputs.publish(db, reads.POSTGRES, checkpoint):
                published.append(checkpoint.run_id)
            if checkpoint.starts or checkpoint.messages or checkpoint.input is not None:
                woken |= effects.apply(db, reads.POSTGRES, checkpoint, now=self._now)
            if checkpoint.audit is not None:  # a person's action, fenced in now: once
                run_id = checkpoint.run_id
                audit.record(db, reads.POSTGRES, checkpoint.audit, now=self._now, run_id=run_id)
        if woken:
            db.execute("SELECT pg_notify(%s, '')", (WAKE_CHANNEL,))  # sent at commit
        if published:
            db.execute("SELECT pg_notify(%s, %s)", (OUTPUTS_CHANNEL, run_lines(published)))
        return {row[0] for row in rows}

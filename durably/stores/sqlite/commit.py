"""The SQLite checkpoint commit: each checkpoint's fenced update, its events, the inbox
messages it folds in and its effects on other runs, in the caller's transaction. Run by the
store (durably.stores.sqlite.store)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from durably.stores.records import Checkpoint
from durably.stores.sql import audit, effects, inbox, outputs, reads
from durably.stores.sql.rows import checkpoint_params, event_row, from_ts

__all__ = ["apply"]

_INSERT_EVENT = (
    "INSERT INTO durably_events (run_id, seq, kind, at, position, name, attempt, data)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_COMMIT = """
UPDATE durably_runs SET
    updated_at = :now,
    event_count = coalesce(:event_count, event_count),
    status = coalesce(:status, status),
    result = CASE WHEN :status IS NULL THEN result ELSE :result END,
    error_class = CASE WHEN :status IS NULL THEN error_class ELSE :error_class END,
    error_message = CASE WHEN :status IS NULL THEN error_message ELSE :error_message END,
    available_at = CASE WHEN :status IS NULL THEN available_at
        WHEN :status = 'pending' AND inbox > :consumed
            AND (:available_at IS NULL OR :available_at > :now) THEN :now
        ELSE :available_at END,
    lease_owner = CASE WHEN :status IS NULL THEN lease_owner ELSE NULL END,
    inbox = inbox - :consumed
WHERE id = :id AND lease_epoch = :epoch AND status = 'running'
RETURNING status, available_at
"""
# A checkpoint that keeps its run running (no status) changes no column an index holds: not
# even updated_at, which moves with the run's status (its start, a claim, a hand-back, its
# end; its history says when it last moved). SQLite rewrites the entries of every index on a
# column an UPDATE sets, whatever the value, so this one sets only what changes.
_KEEP_RUNNING = """
UPDATE durably_runs SET
    event_count = coalesce(:event_count, event_count),
    inbox = inbox - :consumed
WHERE id = :id AND lease_epoch = :epoch AND status = 'running'
RETURNING status, available_at
"""
# The whole event, not only its seq: after a takeover, the seq a stale writer would use holds
# the new owner's CLAIMED event.
_APPLIED = """
SELECT 1 FROM durably_events WHERE run_id = ? AND seq = ? AND kind = ? AND at = ?
    AND position IS ? AND name IS ? AND attempt IS ?
"""


def apply(
    db: sqlite3.Connection,
    checkpoints: Sequence[Checkpoint],
    at: float,
    *,
    look_first: bool,
) -> tuple[list[bool], bool]:
    """Whether each checkpoint was fenced in, and whether one handed its run back due now."""
    results: list[bool] = []
    due_now = False
    for checkpoint in checkpoints:
        if look_first and _applied(db, checkpoint):
            results.append(True)
            continue
        update = _KEEP_RUNNING if checkpoint.status is None else _COMMIT
        row = db.execute(update, checkpoint_params(checkpoint, at)).fetchone()
        fenced_in = row is not None
        if row is not None and checkpoint.status is not None:
            status, available_at = row
            due_now |= status == "pending" and available_at is not None and available_at <= at
        if fenced_in:
            db.executemany(
                _INSERT_EVENT, [event_row(checkpoint.run_id, e) for e in checkpoint.events]
            )
            inbox.consume(db, reads.SQLITE, checkpoint.run_id, checkpoint.consumed)
            if checkpoint.publishes:
                outputs.publish(db, reads.SQLITE, checkpoint)
            if checkpoint.starts or checkpoint.messages or checkpoint.input is not None:
                woken = effects.apply(db, reads.SQLITE, checkpoint, now=from_ts(at))
                due_now |= woken
            if checkpoint.audit is not None:  # a person's action, fenced in now: once
                audit.record(
                    db, reads.SQLITE, checkpoint.audit, now=from_ts(at), run_id=checkpoint.run_id
                )
        else:  # refused: a stale epoch, or applied by an earlier try of this commit
            fenced_in = _applied(db, checkpoint)
        results.append(fenced_in)
    return results, due_now


def _applied(db: sqlite3.Connection, checkpoint: Checkpoint) -> bool:
    """Whether the checkpoint's first event is in the history already."""
    if not checkpoint.events:
        return False
    first = event_row(checkpoint.run_id, checkpoint.events[0])
    return db.execute(_APPLIED, first[:-1]).fetchone() is not None

"""The inbox of commands from outside a run, one implementation for both stores.

Any process may write a run's inbox (`send`); only the run's lease holder reads it (with its
claim: `deliveries`) and empties it, by naming the messages it folded into the history in
the checkpoint that appends them (`Checkpoint.consumed`, deleted behind the same lease fence
by each store's commit). `durably_runs.inbox` counts the undelivered messages, so that a
claim reads the inbox only of the runs that have mail.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from durably.core.history import Event
from durably.core.status import FINAL, RunStatus
from durably.stores.records import Claim, Delivery, Message, Sent, SentOutcome
from durably.stores.sql import audit, reads
from durably.stores.sql.reads import Connection, Dialect
from durably.stores.sql.rows import from_ts, ts

__all__ = ["claims", "claims_of", "consume", "deliveries", "mail", "send"]

_ROUSED = frozenset({RunStatus.PAUSED, RunStatus.NEEDS_ATTENTION})


def send(db: Connection, dialect: Dialect, message: Message, *, now: datetime) -> Sent:
    """Store `message` in its run's inbox, inside the caller's write transaction; a pending
    run is made due now (and a paused or parked one, for its parent's message). The caller
    wakes workers when the answer is STORED and the status PENDING (after commit, or, on
    PostgreSQL, with a NOTIFY in the same transaction)."""
    mark, at = dialect.mark, ts(now)
    # Lock the run first (PostgreSQL: FOR UPDATE; SQLite: the writer's lock is the file's),
    # so that no commit can end it between this check and the insert.
    lock = " FOR UPDATE" if dialect.arrays else ""
    row = db.execute(
        f"SELECT status, parent FROM durably_runs WHERE id = {mark}{lock}", (message.run_id,)
    ).fetchone()
    if row is None or (message.from_parent is not None and row[1] != message.from_parent):
        return Sent(SentOutcome.NO_RUN)
    status = RunStatus(row[0])
    if status in FINAL:
        return Sent(SentOutcome.ENDED, status=status)
    stored = db.execute(
        "INSERT INTO durably_inbox (run_id, kind, name, data, sender, dedupe_key, sent_at)"
        f" VALUES ({mark}, {mark}, {mark}, {mark}, {mark}, {mark}, {mark})"
        " ON CONFLICT (run_id, dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING"
        " RETURNING id",
        (
            message.run_id,
            message.kind,
            message.name,
            message.data,
            message.sender,
            message.dedupe_key,
            at,
        ),
    ).fetchone()
    if stored is None:  # only a dedupe_key conflicts: the message is there already
        first = db.execute(
            f"SELECT id FROM durably_inbox WHERE run_id = {mark} AND dedupe_key = {mark}",
            (message.run_id, message.dedupe_key),
        ).fetchone()
        return Sent(SentOutcome.DUPLICATE, first[0], status)
    # A pending run waiting for a later due time (a backoff, a sleep), or for a message only
    # (no due time), is due now: its execution folds the message and then waits again for
    # what it waited for.
    db.execute(
        "UPDATE durably_runs SET inbox = inbox + 1, available_at = CASE"
        f" WHEN status = 'pending' AND (available_at IS NULL OR available_at > {mark})"
        f" THEN {mark} ELSE available_at END"
        f" WHERE id = {mark}",
        (at, at, message.run_id),
    )
    if message.from_parent is not None and status in _ROUSED:
        # a parent's word to its paused or parked child: nobody need act for it to be heard
        db.execute(
            "UPDATE durably_runs SET status = 'pending', available_at = "
            f"{mark}, lease_owner = NULL WHERE id = {mark}",
            (at, message.run_id),
        )
        status = RunStatus.PENDING
    if message.audit is not None:  # a person's action: in the trail exactly when it is stored
        audit.record(db, dialect, message.audit, now=now, run_id=message.run_id)
    return Sent(SentOutcome.STORED, stored[0], status)


def deliveries(
    db: Connection, dialect: Dialect, run_ids: Sequence[str]
) -> dict[str, tuple[Delivery, ...]]:
    """The undelivered messages of these runs, each run's in the order they were stored."""
    found: dict[str, list[Delivery]] = {}
    if not run_ids:
        return {}
    which, params = dialect.one_of("run_id", run_ids)
    rows = db.execute(
        "SELECT run_id, id, kind, name, data, sender, sent_at FROM durably_inbox"
        f" WHERE {which} ORDER BY run_id, id",
        params,
    )
    for run_id, id_, kind, name, data, sender, sent_at in rows:
        found.setdefault(run_id, []).append(
            Delivery(id_, kind, name, data, sender, from_ts(sent_at))
        )
    return {run_id: tuple(messages) for run_id, messages in found.items()}


def mail(
    db: Connection, dialect: Dialect, run_ids: Sequence[str]
) -> dict[str, tuple[Delivery, ...]]:
    """The undelivered messages of those of these runs that have any (a read: one indexed
    look at the runs' counts, and the inbox only of runs with mail)."""
    if not run_ids:
        return {}
    which, params = dialect.one_of("id", run_ids)
    rows = db.execute(f"SELECT id FROM durably_runs WHERE {which} AND inbox > 0", params)
    return deliveries(db, dialect, [row[0] for row in rows])


def consume(db: Connection, dialect: Dialect, run_id: str, ids: Sequence[int]) -> None:
    """Delete messages a fenced checkpoint folded into the history (SQLite's commit; the
    caller checked the fence and lowered the run's count by as many)."""
    if ids:
        which, params = dialect.one_of("id", ids)
        db.execute(
            f"DELETE FROM durably_inbox WHERE run_id = {dialect.mark} AND {which}",
            [run_id, *params],
        )


def claims(db: Connection, dialect: Dialect, leased: Sequence[Sequence[Any]]) -> list[Claim]:
    """Claims of just-leased (run id, workflow, input, epoch, inbox count, priority) rows, with
    their histories and their undelivered messages (read only for the runs that have some)."""
    if not leased:
        return []
    histories = reads.histories(db, dialect, [row[0] for row in leased])
    mail = deliveries(db, dialect, [row[0] for row in leased if row[4] > 0])
    return claims_of(leased, histories, mail)


def claims_of(
    leased: Sequence[Sequence[Any]],
    histories: Mapping[str, Sequence[Event]],
    mail: Mapping[str, Sequence[Delivery]],
) -> list[Claim]:
    """Claims of just-leased (run id, workflow, input, epoch, inbox count, priority) rows,
    given their histories and undelivered messages by run id."""
    return [
        Claim(
            run_id,
            workflow,
            input_,
            epoch,
            tuple(histories.get(run_id, ())),
            tuple(mail.get(run_id, ())),
            priority,
        )
        for run_id, workflow, input_, epoch, _, priority in leased
    ]

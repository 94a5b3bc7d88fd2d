"""What a checkpoint does besides appending events and moving its run, in its own
transaction, one implementation for both stores: it creates the child runs its parent started
(`Checkpoint.starts`), sends the messages its run sends (`Checkpoint.messages`: a child's end
to its parent, a parent's cancel to its children), and begins a new generation of a run that
continues as new (`Checkpoint.input`). The stores call `apply` only for a checkpoint their
commit fenced in, never for one a retried commit found applied already, so each is done
once."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from durably.core.children import CHILD, ChildEnded
from durably.core.history import ErrorInfo, Event, EventKind
from durably.core.status import RunStatus
from durably.errors import ChildIdTaken
from durably.stores.records import Checkpoint, Message, NewRun, SentOutcome
from durably.stores.sql import attributes, inbox
from durably.stores.sql.reads import Connection, Dialect
from durably.stores.sql.rows import event_row, ts
from durably.stores.sql.schema import BIRTH

__all__ = ["apply", "insert_event", "insert_run"]

_TAKEN = (
    "the id {!r} is taken by another run, so no child was started; give durably.start_child "
    "another id (or none: durably derives one from the parent's id)"
)


def apply(db: Connection, dialect: Dialect, checkpoint: Checkpoint, *, now: datetime) -> bool:
    """Inside the caller's write transaction, after the checkpoint's own writes: create its
    children and send its messages. True if that made a run due now (wake the workers)."""
    woken = False
    if checkpoint.input is not None:
        _begin_generation(db, dialect, checkpoint)
    for run in checkpoint.starts:
        started = Event(1, EventKind.RUN_STARTED, now, data=run.started)
        if insert_run(db, dialect, run, [started], now=now):
            woken = True
            continue
        error = ErrorInfo.of(ChildIdTaken(_TAKEN.format(run.id)))
        ended = ChildEnded(run.id, RunStatus.FAILED, error=error)
        taken = Message(checkpoint.run_id, CHILD, "durably", run.id, ended.to_json())
        woken |= _send(db, dialect, taken, now=now)
    for message in checkpoint.messages:
        woken |= _send(db, dialect, message, now=now)
    return woken


def insert_run(
    db: Connection, dialect: Dialect, run: NewRun, events: Sequence[Event], *, now: datetime
) -> bool:
    """Create `run`, pending and due now, with `events` as its whole history (seq from 1)
    and its attributes; False, writing nothing, if its id is taken."""
    at = ts(now)
    columns = (
        "id, workflow, status, input, created_at, updated_at, available_at, event_count, parent,"
        " priority, version, correlation_id, queue, queue_key"
    )
    due = at if run.due is None else ts(run.due)
    values: list[object] = [run.id, run.workflow, "pending", run.input, at, at, due, len(events)]
    values += [run.parent, run.priority, run.version, run.correlation_id, run.queue, run.key]
    if dialect.partitioned:
        # PostgreSQL keeps a run's run_started data in its row for its first claim (schema
        # V15) when that event, made now, is its whole history ('': not kept, it is read).
        kept = len(events) == 1 and events[0].kind == EventKind.RUN_STARTED
        kept = kept and events[0].at == now
        columns += ", started"
        values.append(events[0].data if kept else "")
    marks = ", ".join([dialect.mark] * len(values))
    created = db.execute(
        f"INSERT INTO durably_runs ({columns}) VALUES ({marks})"
        " ON CONFLICT (id) DO NOTHING RETURNING id",
        values,
    ).fetchone()
    if created is None:
        return False
    for event in events:
        insert_event(db, dialect, run.id, event)
    attributes.insert(db, dialect, run.id, run.attributes)
    return True


def insert_event(db: Connection, dialect: Dialect, run_id: str, event: Event) -> None:
    """Append `event` to the history of the run `run_id` (which exists: on PostgreSQL its
    row gives the event its birth, schema.BIRTH)."""
    marks = ", ".join([dialect.mark] * 8)
    columns = "run_id, seq, kind, at, position, name, attempt, data"
    if dialect.partitioned:
        db.execute(
            f"INSERT INTO durably_events ({columns}, born) SELECT {marks}, {BIRTH}"
            f" FROM durably_runs WHERE id = {dialect.mark}",
            (*event_row(run_id, event), run_id),
        )
        return
    db.execute(f"INSERT INTO durably_events ({columns}) VALUES ({marks})", event_row(run_id, event))


def _begin_generation(db: Connection, dialect: Dialect, checkpoint: Checkpoint) -> None:
    """The run continues as new: its new input and version (the code that began the new
    generation's), and none of its events before this checkpoint's (the new generation's
    history begins with them)."""
    mark, run_id = dialect.mark, checkpoint.run_id
    db.execute(
        f"UPDATE durably_runs SET input = {mark}, version = coalesce({mark}, version)"
        f" WHERE id = {mark}",
        (checkpoint.input, checkpoint.version, run_id),
    )
    born = f" AND born = (SELECT {BIRTH} FROM durably_runs WHERE id = {mark})"
    db.execute(  # on PostgreSQL, in the partition of the run's birth alone
        f"DELETE FROM durably_events WHERE run_id = {mark} AND seq < {mark}"
        + (born if dialect.partitioned else ""),
        (run_id, checkpoint.events[0].seq, *((run_id,) if dialect.partitioned else ())),
    )


def _send(db: Connection, dialect: Dialect, message: Message, *, now: datetime) -> bool:
    sent = inbox.send(db, dialect, message, now=now)
    return sent.outcome is SentOutcome.STORED and sent.status is RunStatus.PENDING

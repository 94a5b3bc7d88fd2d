"""Rows to records and back, the same for both stores (the column orders live here)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from durably.core.event_data import encode_payload
from durably.core.history import UNREADABLE_ROW, ErrorInfo, Event, EventKind
from durably.core.payloads import Claimed
from durably.core.status import RunStatus
from durably.errors import SchemaTooNew
from durably.stores.records import Checkpoint, Claim, NewRun, RunRecord

__all__ = [
    "EVENT_COLUMNS",
    "RUN_COLUMNS",
    "check_version",
    "checkpoint_params",
    "claimed_data",
    "claimed_start",
    "created_record",
    "event_of",
    "event_row",
    "from_ts",
    "run_of",
    "ts",
]

RUN_COLUMNS = (
    "id, workflow, status, input, result, error_class, error_message, created_at, "
    "updated_at, available_at, lease_owner, lease_epoch, event_count, parent, priority, version, "
    "correlation_id, queue, queue_key, debounce, due_by, gathered"
)
EVENT_COLUMNS = "seq, kind, at, position, name, attempt, data"
_EPOCH = datetime.fromtimestamp(0, UTC)  # the time of an event whose row cannot be read


def ts(moment: datetime) -> float:
    return moment.timestamp()


def from_ts(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def run_of(row: Sequence[Any]) -> RunRecord:
    (
        id_,
        workflow,
        status,
        input_,
        result,
        error_class,
        error_message,
        created_at,
        updated_at,
        available_at,
        lease_owner,
        lease_epoch,
        event_count,
        parent,
        priority,
        version,
        correlation_id,
        queue,
        key,
        debounce,
        due_by,
        gathered,
    ) = row
    return RunRecord(
        id=id_,
        workflow=workflow,
        status=RunStatus(status),
        input=input_,
        result=result,
        error=None if error_class is None else ErrorInfo(error_class, error_message or ""),
        created_at=from_ts(created_at),
        updated_at=from_ts(updated_at),
        available_at=None if available_at is None else from_ts(available_at),
        lease_owner=lease_owner,
        lease_epoch=lease_epoch,
        event_count=event_count,
        parent=parent,
        priority=priority,
        version=version,
        correlation_id=correlation_id,
        queue=queue,
        key=key,
        debounce=debounce,
        due_by=None if due_by is None else from_ts(due_by),
        gathered=gathered,
    )


def event_of(row: Sequence[Any]) -> Event:
    """The event of a stored row; for a row that cannot be read (a corrupted one), an event
    of the kind UNREADABLE_ROW saying why, so that one bad row parks its run (the worker
    checks) instead of failing the read of every run claimed with it."""
    seq, kind, at, position, name, attempt, data = row
    try:
        return Event(seq, EventKind(kind), from_ts(at), position, name, attempt, data)
    except (TypeError, ValueError, OverflowError, OSError) as exc:
        why = f"its kind {kind!r} and time {at!r} do not read ({type(exc).__name__}: {exc})"
        return Event(seq, EventKind(UNREADABLE_ROW), _EPOCH, position, name, attempt, why)


def event_row(run_id: str, event: Event) -> tuple[Any, ...]:
    """Values for an INSERT into durably_events, in _INSERT_EVENT's column order."""
    return (
        run_id,
        event.seq,
        str(event.kind),
        ts(event.at),
        event.position,
        event.name,
        event.attempt,
        event.data,
    )


def claimed_data(owner: str, epoch: int, previous_status: str, previous_owner: str | None) -> str:
    # claimed while still running: the previous owner's lease had expired
    expired = previous_owner if previous_status == RunStatus.RUNNING and previous_owner else None
    return encode_payload(Claimed(owner, epoch, took_over_from=expired))


def claimed_start(
    run: NewRun, owner: str, now: datetime, lease: timedelta
) -> tuple[RunRecord, Claim]:
    """The record and the claim of `run` as a start that claims it for `owner` at `now`
    writes them (Store.create_claimed), without reading them back: running under its first
    lease, its history its run_started and claimed events. ValueError for a run no start
    may claim: a debounced one, or one due later."""
    if run.debounce is not None or run.due is not None:
        raise ValueError(
            f"run {run.id!r} is debounced or due later: a start cannot claim it; create it"
            " with create_run, and a worker claims it when it is due"
        )
    at = from_ts(ts(now))  # as it reads back
    claimed = Event(2, EventKind.CLAIMED, at, data=claimed_data(owner, 1, RunStatus.PENDING, None))
    record = dataclasses.replace(
        created_record(run, now),
        status=RunStatus.RUNNING,
        available_at=from_ts(ts(now + lease)),
        lease_owner=owner,
        lease_epoch=1,
        event_count=2,
    )
    started = Event(1, EventKind.RUN_STARTED, at, data=run.started)
    claim = Claim(run.id, run.workflow, run.input, 1, (started, claimed), (), run.priority)
    return record, claim


def check_version(found: int, latest: int, url: str) -> None:
    if found > latest:
        raise SchemaTooNew(
            f"the durably schema in {url} is at version {found}, but this durably knows only "
            f"up to version {latest}; upgrade durably (pip install -U durably) before using it"
        )


def checkpoint_params(checkpoint: Checkpoint, at: float) -> dict[str, object]:
    """Named values of a checkpoint for the fenced UPDATE of durably_runs."""
    error = checkpoint.error
    return {
        "now": at,
        "id": checkpoint.run_id,
        "epoch": checkpoint.epoch,
        # What identifies the checkpoint, so that a retried commit is not applied twice.
        "first_seq": checkpoint.events[0].seq if checkpoint.events else None,
        "event_count": checkpoint.events[-1].seq if checkpoint.events else None,
        "status": None if checkpoint.status is None else str(checkpoint.status),
        "result": checkpoint.result,
        "error_class": None if error is None else error.error_class,
        "error_message": None if error is None else error.message,
        "available_at": None if checkpoint.available_at is None else ts(checkpoint.available_at),
        # Inbox messages folded into the events: the run's count of undelivered ones drops by
        # as many (only the lease holder deletes them, so each of them is still there).
        "consumed": len(checkpoint.consumed),
    }


def created_record(run: NewRun, now: datetime) -> RunRecord:
    """The record of `run` as its create at `now` wrote it, without reading it back."""
    at = from_ts(ts(now))  # as it reads back
    due = at if run.due is None else from_ts(ts(run.due))
    return RunRecord(
        id=run.id,
        workflow=run.workflow,
        status=RunStatus.PENDING,
        input=run.input,
        result=None,
        error=None,
        created_at=at,
        updated_at=at,
        available_at=due,
        lease_owner=None,
        lease_epoch=0,
        event_count=1,
        parent=run.parent,
        priority=run.priority,
        version=run.version,
        correlation_id=run.correlation_id,
        queue=run.queue,
        key=run.key,
        debounce=run.debounce,
        due_by=None if run.due_by is None else from_ts(ts(run.due_by)),
        gathered=None if run.debounce is None else 1,
    )

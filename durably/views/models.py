"""The API's request and response bodies (pydantic): what the OpenAPI schema publishes, and
how records of the engine are turned into them. Stored JSON (a run's input, result, an event's
data) is handed out parsed, as the JSON value it is."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from durably.client.approvals import PendingApproval
from durably.client.audit import AuditPage
from durably.client.control import Steered
from durably.client.dead_letters import DeadLetter
from durably.codec.encryption import masked, sealed_key
from durably.core.history import ErrorInfo, Event
from durably.core.queues import DEFAULT_QUEUE
from durably.core.secrets import redact
from durably.runtime.schedules import ScheduleInfo
from durably.runtime.upgrades import Upgrade
from durably.stores.records import RunRecord, RunStats, WorkerBeat
from durably.views.breakers import BreakerInfo
from durably.views.details import shown
from durably.views.explaining import explain
from durably.views.timeline import timeline

__all__ = [
    "ActionOut",
    "ApprovalOut",
    "AuditEntryOut",
    "AuditPageOut",
    "BreakerOut",
    "DeadLetterOut",
    "ErrorOut",
    "EventOut",
    "HistoryOut",
    "QueueOut",
    "ReleaseOut",
    "RunOut",
    "RunPageOut",
    "ScheduleOut",
    "SignalOut",
    "StatusOut",
    "UpgradeOut",
    "WorkerOut",
]

_STRICT = ConfigDict(extra="forbid")


class StatusOut(BaseModel):
    status: str = Field(description="ok (the server is up) or ready (the store answers)")


class SignalOut(BaseModel):
    run: str
    signal: str
    message: int = Field(description="The signal's id in the run's inbox")
    stored: bool = Field(description="False: a signal with the same dedupe_key was there")


class QueryOut(BaseModel):
    run: str
    query: str
    answer: Any = Field(description="The handler's value, as JSON")
    calls: int = Field(description="The recorded calls the replay went through before it")


class ReleaseOut(BaseModel):
    run: str
    worker: str = Field(description="The dead worker whose leases were ended")
    released: int = Field(description="How many runs it held, now free to be taken over")


class ErrorOut(BaseModel):
    error: str = Field(description="The kind of error: validation, not_found, conflict, ...")
    message: str = Field(description="What is wrong and what to do")


class ErrorInfoOut(BaseModel):
    error_class: str
    message: str

    @classmethod
    def of(cls, error: ErrorInfo | None) -> ErrorInfoOut | None:
        return None if error is None else cls(error_class=error.error_class, message=error.message)


class RunOut(BaseModel):
    id: str
    workflow: str
    status: str
    input: Any
    result: Any = None
    error: ErrorInfoOut | None = None
    created_at: datetime
    updated_at: datetime = Field(
        description="When its status last changed (its start, a claim, a hand-back, its end); "
        "a step that keeps it running leaves it as it was"
    )
    due_at: datetime | None = Field(description="Pending: when it is due; running: lease expiry")
    lease_owner: str | None
    priority: int
    version: str | None
    parent: str | None
    correlation_id: str | None
    queue: str = Field(description="The queue it is on (default: the default queue)")
    key: str | None = Field(description="Whose run it is (its queue's per-key limits)")
    attributes: dict[str, str] = Field(description="The strings it was started with, to find it by")
    debounce_key: str | None = Field(
        default=None, description="A debounced run: the key its starts gathered on"
    )
    gathering: bool = Field(
        default=False, description="Debounced, not begun yet: a start with its key joins it"
    )
    gathered: int | None = Field(default=None, description="Debounced: how many starts so far")
    due_by: datetime | None = Field(
        default=None, description="Debounced: the latest it becomes due (first start + max_wait)"
    )
    now: str | None = Field(default=None, description="What the run is doing now")
    next: str | None = Field(default=None, description="What happens next, or what to do")

    @classmethod
    def of(
        cls,
        run: RunRecord,
        events: list[Event] | None = None,
        workers: list[WorkerBeat] | None = None,
        now: datetime | None = None,
        attributes: Mapping[str, str] | None = None,
    ) -> RunOut:
        said = None if events is None else explain(run, events, workers or [], now)
        return cls(
            id=run.id,
            workflow=run.workflow,
            status=str(run.status),
            input=_parsed(run.input),
            result=None if run.result is None else _parsed(run.result),
            error=ErrorInfoOut.of(run.error),
            created_at=run.created_at,
            updated_at=run.updated_at,
            due_at=run.available_at,
            lease_owner=run.lease_owner,
            priority=run.priority,
            version=run.version,
            parent=run.parent,
            correlation_id=run.correlation_id,
            queue=run.queue or DEFAULT_QUEUE,
            key=run.key,
            attributes=dict(attributes or {}),
            debounce_key=run.debounce,
            gathering=run.gathering,
            gathered=run.gathered,
            due_by=run.due_by,
            now=None if said is None else said.now,
            next=None if said is None else said.next,
        )


class RunPageOut(BaseModel):
    runs: list[RunOut]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page")


class EventOut(BaseModel):
    seq: int
    kind: str
    at: datetime
    position: int | None
    name: str | None
    attempt: int | None
    data: Any = Field(description="The event's data as JSON (null: none)")
    duration_ms: float | None = Field(description="An attempt's outcome: since it started")
    detail: str = Field(description="The event in words")
    traceback: str | None = Field(
        default=None,
        description="A failed attempt of the user's code (a step, an undo, the workflow "
        "body): the traceback of what it raised, user frames only, at most 8,000 characters",
    )


class HistoryOut(BaseModel):
    run: str
    events: list[EventOut]

    @classmethod
    def of(cls, run_id: str, events: list[Event]) -> HistoryOut:
        rows = timeline(events)
        return cls(
            run=run_id,
            events=[
                EventOut(
                    seq=e.seq,
                    kind=str(e.kind),
                    at=e.at,
                    position=e.position,
                    name=e.name,
                    attempt=e.attempt,
                    data=None if e.data is None else _parsed(e.data),
                    duration_ms=row.duration_ms,
                    detail=row.detail,
                    traceback=row.traceback,
                )
                for e, row in zip(events, rows, strict=True)
            ],
        )


class ActionOut(BaseModel):
    run: str
    action: str
    changed: bool = True
    note: str = ""

    @classmethod
    def of(cls, steered: Steered) -> ActionOut:
        return cls(
            run=steered.run_id, action=steered.action, changed=steered.changed, note=steered.note
        )


class DeadLetterOut(BaseModel):
    run: str
    workflow: str
    status: str
    step: str | None
    attempts: int
    reason: str | None
    error: ErrorInfoOut | None = Field(description="The root cause, as the step raised it")
    run_error: ErrorInfoOut | None
    parked_at: datetime
    undo: bool = Field(
        default=False,
        description="compensation_failed: `step` is the step whose undo fails, and `error`, "
        "`attempts` and `reason` are the undo's",
    )

    @classmethod
    def of(cls, letter: DeadLetter) -> DeadLetterOut:
        return cls(
            run=letter.run_id,
            workflow=letter.workflow,
            status=str(letter.status),
            step=letter.step,
            attempts=letter.attempts,
            reason=letter.reason,
            error=ErrorInfoOut.of(letter.error),
            run_error=ErrorInfoOut.of(letter.run_error),
            parked_at=letter.parked_at,
            undo=letter.undo,
        )


class ApprovalOut(BaseModel):
    run: str
    workflow: str
    name: str
    requested_at: datetime
    until: datetime | None
    on_timeout: str
    details: Any
    escalated: bool

    @classmethod
    def of(cls, approval: PendingApproval) -> ApprovalOut:
        details = None if approval.details is None else _parsed(approval.details)
        return cls(
            run=approval.run_id,
            workflow=approval.workflow,
            name=approval.name,
            requested_at=approval.requested_at,
            until=approval.until,
            on_timeout=approval.on_timeout,
            details=details,
            escalated=approval.escalated,
        )


class ScheduleOut(BaseModel):
    name: str
    workflow: str
    when: str
    overlap: str
    catchup: str
    paused: bool
    last_tick: datetime | None
    last_run: str | None
    next_fire: datetime | None
    fired: int
    skipped: int
    defined: bool

    @classmethod
    def of(cls, info: ScheduleInfo) -> ScheduleOut:
        return cls(
            name=info.name,
            workflow=info.workflow,
            when=info.when,
            overlap=info.overlap,
            catchup=info.catchup,
            paused=info.paused,
            last_tick=info.last_tick,
            last_run=info.last_run,
            next_fire=info.next_fire,
            fired=info.fired,
            skipped=info.skipped,
            defined=info.defined,
        )


class BreakerOut(BaseModel):
    dependency: str
    breaker: str
    failures: int
    opened_at: datetime | None
    in_flight: int
    waiting: int
    tokens: float | None

    @classmethod
    def of(cls, info: BreakerInfo) -> BreakerOut:
        return cls(
            dependency=info.dependency,
            breaker=info.breaker,
            failures=info.failures,
            opened_at=info.opened_at,
            in_flight=info.in_flight,
            waiting=info.waiting,
            tokens=info.tokens,
        )


class WorkerOut(BaseModel):
    name: str
    live: bool
    started_at: datetime
    seen_at: datetime
    serves: dict[str, list[str]]
    queues: list[str] | None = Field(
        description="The queues it takes runs from (null: a worker of before queues, all)"
    )

    @classmethod
    def of(cls, beat: WorkerBeat, now: datetime) -> WorkerOut:
        return cls(
            name=beat.name,
            live=beat.alive(now),
            started_at=beat.started_at,
            seen_at=beat.seen_at,
            serves={name: list(v) for name, v in beat.serves.items()},
            queues=None if beat.queues is None else list(beat.queues),
        )


class QueueOut(BaseModel):
    by_status: dict[str, int]
    due: int = Field(description="Runs due now, waiting for a worker")
    oldest_due_age_seconds: float
    oldest_in_flight_age_seconds: float
    due_by_queue: dict[str, int] = Field(
        description="Due runs of each named queue (the default queue's are the rest)"
    )
    running_by_queue: dict[str, int] = Field(
        description="Runs of each named queue that hold a worker now: its slots in use"
    )

    @classmethod
    def of(cls, stats: RunStats, now: datetime) -> QueueOut:
        return cls(
            by_status=stats.by_status,
            due=stats.due,
            due_by_queue=dict(stats.queue_due),
            running_by_queue=dict(stats.queue_running),
            oldest_due_age_seconds=_age(stats.oldest_due, now),
            oldest_in_flight_age_seconds=_age(stats.oldest_in_flight, now),
        )


def _age(since: datetime | None, now: datetime) -> float:
    return 0.0 if since is None else max(0.0, (now - since).total_seconds())


def _parsed(text: str) -> Any:
    """Stored JSON as its value (text that is not JSON, which durably never writes, as is).
    A value encrypted with a key this process does not hold reads `encrypted (key k2)`, as do
    such values in the fields of an event's data (a signal's data); secrets read `[redacted]`
    (durably.core.secrets)."""
    if sealed_key(text) is not None:
        return masked(text)
    try:
        value = json.loads(text)
    except ValueError:
        return text
    if isinstance(value, dict):  # a JSON text in a field (a signal's data): its secrets too
        value = {key: shown(part) if isinstance(part, str) else part for key, part in value.items()}
    return redact(value)


class UpgradeOut(BaseModel):
    run: str
    workflow: str
    from_version: str
    to_version: str
    outcome: str = Field(description="moved, would move (a dry run), diverges, or changed")
    why: str | None = Field(
        default=None,
        description="diverges: where the code and the run's history part; changed: what "
        "changed while it was rehearsed",
    )

    @classmethod
    def of(cls, upgraded: Upgrade) -> UpgradeOut:
        return cls(
            run=upgraded.run_id,
            workflow=upgraded.workflow,
            from_version=upgraded.from_version,
            to_version=upgraded.to_version,
            outcome=str(upgraded.outcome),
            why=upgraded.why,
        )


class AuditEntryOut(BaseModel):
    """An action a person or a token took (durably.core.audit): never a payload's value."""

    id: int = Field(description="The order entries were recorded in")
    at: datetime
    by: str = Field(description="Who acted: a token's name (API, dashboard), a user (CLI)")
    action: str = Field(description="start, cancel, pause, resume, retry, skip, fail, ...")
    via: str = Field(description="api, dashboard, cli or library")
    run: str | None = None
    workflow: str | None = None
    detail: dict[str, Any] = Field(
        default_factory=dict, description="A reason, a step's or signal's name; no payload"
    )


class AuditPageOut(BaseModel):
    entries: list[AuditEntryOut]
    next_cursor: str | None = Field(description="Pass it as `cursor` for the next page")

    @classmethod
    def of(cls, page: AuditPage) -> AuditPageOut:
        return cls(
            entries=[
                AuditEntryOut(
                    id=entry.id,
                    at=entry.at,
                    by=entry.by,
                    action=entry.action,
                    via=entry.via,
                    run=entry.run_id,
                    workflow=entry.workflow,
                    detail=json.loads(entry.detail) if entry.detail else {},
                )
                for entry in page.entries
            ],
            next_cursor=page.next_cursor,
        )

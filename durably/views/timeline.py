"""A run's history as a timeline a person can read: what ran, when, how long, with which key."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from durably.core.approvals import fold_approvals
from durably.core.children import ended_children, started_children, unfinished_children
from durably.core.control import fold_control
from durably.core.event_data import payload_of
from durably.core.history import Event, EventKind
from durably.core.payloads import (
    Failure,
    Restarted,
    RunStarted,
    Upgraded,
)
from durably.core.status import FINAL, RunStatus
from durably.errors import PayloadError
from durably.stores.records import RunRecord, WorkerBeat
from durably.views.details import detail, moment, short, started_pairs
from durably.views.explaining import explain, root_cause, runners

__all__ = ["TimelineRow", "describe_run", "timeline"]


@dataclass(frozen=True, slots=True)
class TimelineRow:
    at: datetime  # wall-clock time, as the store keeps it (UTC)
    offset_ms: float  # since the run started
    what: str
    step: str
    attempt: str
    duration_ms: float | None
    detail: str
    traceback: str | None = None  # a failed attempt of the user's code: where it raised


def timeline(events: Sequence[Event]) -> list[TimelineRow]:
    """One row per event; a step's outcome carries the duration since its attempt started."""
    if not events:
        return []
    origin = events[0].at
    started: dict[tuple[int | None, int | None], datetime] = {}
    rows = []
    for event in events:
        duration = None
        if event.kind is EventKind.STEP_STARTED:
            started[(event.position, event.attempt)] = event.at
        elif event.kind in _OUTCOMES:
            begun = started.get((event.position, event.attempt))
            duration = None if begun is None else _ms(event.at - begun)
        step = "" if event.name is None else f"#{event.position} {event.name}"
        if event.position is None and event.name is not None:  # a patch: no position
            step = event.name
        rows.append(
            TimelineRow(
                at=event.at,
                offset_ms=_ms(event.at - origin),
                what=str(event.kind),
                step=step,
                attempt="" if event.attempt is None else str(event.attempt),
                duration_ms=duration,
                detail=detail(event),
                traceback=_traceback(event),
            )
        )
    return rows


# an attempt's outcome: its duration is measured from its step_started
_OUTCOMES = frozenset(
    {EventKind.STEP_COMPLETED, EventKind.STEP_FAILED, EventKind.STEP_ATTEMPT_FAILED}
)


def describe_run(
    run: RunRecord,
    events: Sequence[Event] = (),
    workers: Sequence[WorkerBeat] = (),
    now: datetime | None = None,
    attributes: Mapping[str, str] | None = None,
) -> list[tuple[str, str]]:
    """The run's current state as label/value pairs (with its history: the approvals it
    waits for, and the last heartbeat any step recorded; with the workers and the time:
    which live workers can run its version; with its attributes: them, `name=value`)."""
    pairs = [
        ("now", explain(run, events, workers, now).sentence),
        ("run", run.id),
        ("workflow", run.workflow),
        ("status", str(run.status)),
        ("created", run.created_at.isoformat(timespec="milliseconds")),
        ("status changed", run.updated_at.isoformat(timespec="milliseconds")),
        ("input", short(run.input, 200)),
    ]
    if run.correlation_id is not None:
        pairs.append(("correlation", run.correlation_id))
    if run.queue is not None:
        pairs.append(("queue", run.queue))
    if run.key is not None:
        pairs.append(("key", run.key))
    if attributes:
        shown = ", ".join(f"{name}={value}" for name, value in sorted(attributes.items()))
        pairs.append(("attributes", shown))
    if run.priority:
        pairs.append(("priority", f"{run.priority} (a {run.priority}-minute head start)"))
    if run.debounce is not None:
        pairs.append(("debounce", _debounce(run)))
    if run.version is not None:
        pairs.append(("version", _version(run, workers, now)))
    if run.lease_owner:
        pairs.append(("leased by", f"{run.lease_owner} (epoch {run.lease_epoch})"))
    if run.available_at is not None and run.lease_owner and now and run.available_at <= now:
        pairs.append(("lease", _lapsed(run, workers, now)))
    elif run.available_at is not None:
        label = "lease expires" if run.lease_owner else "due"
        pairs.append((label, run.available_at.isoformat(timespec="milliseconds")))
    elif run.status is RunStatus.PENDING:
        waited = unfinished_children(events)
        if waited:
            pairs.append(("due", f"when its child run {waited[0]} ends (no timeout)"))
        else:
            pairs.append(("due", "when a signal comes (it waits with no timeout)"))
    pairs += _waits_and_progress(run, events)
    if run.result is not None:
        pairs.append(("result", short(run.result, 200)))
    if run.error is not None:
        pairs.append(("error", f"{run.error.error_class}: {run.error.message}"))
        cause = root_cause(events)
        if cause is not None and run.status is not RunStatus.CANCELLED:
            pairs.append(("root cause", cause))
    return pairs


def _debounce(run: RunRecord) -> str:
    """A debounced run's key and starts: still gathering them, or gathered."""
    starts = f"{run.gathered} start(s)"
    latest = "" if run.due_by is None else f", due by {moment(run.due_by)} at the latest"
    if run.gathering:
        return f"gathering the starts of key {run.debounce!r}: {starts} so far{latest}"
    return f"key {run.debounce!r}: {starts} gathered before a worker began it"


def _waits_and_progress(run: RunRecord, events: Sequence[Event]) -> list[tuple[str, str]]:
    pairs = _steering(run, events)
    for approval in fold_approvals(events):
        if approval.pending and run.status not in FINAL:
            until = "no timeout" if approval.until is None else f"until {moment(approval.until)}"
            then = "" if approval.until is None else f", then {approval.on_timeout}"
            escalated = " (escalated)" if approval.escalated else ""
            pairs.append(
                ("approval", f"{approval.name!r} waits for a decision{escalated}, {until}{then}")
            )
    beats = [event for event in events if event.kind is EventKind.STEP_HEARTBEAT]
    if beats:
        last = beats[-1]
        pairs.append(
            (
                "heartbeat",  # the last one any step recorded
                f"{moment(last.at)} #{last.position} {last.name} "
                f"attempt {last.attempt}: {short(last.data or '', 120)}",
            )
        )
    return pairs


def _steering(run: RunRecord, events: Sequence[Event]) -> list[tuple[str, str]]:
    """Where the run came from and went (restarts), and what people asked of it."""
    pairs = []
    for event in events:
        payload = payload_of(event) if event.kind in _LINKS else None
        if isinstance(payload, RunStarted):
            pairs += started_pairs(payload)
        elif isinstance(payload, Upgraded):
            pairs.append(
                (
                    "upgraded",
                    f"from version {payload.from_version} to {payload.to_version}, "
                    f"by {payload.by} at {moment(event.at)}",
                )
            )
        elif isinstance(payload, Restarted):
            pairs.append(
                (
                    "restarted as",
                    f"{payload.run} from step #{payload.from_step}, "
                    f"by {payload.by} at {moment(event.at)}",
                )
            )
    pairs += _children(events)
    if run.status in FINAL:
        return pairs
    control = fold_control(events)
    if control.cancel is not None:
        pairs.append(
            (
                "cancel",
                f"asked by {control.cancel.by} at {moment(control.cancel.at)}: "
                "its completed steps are being compensated",
            )
        )
    if control.pause is not None and run.status is RunStatus.PAUSED:
        why = f": {control.pause.reason}" if control.pause.reason else ""
        pairs.append(
            (
                "paused",
                f"by {control.pause.by} at {moment(control.pause.at)}{why}; it goes on when "
                "resumed",
            )
        )
    return pairs


_LINKS = frozenset({EventKind.RUN_STARTED, EventKind.RUN_RESTARTED, EventKind.UPGRADED})
_CHILDREN_SHOWN = 10


def _children(events: Sequence[Event]) -> list[tuple[str, str]]:
    """The child runs it started, each with how it ended (if it did, as far as it heard)."""
    started = started_children(events)
    ended = ended_children(events)
    pairs = []
    for child in started[:_CHILDREN_SHOWN]:
        end = ended.get(child.run)
        state = "not ended" if end is None else f"ended {end.status}"
        detached = ", detached" if child.detached else ""
        pairs.append(("child", f"{child.run} ({child.workflow}{detached}): {state}"))
    if len(started) > _CHILDREN_SHOWN:
        pairs.append(("child", f"... and {len(started) - _CHILDREN_SHOWN} more"))
    return pairs


def _traceback(event: Event) -> str | None:
    if event.data is None or event.kind not in _FAILURES:
        return None
    try:
        payload = payload_of(event)
    except PayloadError:
        return None
    return payload.error.traceback if isinstance(payload, Failure) else None


# the kinds whose error may carry the traceback of the user's code (a workflow body's error
# is shown once, on `compensating`; its `run_failed` repeats it)
_FAILURES = frozenset(
    {
        EventKind.STEP_ATTEMPT_FAILED,
        EventKind.STEP_FAILED,
        EventKind.COMPENSATION_ATTEMPT_FAILED,
        EventKind.COMPENSATION_FAILED,
        EventKind.COMPENSATING,
    }
)


def _ms(delta: object) -> float:
    from datetime import timedelta

    assert isinstance(delta, timedelta)
    return delta.total_seconds() * 1000


def _version(run: RunRecord, workers: Sequence[WorkerBeat], now: datetime | None) -> str:
    """The run's version, and, while it has yet to end, which live workers can run it."""
    if run.status in FINAL or now is None:
        return str(run.version)
    serving = [w.name for w in runners(run, workers, now)]  # a version is recorded here
    if serving:
        return f"{run.version} (run by: {', '.join(serving)})"
    live = [w for w in workers if w.alive(now) and run.workflow in w.serves]
    others = sorted({v for w in live for v in w.serves[run.workflow]})
    if others:
        return (
            f"{run.version}: no live worker runs it; theirs: {', '.join(others)}. Move it "
            "to their code if that code replays its history (durably upgrade MODULE:ATTR), "
            "or start a worker with the code it started on"
        )
    return f"{run.version} (no live worker runs workflow {run.workflow!r})"


def _lapsed(run: RunRecord, workers: Sequence[WorkerBeat], now: datetime) -> str:
    """A running run whose lease expired: its worker is presumed dead; who takes it over."""
    assert run.available_at is not None
    said = (
        f"expired at {moment(run.available_at)}: worker {run.lease_owner} presumed dead (its "
        "attempt in flight is lost)"
    )
    live = runners(run, workers, now)
    if live:
        return f"{said}; the next worker to poll takes it over ({', '.join(w.name for w in live)})"
    return f"{said}; no live worker runs it: start one (durably worker MODULE:ATTR)"

"""Fold a history into step records and decide, per step call, whether to replay or run."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from durably.core.event_data import read_payload
from durably.core.history import UNREADABLE_ROW, ErrorInfo, Event, EventKind
from durably.core.payloads import (
    ApprovalRequested,
    AttemptFailed,
    Claimed,
    Compensating,
    CompensationAttemptFailed,
    RunningAlone,
    SignalReceived,
    StepFailed,
    WaitStarted,
)
from durably.errors import NonDeterminismError, PayloadError

__all__ = [
    "CALL_KINDS",
    "Execute",
    "Replay",
    "RunPhase",
    "StepRecord",
    "WorkerDeaths",
    "check_followed",
    "check_known",
    "fold_deaths",
    "fold_run",
    "fold_steps",
    "next_action",
    "next_wait",
    "owed_undos",
    "progressed",
]


@dataclass(frozen=True, slots=True)
class StepRecord:
    """What the history says about the step call at one position, or about another durable
    call there (`call`: "timer", "signal", "value", "approval" or "child"; their names begin
    with "durably.")."""

    position: int
    name: str
    call: str = "step"
    attempts: int = 0  # attempts started (since the last manual retry)
    first_started_at: datetime | None = None  # of the current series of attempts
    # the latest step_started event (read its StepStarted only when needed: compensation)
    started: Event | None = None
    result: str | None = None  # JSON of the result, once completed
    error: ErrorInfo | None = None  # the final failure, once failed
    failure_reason: str = "terminal"  # why it failed: terminal, attempts exhausted, ...
    completed: bool = False
    in_flight: bool = False  # an attempt started and has no outcome: it is unknown
    # an attempt may have taken effect without an outcome to show for it (its worker died,
    # it timed out, it was cut off in flight), and no reconcile hook said it did not: if the
    # step never completes, it is still owed an undo
    maybe_happened: bool = False
    # No new attempt (nor gate check) before this: the last attempt failed with this retry
    # time (or a timer, signal or approval waits until then). A run can be claimed earlier
    # (a message woke it); it then waits again rather than retrying early. A breaker or
    # limit sets none: the gate itself answers each look.
    not_before: datetime | None = None
    waiting: bool = False  # a timer, signal or approval wait began and has not ended
    message: int | None = None  # the inbox message a signal wait took
    heartbeat: str | None = None  # the details (JSON) of the step's last recorded heartbeat
    completed_seq: int | None = None  # the seq of its completion: undos go in reverse of it

    @property
    def settled(self) -> bool:
        return self.completed or self.error is not None


@dataclass(frozen=True, slots=True)
class Replay:
    """The step already has an outcome: hand it back without running the body."""

    record: StepRecord


@dataclass(frozen=True, slots=True)
class Execute:
    """Run the body for real, as this attempt."""

    position: int
    attempt: int
    unknown: bool = False  # the previous attempt may have happened: reconcile first
    first_started_at: datetime | None = None
    not_before: datetime | None = None  # a pending retry or wait: suspend until then
    heartbeat: str | None = None  # the details the step's last recorded heartbeat gave


@dataclass(frozen=True, slots=True)
class RunPhase:
    """Where a run's history says it is, beyond its steps."""

    steps: list[StepRecord]
    compensating: ErrorInfo | None  # set once the run began compensating, with its failure
    final_status: str | None  # the status the run ends in once compensated
    compensated: frozenset[int]  # positions whose compensation completed
    compensation_attempts: dict[int, int]  # position -> attempts started
    deaths: WorkerDeaths
    # position -> when the failed undo is tried again (none while an attempt is under way)
    compensation_retry_at: dict[int, datetime] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class WorkerDeaths:
    """What the history says about the workers that died (or lost their lease) under a run.

    A worker that dies takes every run it holds down with it, so a death alone says nothing
    about which run caused it. A run taken over from a dead worker is a suspect. The suspects
    first run together with no other run (a `running_alone` event naming how many others),
    until each gets past the point where it was when the worker died; if a worker dies while
    they run together, each next runs strictly alone. A death while a run ran strictly alone
    is its own doing.
    """

    count: int = 0  # takeovers since the last manual retry, whoever caused them
    last_alone: bool = False  # the latest of those deaths happened while it ran strictly alone
    suspect: bool = False  # taken over, and not yet past that point running alone
    strict: bool = False  # the latest death happened among suspects: next, strictly alone

    def poison(self, limit: int) -> bool:
        """Whether the run is to be parked: more than `limit` workers died under it, and the
        last of them while it ran alone (so a run that merely shared a worker with a poison
        pill is never parked)."""
        return self.count > limit and self.last_alone


# Events that show the run got past the point where its worker died: user code ran to an
# outcome that was recorded (a step, a compensation, the workflow's own end).
_PROGRESS = frozenset(
    {
        EventKind.STEP_COMPLETED,
        EventKind.STEP_ATTEMPT_FAILED,
        EventKind.STEP_FAILED,
        EventKind.COMPENSATION_COMPLETED,
        EventKind.COMPENSATION_ATTEMPT_FAILED,
        EventKind.COMPENSATION_FAILED,
        EventKind.RUN_COMPLETED,
        EventKind.RUN_FAILED,
        EventKind.RUN_PARKED,
    }
)


def check_known(events: Iterable[Event]) -> None:
    """PayloadError if a history holds an event of a kind a newer durably wrote (replaying it
    without knowing what it means could take a path the run never took), or a row the store
    could not read."""
    for event in events:
        if event.kind == UNREADABLE_ROW:
            raise PayloadError(
                f"event #{event.seq} cannot be read from the store: {event.data}. Repair or "
                "remove the row, then retry the run (durably dlq retry); nothing of the run "
                "ran here"
            )
        if not event.kind.known:
            raise PayloadError(
                f"event #{event.seq} has the kind {str(event.kind)!r}, which this version of "
                "durably does not know: a newer durably wrote it. Run this workflow on workers "
                "with that version (then retry the run: durably dlq retry); nothing of the run "
                "ran here"
            )


def fold_deaths(events: Iterable[Event]) -> WorkerDeaths:
    count, last_alone, suspect, strict = 0, False, False, False
    alone, together = False, False  # this lease runs it alone; with other suspects
    for event in events:
        kind = event.kind
        if kind is EventKind.CLAIMED:
            # the substring first: decoding every claim's data costs ~15 µs a run, and only
            # a takeover has this key
            data = event.data
            takeover = data is not None and "took_over_from" in data
            if takeover and read_payload(event, Claimed).took_over_from is not None:
                count, suspect = count + 1, True
                # died while isolated (among suspects, or alone): from now on, strictly alone
                last_alone, strict = alone and not together, strict or alone
            alone = together = False  # a new lease: whether it runs alone is recorded anew
        elif kind is EventKind.RUNNING_ALONE:
            others = 0 if event.data is None else read_payload(event, RunningAlone).others
            alone, together = True, others > 0
        elif kind in _PROGRESS and alone:
            alone = suspect = strict = False  # past the point of the last death
        elif kind is EventKind.RUN_RETRIED:
            count, last_alone = 0, False  # a person looked; the suspicion stays
    return WorkerDeaths(count, last_alone, suspect, strict)


def progressed(events: Iterable[Event]) -> bool:
    """Whether `events` hold an outcome that moves a run past where its worker died."""
    return any(event.kind in _PROGRESS for event in events)


# The undo of the step at the event's position is done: by the engine, or by a person.
_UNDONE = frozenset({EventKind.COMPENSATION_COMPLETED, EventKind.COMPENSATION_SKIPPED})


def fold_run(events: Iterable[Event]) -> RunPhase:
    events = list(events)
    compensating: ErrorInfo | None = None
    final_status: str | None = None
    compensated: set[int] = set()
    attempts: dict[int, int] = {}
    retry_at: dict[int, datetime] = {}
    for event in events:
        if event.kind is EventKind.COMPENSATING:
            payload = read_payload(event, Compensating)
            compensating, final_status = payload.error, str(payload.then)
        elif event.kind is EventKind.COMPENSATION_STARTED and event.position is not None:
            attempts[event.position] = attempts.get(event.position, 0) + 1
            retry_at.pop(event.position, None)
        elif event.kind is EventKind.COMPENSATION_ATTEMPT_FAILED and event.position is not None:
            retry_at[event.position] = read_payload(event, CompensationAttemptFailed).retry_at
        elif event.kind in _UNDONE and event.position is not None:
            compensated.add(event.position)
        elif event.kind is EventKind.RUN_RETRIED:
            attempts.clear()  # compensations that failed get fresh attempts, at once
            retry_at.clear()
            if event.position is not None:  # steps run again: the failure is forgotten
                compensating = None
                compensated.clear()
    return RunPhase(
        fold_steps(events),
        compensating,
        final_status,
        frozenset(compensated),
        attempts,
        fold_deaths(events),
        retry_at,
    )


def owed_undos(phase: RunPhase) -> list[StepRecord]:
    """The steps a compensating run still owes an undo, in the order they are undone: every
    completed step, and every step whose last attempt's outcome is unknown (it may have taken
    effect: in flight when its worker died, or failed after it was cut off in flight), not
    undone yet; latest first (steps that ran at once, by durably.gather, are undone
    last-finished first; an unknown attempt counts from its start)."""
    owed = [
        record
        for record in phase.steps
        if record.call == "step"
        and (record.completed or record.in_flight or record.maybe_happened)
        and record.position not in phase.compensated
    ]
    owed.sort(key=_undo_order, reverse=True)
    return owed


def _undo_order(record: StepRecord) -> int:
    if record.completed:
        return record.completed_seq or 0
    return record.started.seq if record.started is not None else 0


# The kind of durable call each positioned event belongs to.
_CALL_OF = {
    EventKind.STEP_STARTED: "step",
    EventKind.STEP_COMPLETED: "step",
    EventKind.STEP_ATTEMPT_FAILED: "step",
    EventKind.STEP_FAILED: "step",
    EventKind.STEP_SKIPPED: "step",
    EventKind.STEP_RECONCILED: "step",
    EventKind.STEP_WAITING: "step",
    EventKind.TIMER_SET: "timer",
    EventKind.TIMER_FIRED: "timer",
    EventKind.SIGNAL_WAITING: "signal",
    EventKind.SIGNAL_RECEIVED: "signal",
    EventKind.SIGNAL_TIMED_OUT: "signal",
    EventKind.STEP_HEARTBEAT: "step",
    EventKind.VALUE_RECORDED: "value",
    EventKind.CHILD_STARTED: "child",
    EventKind.APPROVAL_REQUESTED: "approval",
    EventKind.APPROVAL_TOKEN: "approval",
    EventKind.APPROVAL_ESCALATED: "approval",
    EventKind.APPROVAL_DECIDED: "approval",
}


# The events that record a durable call at its position (a restarted run reuses them).
CALL_KINDS = frozenset(_CALL_OF)


def fold_steps(events: Iterable[Event]) -> list[StepRecord]:
    """One record per step position, in position order, from a run's events."""
    steps: dict[int, StepRecord] = {}
    undoing = False  # the run is being compensated: no step body runs any more
    for event in events:
        if event.kind is EventKind.RUN_RETRIED:
            if event.position is not None:  # None: a retry of the compensations only
                steps, undoing = _reopen(steps, event.position), False
            continue
        undoing = undoing or event.kind is EventKind.COMPENSATING
        call = _CALL_OF.get(event.kind)
        if call is None or event.position is None or event.name is None:
            continue
        known = steps.get(event.position) or StepRecord(event.position, event.name, call)
        record = _apply(known, event)
        if undoing and event.kind is EventKind.STEP_RECONCILED and not record.maybe_happened:
            record = replace(record, in_flight=False)  # found nothing, and no body follows
        steps[event.position] = record
    return [steps[position] for position in sorted(steps)]


def next_action(steps: Sequence[StepRecord], position: int, name: str) -> Replay | Execute:
    """Decide whether the step call at `position` replays or runs for real."""
    if position >= len(steps):
        return Execute(position, attempt=1)
    recorded = steps[position]
    if recorded.name != name:
        raise NonDeterminismError(position=position, recorded=recorded.name, called=name)
    if recorded.settled:
        return Replay(recorded)
    return Execute(
        position,
        attempt=recorded.attempts + 1,
        unknown=recorded.in_flight,
        first_started_at=recorded.first_started_at,
        not_before=recorded.not_before,
        heartbeat=recorded.heartbeat,
    )


def check_followed(steps: Sequence[StepRecord], position: int, ending: str) -> None:
    """The workflow body ended (`ending`: "returned", "raised ValueError", ...) having made
    `position` calls: NonDeterminismError if its history records a call from there on (the
    code changed to end earlier than the run did, and would leave recorded work behind)."""
    if position < len(steps):
        recorded = steps[position].name
        raise NonDeterminismError.ended_early(position=position, recorded=recorded, ending=ending)


def next_wait(steps: Sequence[StepRecord], position: int, name: str) -> StepRecord | None:
    """What the history holds of the timer, signal wait or value at `position` (None: the
    call is new), after the same determinism check as a step's."""
    if position >= len(steps):
        return None
    recorded = steps[position]
    if recorded.name != name:
        raise NonDeterminismError(position=position, recorded=recorded.name, called=name)
    return recorded


def _apply(known: StepRecord, event: Event) -> StepRecord:
    kind = event.kind
    if known.call != "step":
        return _apply_wait(known, event)
    if kind is EventKind.STEP_STARTED:
        return replace(
            known,
            maybe_happened=known.maybe_happened or known.in_flight,  # the last one was lost
            attempts=known.attempts + 1,
            first_started_at=known.first_started_at or event.at,
            started=event,
            in_flight=True,
            not_before=None,
        )
    if kind in (EventKind.STEP_COMPLETED, EventKind.STEP_SKIPPED):
        return replace(
            known,
            result=event.data,
            completed=True,
            error=None,
            in_flight=False,
            not_before=None,
            completed_seq=event.seq,
        )
    if kind is EventKind.STEP_FAILED:
        failed = read_payload(event, StepFailed)
        return replace(
            known,
            error=failed.error,
            failure_reason=failed.reason,
            in_flight=False,
            not_before=None,
            maybe_happened=known.maybe_happened or failed.unknown,
        )
    if kind is EventKind.STEP_ATTEMPT_FAILED:
        # a timed-out attempt, or one whose reconcile did not conclude, may still have
        # happened: it stays unknown, so the next attempt reconciles first
        failed_attempt = read_payload(event, AttemptFailed)
        return replace(
            known,
            in_flight=failed_attempt.unknown,
            not_before=failed_attempt.retry_at,
            maybe_happened=known.maybe_happened or failed_attempt.unknown,
        )
    if kind is EventKind.STEP_WAITING:  # no attempt was made; at each look the gate itself
        return known  # says whether to wait on (a run is woken early when the gate opens)
    if kind is EventKind.STEP_HEARTBEAT:
        return replace(known, heartbeat=event.data)
    # reconciled: found nothing under the step's key (no earlier attempt happened); the body
    # runs next, under this attempt, which is in flight until its outcome (found: the
    # completion follows at once)
    return replace(known, maybe_happened=False)


def _apply_wait(known: StepRecord, event: Event) -> StepRecord:
    kind = event.kind
    if kind in (EventKind.TIMER_SET, EventKind.SIGNAL_WAITING):
        until = read_payload(event, WaitStarted).until
        return replace(
            known,
            attempts=1,
            first_started_at=event.at,
            started=event,
            not_before=until,
            waiting=True,
        )
    if kind is EventKind.APPROVAL_REQUESTED:
        until = read_payload(event, ApprovalRequested).until
        return replace(
            known,
            attempts=1,
            first_started_at=event.at,
            started=event,
            not_before=until,
            waiting=True,
        )
    if kind is EventKind.APPROVAL_ESCALATED:
        return replace(known, not_before=None)  # from now on only a person ends the wait
    if kind is EventKind.APPROVAL_DECIDED:
        return replace(known, result=event.data, completed=True, waiting=False)
    if kind is EventKind.APPROVAL_TOKEN:
        return known
    if kind is EventKind.TIMER_FIRED:
        return replace(known, result="null", completed=True, waiting=False)
    if kind is EventKind.SIGNAL_RECEIVED:
        received = read_payload(event, SignalReceived)
        return replace(
            known,
            result=received.data or "null",
            completed=True,
            waiting=False,
            message=received.message,
        )
    if kind is EventKind.SIGNAL_TIMED_OUT:
        error = ErrorInfo("durably.errors.SignalTimeout", signal_timeout_message(known))
        return replace(known, error=error, failure_reason="timed out", waiting=False)
    return replace(known, result=event.data, completed=True)  # value_recorded, child_started


def signal_timeout_message(record: StepRecord) -> str:
    name = record.name.partition(":")[2]
    until = "" if record.not_before is None else f" by {record.not_before.isoformat()}"
    return f"no signal {name!r} came{until}"


def _reopen(steps: dict[int, StepRecord], start: int) -> dict[int, StepRecord]:
    """A manual retry: every step from `start` on runs again, with fresh attempts; one whose
    earlier attempt may have taken effect keeps saying so (its next attempt reconciles
    first, and it is owed an undo if the run is undone)."""
    kept = {position: record for position, record in steps.items() if position < start}
    for position, record in steps.items():
        if position >= start and (record.in_flight or record.maybe_happened):
            # its last start stays: the input its undo is given, and its place among undos
            kept[position] = StepRecord(
                position,
                record.name,
                record.call,
                started=record.started,
                in_flight=True,
                maybe_happened=True,
            )
    return kept

"""What a person does with a run that needs one: the dead-letter list and its actions.

Each action leases the parked run like a worker would (so it is fenced against any worker),
appends an event saying who did what, and hands the run back to the workers. These are the
helpers of durably.client.client, the one way in: call them through a Client (app.client), which
also checks inputs and wakes the workers of its process.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from durably.core.approvals import awaiting_approval
from durably.core.audit import Action, Audit, Via, audit_of, of_job
from durably.core.event_data import encode_payload, read_payload
from durably.core.history import ErrorInfo, Event, EventKind, error_class_name
from durably.core.payloads import (
    Command,
    Compensating,
    CompensationFailed,
    Result,
    RunFailed,
    RunRetried,
)
from durably.core.replay import StepRecord, fold_run
from durably.core.status import PARKED, RunStatus, check_transition
from durably.errors import DurablyError, RunNotFound
from durably.errors import StepFailed as StepFailedError
from durably.runtime.lineage import cancel_children, parent_notice
from durably.stores.protocol import Store
from durably.stores.records import Checkpoint, Claim, Message, RunRecord

__all__ = [
    "ACTION_LEASE",
    "DeadLetter",
    "dead_letters",
    "fail",
    "failed_step",
    "failed_undo",
    "hand_back",
    "last_failed_step",
    "retry",
    "skip_step",
    "take",
]

ACTION_LEASE = timedelta(minutes=1)


@dataclass(frozen=True, slots=True)
class DeadLetter:
    run_id: str
    workflow: str
    status: RunStatus
    # The root cause: the failed step's own error (its class as the step raised it), else
    # the run's; `run_error` is the run's as recorded (StepFailed, or the undo that failed).
    error: ErrorInfo | None
    step: str | None  # the step that failed, if a step did
    attempts: int
    parked_at: datetime
    reason: str | None = None  # why the step failed for good: attempts exhausted, ...
    run_error: ErrorInfo | None = None
    # compensation_failed: `step` is the step whose undo fails, and `error`, `attempts` and
    # `reason` are the undo's (what a person must fix, or do by hand and skip)
    undo: bool = False


def dead_letters(store: Store, *, limit: int = 100) -> list[DeadLetter]:
    """Runs parked for a person, newest first; not those that wait for an approval (they are
    listed with durably.client.approvals.pending_approvals). The store finds them by their
    rows: `limit` runs read, each with its history."""
    runs = store.parked(decisions=False, limit=limit)
    return [_dead_letter(run, store.history(run.id)) for run in runs]


def retry(
    store: Store,
    run_id: str,
    *,
    now: datetime,
    by: str,
    via: Via,
    from_step: int | None = None,
    job: str | None = None,
) -> None:
    """Fresh attempts for a parked run: its failed step runs again with the same idempotency
    key (or every step from `from_step`, which must not have completed); a failed
    compensation is tried again. Each action here is recorded in the audit trail with the
    commit that hands the run back (as an action of the bulk job `job`, if one acts)."""
    if from_step is not None:
        _check_reopenable(store, run_id, from_step)
    if awaiting_approval(store.history(run_id)):
        raise DurablyError(
            f"cannot retry run {run_id!r}: it waits for a person's decision on an approval, "
            f"not for a fix; approve or reject it (durably approvals list), or fail it"
        )
    claim = take(store, run_id, now=now, by=by, action="retry")
    phase = fold_run(claim.events)
    if phase.compensating is not None and from_step is None:
        position = None  # retry the compensations
    else:
        position = from_step if from_step is not None else _stopped_at(phase.steps)
    data = encode_payload(RunRetried(by, position))
    hand_back(
        store,
        claim,
        now,
        Event(_next(claim), EventKind.RUN_RETRIED, now, position, None, None, data),
        audit=of_job(audit_of(Action.RETRY, by, via, from_step=from_step), job),
    )


def skip_step(
    store: Store,
    run_id: str,
    *,
    now: datetime,
    by: str,
    via: Via,
    result_json: str = "null",
    recorded_as: Action = Action.SKIP,
) -> None:
    """Give the failed step (or an escalation) a result by hand; the workflow goes on with it.
    `recorded_as`: the action in the audit trail (an escalation's answer: approve, reject)."""
    try:
        json.loads(result_json)
    except ValueError as exc:
        raise DurablyError(f"the result to record is not JSON: {exc}") from None
    action, statuses = "skip a step of", {RunStatus.NEEDS_ATTENTION, RunStatus.COMPENSATION_FAILED}
    _check_status(store, run_id, action, statuses)  # checked before the run is touched
    if failed_undo(store.history(run_id)) is not None:
        _skip_undo(store, run_id, now=now, by=by, via=via, result_json=result_json)
        return
    if last_failed_step(store.history(run_id)) is None:
        raise DurablyError(f"run {run_id!r} has no failed step to skip; retry or fail it instead")
    claim = take(store, run_id, now=now, by=by, action=action, statuses=statuses)
    step = last_failed_step(claim.events)
    if step is None:  # changed in between: let a worker look at it again
        hand_back(store, claim, now, Event(_next(claim), EventKind.RELEASED, now))
        raise DurablyError(f"run {run_id!r} changed while acting on it; look again and retry")
    data = encode_payload(Result(result_json))
    event = Event(_next(claim), EventKind.STEP_SKIPPED, now, step.position, step.name, None, data)
    hand_back(store, claim, now, event, audit=audit_of(recorded_as, by, via, step=step.name))


def _skip_undo(
    store: Store, run_id: str, *, now: datetime, by: str, via: Via, result_json: str
) -> None:
    """A person did the failed undo by hand: record that, and let the rest be undone."""
    if json.loads(result_json) is not None:
        raise DurablyError(
            f"run {run_id!r} is parked because an undo failed: skipping it records that you did "
            "that undo by hand, which has no result to give; skip it without one"
        )
    action = "skip the failed undo of"
    claim = take(store, run_id, now=now, by=by, action=action, statuses=_UNDO_FAILED)
    undo = failed_undo(claim.events)
    if undo is None:  # changed in between: let a worker look at it again
        hand_back(store, claim, now, Event(_next(claim), EventKind.RELEASED, now))
        raise DurablyError(f"run {run_id!r} changed while acting on it; look again and retry")
    position, name = undo
    data = encode_payload(Command(by))
    event = Event(_next(claim), EventKind.COMPENSATION_SKIPPED, now, position, name, None, data)
    hand_back(store, claim, now, event, audit=audit_of(Action.SKIP, by, via, undo=name))


_UNDO_FAILED = {RunStatus.COMPENSATION_FAILED}


def failed_undo(events: Sequence[Event]) -> tuple[int, str] | None:
    """The position and step of the undo that parked a run `compensation_failed` (failed for
    good, or not registered), while it is not done or skipped; None if there is none."""
    undone = fold_run(events).compensated
    for event in reversed(events):
        if event.kind is EventKind.RUN_RETRIED:
            return None  # a person retried since: it no longer parks the run
        if event.kind is EventKind.COMPENSATION_FAILED and event.position is not None:
            if event.position in undone:
                return None
            return event.position, event.name or ""
    return None


def failed_step(store: Store, run_id: str) -> str | None:
    """The name of the step a parked run failed at (the one skip_step gives a result), if any;
    None for a run parked by an undo (a skip records that a person did the undo)."""
    history = store.history(run_id)
    step = None if failed_undo(history) is not None else last_failed_step(history)
    return None if step is None else step.name


def fail(store: Store, run_id: str, *, now: datetime, by: str, via: Via, reason: str) -> None:
    """Give up on a parked run, or one whose worker died (its lease expired): compensate its
    completed steps, then end it `failed`."""
    claim = take(store, run_id, now=now, by=by, action="fail", statuses=_FAILABLE)
    phase = fold_run(claim.events)
    error = ErrorInfo("durably.FailedByPerson", f"{reason} (by {by})")
    audit = audit_of(Action.FAIL, by, via, reason=reason)
    if phase.compensating is not None:  # its compensation already failed: end it as is
        data = encode_payload(RunFailed(error))
        event = Event(_next(claim), EventKind.RUN_FAILED, now, None, None, None, data)
        notice = parent_notice(run_id, claim.events, RunStatus.FAILED, error=error)
        status = RunStatus.FAILED
        _commit(store, claim, now, event, status=status, error=error, messages=notice, audit=audit)
        return
    data = encode_payload(Compensating(error, RunStatus.FAILED))
    event = Event(_next(claim), EventKind.COMPENSATING, now, None, None, None, data)
    why = f"its parent run was failed by {by}: {reason}"
    children = cancel_children(run_id, claim.events, why)
    hand_back(store, claim, now, event, messages=children, audit=audit)


_FAILABLE = PARKED | {RunStatus.RUNNING}  # running: only with its lease expired (Store.take)


def _check_reopenable(store: Store, run_id: str, from_step: int) -> None:
    completed = [
        record
        for record in fold_run(store.history(run_id)).steps
        if record.position >= from_step and record.completed
    ]
    if completed:
        first = completed[0]
        raise DurablyError(
            f"cannot retry run {run_id!r} from step #{from_step}: step #{first.position} "
            f"({first.name!r}) completed, and a completed step never runs again (its recorded "
            "result stands); retry from a later step, or without from_step"
        )


def take(
    store: Store,
    run_id: str,
    *,
    now: datetime,
    by: str,
    action: str,
    statuses: frozenset[RunStatus] | set[RunStatus] = PARKED,
    refusal: Callable[[], str] | None = None,
) -> Claim:
    """Lease a run for a person's action, if its status is one of `statuses`; else raise,
    saying why (`refusal()`, when given, says it in the action's own words)."""
    claim = store.take(run_id, f"person:{by}", statuses, now=now, lease=ACTION_LEASE)
    if claim is None:
        if refusal is not None:
            raise DurablyError(refusal())
        _check_status(store, run_id, action, statuses)
        raise DurablyError(f"run {run_id!r} changed while acting on it; look again and retry")
    return claim


def _check_status(
    store: Store, run_id: str, action: str, statuses: frozenset[RunStatus] | set[RunStatus]
) -> None:
    """Refuse, with the reason, unless the run exists and is in one of `statuses`."""
    run = store.get_run(run_id)
    if run is None:
        raise RunNotFound(f"no run has the id {run_id!r} in {store.url}")
    if run.status is RunStatus.RUNNING and run.status in statuses:
        until = "" if run.available_at is None else f" until {run.available_at.isoformat()}"
        raise DurablyError(
            f"cannot {action} run {run_id!r}: worker {run.lease_owner} holds it{until}. "
            "Cancel it instead, or, if that worker is dead, release its runs "
            f"(durably runs release {run_id}) and act then"
        )
    if run.status not in statuses:
        allowed = " or ".join(sorted(statuses))
        raise DurablyError(f"cannot {action} run {run_id!r}: it is {run.status}, not {allowed}")


def hand_back(
    store: Store,
    claim: Claim,
    now: datetime,
    *events: Event,
    consumed: tuple[int, ...] = (),
    messages: tuple[Message, ...] = (),
    audit: Audit | None = None,
) -> None:
    """Hand a run leased for a person's action back to the workers, due now, with `events`
    appended (and the inbox messages they fold in, `consumed`, taken out of the inbox;
    `messages` sent to other runs; and the action's `audit` entry, in the same transaction)."""
    _commit(
        store,
        claim,
        now,
        *events,
        status=RunStatus.PENDING,
        available_at=now,
        consumed=consumed,
        messages=messages,
        audit=audit,
    )


def _commit(
    store: Store,
    claim: Claim,
    now: datetime,
    *events: Event,
    status: RunStatus,
    error: ErrorInfo | None = None,
    available_at: datetime | None = None,
    consumed: tuple[int, ...] = (),
    messages: tuple[Message, ...] = (),
    audit: Audit | None = None,
) -> None:
    check_transition(RunStatus.RUNNING, status)  # the person's action holds the run's lease
    checkpoint = Checkpoint(
        claim.run_id,
        claim.epoch,
        events,
        status,
        None,
        error,
        available_at,
        consumed,
        messages=messages,
        audit=audit,
    )
    if not store.commit([checkpoint], now=now)[0]:
        raise DurablyError(f"run {claim.run_id!r} changed while acting on it; look again and retry")


def _next(claim: Claim) -> int:
    return claim.events[-1].seq + 1


def _stopped_at(steps: list[StepRecord]) -> int:
    """Where the workflow stopped: its failed step, or after its last step."""
    failed = [record.position for record in steps if record.error is not None]
    return failed[-1] if failed else len(steps)


def last_failed_step(events: Sequence[Event]) -> StepRecord | None:
    """The step a parked run failed at: its latest failed one, if any."""
    failed = [record for record in fold_run(events).steps if record.error is not None]
    return failed[-1] if failed else None


def _dead_letter(run: RunRecord, events: list[Event]) -> DeadLetter:
    undo = _failing_undo(events) if run.status is RunStatus.COMPENSATION_FAILED else None
    if undo is not None:
        name, failed = undo
        return DeadLetter(
            run_id=run.id,
            workflow=run.workflow,
            status=run.status,
            error=failed.error,
            step=name,
            attempts=failed.attempts,
            parked_at=run.updated_at,
            reason=failed.reason,
            run_error=run.error,
            undo=True,
        )
    step = last_failed_step(events)
    # the step's own error is the root cause when its failure parked the run, or when an undo
    # failed after it; a poison pill or a replay that no longer fits is the run's own
    caused_by_step = run.status is RunStatus.COMPENSATION_FAILED or step_parked(run)
    return DeadLetter(
        run_id=run.id,
        workflow=run.workflow,
        status=run.status,
        error=step.error
        if step is not None and step.error is not None and caused_by_step
        else run.error,
        step=None if step is None else step.name,
        attempts=0 if step is None else step.attempts,
        parked_at=run.updated_at,
        reason=None if step is None else step.failure_reason,
        run_error=run.error,
    )


def _failing_undo(events: Sequence[Event]) -> tuple[str, CompensationFailed] | None:
    """The step whose undo parks the run, and how the undo failed."""
    undo = failed_undo(events)
    if undo is None:
        return None
    position, name = undo
    for event in reversed(events):
        if event.kind is EventKind.COMPENSATION_FAILED and event.position == position:
            return name, read_payload(event, CompensationFailed)
    return None


def release(store: Store, run_id: str, *, now: datetime) -> tuple[str, int]:
    """The run's worker is dead: end the leases it holds, this run's and its others', so
    that the next worker to poll takes them over now. Its name and how many were released."""
    run = store.get_run(run_id)
    if run is None:
        raise RunNotFound(f"no run has the id {run_id!r} in {store.url}")
    if run.status is not RunStatus.RUNNING or run.lease_owner is None:
        raise DurablyError(
            f"cannot release run {run_id!r}: it is {run.status}, held by no worker; only a "
            "running run's lease can be released"
        )
    return run.lease_owner, store.expire_leases(run.lease_owner, now=now)


def step_parked(run: RunRecord) -> bool:
    """Whether a step's failure parked the run (its error is the StepFailed that wraps the
    step's own), rather than replay, a poison pill or an input that does not read."""
    return run.error is not None and run.error.error_class == STEP_FAILED


STEP_FAILED = error_class_name(StepFailedError)

"""A person steers a run: cancel it, pause it, resume it.

Each command is a message to the run's inbox (durably.core.control), so it reaches the run
wherever it is and is recorded in its history with who sent it and why:
- a pending run (waiting for its due time, a timer, a signal) is made due now; the worker
  that claims it folds the command first;
- a running run hears it from its worker within about a second: a cancel cancels its async
  step in flight, a pause lets the step finish and stops the run before its next one;
- a paused or parked run is leased for the command (fenced like any person's action) and
  handed back to the workers with the command folded in.
A cancelled run's completed steps are compensated in reverse order, then it ends
`cancelled`. These are the helpers of durably.client.client, the one way in.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from durably.client import dead_letters
from durably.core.audit import Action, Via, audit_of, of_job
from durably.core.control import CANCEL, CANCEL_KEY, PAUSE, RESUME, fold_control, reason_data
from durably.core.event_data import encode_payload
from durably.core.history import Event, EventKind
from durably.core.payloads import Released
from durably.core.replay import fold_run
from durably.core.status import FINAL, PARKED, RunStatus
from durably.errors import DurablyError, RunNotFound
from durably.stores.protocol import Store
from durably.stores.records import Message, RunRecord, SentOutcome

__all__ = ["Steered", "cancel", "pause", "resume"]


@dataclass(frozen=True, slots=True)
class Steered:
    """What a command did: `changed` False when there was nothing to do (said in `note`);
    `status` is the run's when the command was given."""

    run_id: str
    action: str  # cancel, pause, resume
    changed: bool
    status: RunStatus
    note: str


def cancel(
    store: Store,
    run_id: str,
    *,
    now: datetime,
    by: str,
    reason: str | None,
    via: Via,
    job: str | None = None,
) -> Steered:
    """Cancel the run: the body stops, completed steps are compensated, it ends `cancelled`.
    Recorded in the audit trail with the message that carries it, when that is stored (as an
    action of the bulk job `job`, if one acts: durably.core.bulk)."""
    run = _run(store, run_id)
    if run.status is RunStatus.CANCELLED:
        return Steered(run_id, CANCEL, False, run.status, "it is cancelled already")
    _refuse_finished(run, "cancel")
    if run.status is RunStatus.COMPENSATION_FAILED:
        raise DurablyError(
            f"cannot cancel run {run_id!r}: undoing its steps failed for good; "
            "a cancel would undo nothing more. Retry its compensations (durably dlq retry) or "
            "fail it (durably dlq fail)"
        )
    history = store.history(run_id)
    earlier = fold_control(history).cancel
    if earlier is not None:
        return Steered(run_id, CANCEL, False, run.status, _cancelled_already(earlier.by))
    undoing = fold_run(history)
    if undoing.compensating is not None:  # failed or timed out already: it is being undone
        then = undoing.final_status or "failed"
        why = undoing.compensating.error_class
        note = f"it is being undone already after {why}; it ends {then} once that is done"
        if run.status is RunStatus.PAUSED:
            note += " (it is paused: resume it to let the undo go on)"
        return Steered(run_id, CANCEL, False, run.status, note)
    audit = of_job(audit_of(Action.CANCEL, by, via, reason=reason), job)
    message = Message(run_id, CANCEL, by, None, reason_data(reason), CANCEL_KEY, audit=audit)
    sent = store.send(message, now=now)
    if sent.outcome is SentOutcome.DUPLICATE:
        return Steered(run_id, CANCEL, False, run.status, _cancelled_already(None))
    status = _sent(sent.outcome, sent.status, run_id, "cancel")
    if status is RunStatus.RUNNING:  # paused or parked since? then it waits for no worker
        status = _run(store, run_id).status
    if status in _HANDED_BACK:
        _hand_back(store, run_id, now=now, by=by, action="cancel", statuses={status})
    return Steered(run_id, CANCEL, True, status, _CANCEL_NOTES.get(status, _CANCEL_NOTE))


def pause(
    store: Store,
    run_id: str,
    *,
    now: datetime,
    by: str,
    reason: str | None,
    via: Via,
    job: str | None = None,
) -> Steered:
    """Pause the run: it starts no new step or undo (one in flight finishes) until resumed."""
    run = _run(store, run_id)
    _refuse_finished(run, "pause")
    if run.status is RunStatus.PAUSED:
        return Steered(run_id, PAUSE, False, run.status, "it is paused already")
    if run.status in PARKED:
        raise DurablyError(
            f"cannot pause run {run_id!r}: it is {run.status}, so nothing runs until a person "
            "acts on it (durably dlq, durably approvals); a pause is for a pending or running run"
        )
    audit = of_job(audit_of(Action.PAUSE, by, via, reason=reason), job)
    message = Message(run_id, PAUSE, by, None, reason_data(reason), _once(), audit=audit)
    status = _sent(store.send(message, now=now).outcome, run.status, run_id, "pause")
    note = (
        "its step in flight finishes; it stops before its next step"
        if status is RunStatus.RUNNING
        else "a worker marks it paused now; nothing more runs until it is resumed"
    )
    return Steered(run_id, PAUSE, True, status, note)


def resume(
    store: Store, run_id: str, *, now: datetime, by: str, via: Via, job: str | None = None
) -> Steered:
    """Resume a paused run (or withdraw a pause that has not reached it yet)."""
    run = _run(store, run_id)
    _refuse_finished(run, "resume")
    on_its_way = run.status is not RunStatus.PAUSED and (
        _pause_on_its_way(store, run_id)  # still in its inbox, or taken in, not stopped for
        or fold_control(store.history(run_id)).pause is not None
    )
    if run.status is not RunStatus.PAUSED and not on_its_way:
        return Steered(run_id, RESUME, False, run.status, f"it is not paused (it is {run.status})")
    audit = of_job(audit_of(Action.RESUME, by, via), job)
    message = Message(run_id, RESUME, by, dedupe_key=_once(), audit=audit)
    status = _sent(
        store.send(message, now=now).outcome,
        run.status,
        run_id,
        "resume",
    )
    if status is RunStatus.PAUSED:
        _hand_back(store, run_id, now=now, by=by, action="resume", statuses={status})
        return Steered(run_id, RESUME, True, status, "it goes on from where it stopped")
    return Steered(run_id, RESUME, True, status, "the pause on its way to it is withdrawn")


# -- helpers --------------------------------------------------------------------------------

_HANDED_BACK = frozenset({RunStatus.PAUSED, RunStatus.NEEDS_ATTENTION})
_CANCEL_NOTE = (
    "a worker stops it at its next step, compensates its completed steps and ends it cancelled"
)
_CANCEL_NOTES = {
    RunStatus.RUNNING: "its async step in flight is cancelled (a sync one finishes first), "
    "then its completed steps are compensated and it ends cancelled",
    RunStatus.PENDING: "a worker takes it up now, compensates its completed steps and ends it "
    "cancelled",
}


def _run(store: Store, run_id: str) -> RunRecord:
    run = store.get_run(run_id)
    if run is None:
        raise RunNotFound(f"no run has the id {run_id!r} in {store.url}")
    return run


def _refuse_finished(run: RunRecord, action: str) -> None:
    if run.status in FINAL:
        raise DurablyError(
            f"cannot {action} run {run.id!r}: it has finished ({run.status}), and a finished "
            "run does not change. To run it again from a step: durably runs restart"
        )


def _cancelled_already(by: str | None) -> str:
    who = f" by {by}" if by else ""
    return f"it is being cancelled already{who}; it ends cancelled once its steps are undone"


def _sent(outcome: SentOutcome, status: RunStatus | None, run_id: str, action: str) -> RunStatus:
    """The run's status when the command reached its inbox; refused if it went meanwhile."""
    if outcome is SentOutcome.NO_RUN:
        raise RunNotFound(f"no run has the id {run_id!r}")
    if outcome is SentOutcome.ENDED:
        raise DurablyError(f"cannot {action} run {run_id!r}: it has just finished ({status})")
    assert status is not None
    return status


def _once() -> str:
    """A dedupe key of one command: a send tried again after its answer was lost is not
    stored twice."""
    return f"durably:{uuid.uuid4().hex}"


def _pause_on_its_way(store: Store, run_id: str) -> bool:
    """Whether the run's inbox holds a pause that no resume follows yet."""
    paused = False
    for message in store.mail([run_id]).get(run_id, ()):
        paused = {PAUSE: True, RESUME: False}.get(message.kind, paused)
    return paused


def _hand_back(
    store: Store,
    run_id: str,
    *,
    now: datetime,
    by: str,
    action: str,
    statuses: frozenset[RunStatus] | set[RunStatus],
) -> None:
    """Lease a paused or parked run and hand it back due now, the command folded in. If it
    left those statuses meanwhile (a person acted), a worker folds the command instead."""
    claim = store.take(run_id, f"person:{by}", statuses, now=now, lease=dead_letters.ACTION_LEASE)
    if claim is None:
        return
    seq = claim.events[-1].seq + 1
    why = encode_payload(Released(f"handed back to the workers for a {action} by {by}"))
    events = [Event(seq, EventKind.RELEASED, now, data=why)]
    events += [
        Event(seq + 1 + n, EventKind.MESSAGE_RECEIVED, now, data=encode_payload(m.received()))
        for n, m in enumerate(claim.inbox)
    ]
    consumed = tuple(message.id for message in claim.inbox)
    dead_letters.hand_back(store, claim, now, *events, consumed=consumed)

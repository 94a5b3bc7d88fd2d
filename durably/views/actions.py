"""Which of a person's actions a run's state allows, as the client would accept them: the
dashboard offers these and no others (a button that is always refused is a trap)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from enum import StrEnum

from durably.client.dead_letters import failed_undo, last_failed_step, step_parked
from durably.core.approvals import awaiting_approval, fold_approvals
from durably.core.history import Event
from durably.core.status import FINAL, PARKED, RunStatus
from durably.stores.records import RunRecord

__all__ = ["Action", "allowed"]


class Action(StrEnum):
    RETRY = "retry"  # fresh attempts for a parked run
    SKIP_STEP = "skip step"  # give the failed step a result
    SKIP_UNDO = "skip undo"  # a person did the failed undo by hand
    FAIL = "fail"  # give up: compensate, then fail
    DECIDE = "decide"  # approve or reject a pending approval
    PAUSE = "pause"
    RESUME = "resume"
    CANCEL = "cancel"
    RELEASE = "release"  # its worker is dead: take its lease back now
    SIGNAL = "signal"  # a run that has yet to end, and is not stuck undoing, can take one


def allowed(run: RunRecord, events: Sequence[Event], now: datetime) -> frozenset[Action]:
    """The actions the run's state allows now."""
    status = run.status
    if status in FINAL:
        return frozenset()
    found: set[Action] = set()
    if any(approval.pending for approval in fold_approvals(events)):
        found.add(Action.DECIDE)
    if status in PARKED:
        found.add(Action.FAIL)
    if status in PARKED and not awaiting_approval(events):
        found.add(Action.RETRY)
        if status is RunStatus.COMPENSATION_FAILED and failed_undo(events) is not None:
            found.add(Action.SKIP_UNDO)
        elif step_parked(run) and last_failed_step(events) is not None:
            found.add(Action.SKIP_STEP)
    if status is RunStatus.PAUSED:
        found.add(Action.RESUME)
    elif status not in PARKED:
        found.add(Action.PAUSE)
    if status is not RunStatus.COMPENSATION_FAILED:
        found.add(Action.CANCEL)
    if status is not RunStatus.COMPENSATION_FAILED:  # a parked run keeps it for later
        found.add(Action.SIGNAL)
    lapsed = run.available_at is not None and run.available_at <= now
    if status is RunStatus.RUNNING and lapsed:
        found |= {Action.RELEASE, Action.FAIL}
    return frozenset(found)

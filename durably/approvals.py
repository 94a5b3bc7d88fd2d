"""What a person does with an approval (durably.approval): list the ones waiting, decide one.

A decision leases the parked run like a worker would (so it is fenced against any worker and
against a second decision), appends `approval_decided` at the approval's position, and hands
the run back due at once. Only one decision lands: the second finds the approval decided and
says by whom. Escalations (durably.escalate) wait in the same list and are answered through
it too. These are helpers of durably.client, the one way in.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from durably.core.approvals import (
    ESCALATION,
    Approval,
    awaiting_approval,
    fold_approvals,
    parse_token,
)
from durably.core.history import Event, EventKind
from durably.core.payloads import Decision, encode_payload
from durably.core.status import RunStatus
from durably.errors import DurablyError, RunNotFound
from durably.operations import dead_letters, hand_back, take
from durably.stores.base import Store

__all__ = ["PendingApproval", "decide", "decide_with_token", "pending_approvals"]

_WAITING = frozenset({RunStatus.NEEDS_ATTENTION})


@dataclass(frozen=True, slots=True)
class PendingApproval:
    """An approval (or an escalation: `name` "durably.escalate") waiting for a decision."""

    run_id: str
    workflow: str
    name: str
    requested_at: datetime
    until: datetime | None  # when it times out (None: never; the workflow's deadline ends it)
    on_timeout: str  # reject, approve, escalate ("" for an escalation)
    details: str | None  # JSON for the person (an escalation's: its reason)
    escalated: bool = False


def pending_approvals(store: Store, *, limit: int = 100) -> list[PendingApproval]:
    """Approvals and escalations waiting for a person, oldest request first."""
    found: list[PendingApproval] = []
    for run in store.runs(status=RunStatus.NEEDS_ATTENTION, limit=limit):
        events = store.history(run.id)
        if awaiting_approval(events):
            found += [
                PendingApproval(
                    run.id,
                    run.workflow,
                    approval.name,
                    approval.requested_at,
                    approval.until,
                    approval.on_timeout,
                    approval.details,
                    approval.escalated,
                )
                for approval in fold_approvals(events)
                if approval.pending
            ]
    for letter in dead_letters(store, limit=limit):
        if letter.step == ESCALATION and letter.error is not None:
            found.append(
                PendingApproval(
                    letter.run_id,
                    letter.workflow,
                    ESCALATION,
                    letter.parked_at,
                    None,
                    "",
                    letter.error.message,
                )
            )
    found.sort(key=lambda pending: (pending.requested_at, pending.run_id))
    return found[:limit]


def decide(
    store: Store,
    run_id: str,
    name: str,
    *,
    approved: bool,
    by: str,
    now: datetime,
    comment: str | None = None,
    secret: str | None = None,
    position: int | None = None,
) -> Decision:
    """Approve or reject the pending approval `name` of a run (with a token: its `secret` and
    `position`, checked against the hashes the run keeps)."""

    def refusal() -> str:
        return _why_not(store, run_id, name, position, secret=secret)

    # Checked before the run is touched, so a wrong token or name costs the run nothing.
    if not _decidable(_find(fold_approvals(store.history(run_id)), name, position), secret):
        raise DurablyError(refusal())
    claim = take(
        store,
        run_id,
        now=now,
        by=by,
        action="decide an approval of",
        statuses=_WAITING,
        refusal=refusal,
    )
    approval = _find(fold_approvals(claim.events), name, position)
    if approval is None or not _decidable(approval, secret):  # decided in between
        hand_back(store, claim, now, Event(claim.events[-1].seq + 1, EventKind.RELEASED, now))
        raise DurablyError(refusal())
    via = "token" if secret else "person"
    decision = Decision(approved, by, now, comment, via)
    event = Event(
        claim.events[-1].seq + 1,
        EventKind.APPROVAL_DECIDED,
        now,
        approval.position,
        f"durably.approval:{approval.name}",
        None,
        encode_payload(decision),
    )
    hand_back(store, claim, now, event)
    return decision


def decide_with_token(
    store: Store, token: str, *, approved: bool, by: str, now: datetime, comment: str | None
) -> Decision:
    """Decide the approval a token was made for (approve or reject; once)."""
    run_id, position, secret = parse_token(token)
    return decide(
        store,
        run_id,
        "",
        approved=approved,
        by=by,
        now=now,
        comment=comment,
        secret=secret,
        position=position,
    )


def _decidable(approval: Approval | None, secret: str | None) -> bool:
    return approval is not None and approval.pending and (not secret or approval.accepts(secret))


def _find(approvals: list[Approval], name: str, position: int | None) -> Approval | None:
    """The approval named so (or at `position`): the pending one, else the latest."""
    matching = [
        approval
        for approval in approvals
        if (approval.position == position if position is not None else approval.name == name)
    ]
    pending = [approval for approval in matching if approval.pending]
    return pending[0] if pending else (matching[-1] if matching else None)


def _why_not(
    store: Store, run_id: str, name: str, position: int | None, *, secret: str | None = None
) -> str:
    """Why the approval cannot be decided, in words (the run is read again to say so)."""
    run = store.get_run(run_id)
    if run is None:
        raise RunNotFound(f"no run has the id {run_id!r} in {store.url}")
    approval = _find(fold_approvals(store.history(run_id)), name, position)
    what = f"approval {name!r}" if position is None else "the approval this token is for"
    if approval is None or (secret and not approval.accepts(secret)):
        if secret is not None:
            return "that token does not match any approval of this run: check it was copied whole"
        return f"run {run_id!r} has no {what}; `durably approvals list` shows those waiting"
    if approval.decision is not None:
        decision = approval.decision
        verdict = "approved" if decision.approved else "rejected"
        return (
            f"{what} of run {run_id!r} was already decided: {verdict} by {decision.by} at "
            f"{decision.at.isoformat()}; a decision is made once"
        )
    if run.status is RunStatus.RUNNING:
        return f"run {run_id!r} is running right now (a reminder is going out); try again shortly"
    return f"cannot decide {what} of run {run_id!r}: it is {run.status}"

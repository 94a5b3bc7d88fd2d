"""What a person does with an approval (durably.approval): list the ones waiting, decide one.

A decision leases the parked run like a worker would (so it is fenced against any worker and
against a second decision), appends `approval_decided` at the approval's position, and hands
the run back due at once. Only one decision lands: the second finds the approval decided and
says by whom. Escalations (durably.escalate) wait in the same list and are answered through
it too. These are helpers of durably.client.client, the one way in.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

from durably.client.dead_letters import failed_step, hand_back, last_failed_step, take
from durably.core.approvals import (
    ESCALATION,
    Approval,
    approval_call,
    awaiting_approval,
    fold_approvals,
    parse_token,
)
from durably.core.audit import Action, Via, audit_of
from durably.core.event_data import encode_payload
from durably.core.history import Event, EventKind
from durably.core.payloads import Decision
from durably.core.status import PARKED, RunStatus
from durably.errors import DurablyError, RunNotFound
from durably.stores.protocol import Store
from durably.stores.records import RunRecord

__all__ = [
    "PendingApproval",
    "check_escalation",
    "decide",
    "decide_with_token",
    "pending_approvals",
]

_WAITING = frozenset({RunStatus.NEEDS_ATTENTION})
_PAGE = 500  # parked runs read at a time, at most


@dataclass(frozen=True, slots=True)
class PendingApproval:
    """An approval (or an escalation: `name` "durably.escalate") waiting for a decision."""

    run_id: str
    workflow: str
    name: str
    requested_at: datetime
    until: datetime | None  # when it times out (None: never; the workflow's deadline ends it)
    on_timeout: str  # reject, approve, escalate ("" for an escalation)
    details: str | None  # JSON for the person (an escalation's: its reason, a JSON string)
    escalated: bool = False


def pending_approvals(store: Store, *, limit: int = 100) -> list[PendingApproval]:
    """Approvals and escalations waiting for a person, oldest first (by when the run was
    parked for them). The store finds the runs by their rows, a page at a time, and reads no
    more of them than the `limit` approvals need."""
    found: list[PendingApproval] = []
    for run in _waiting_for_decisions(store, page=min(limit, _PAGE)):
        if len(found) >= limit:
            break
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
        elif _escalated(events) and run.error is not None:  # a durably.escalate call
            reason = json.dumps(run.error.message)
            found.append(
                PendingApproval(run.id, run.workflow, ESCALATION, run.updated_at, None, "", reason)
            )
    return found[:limit]


def decide(
    store: Store,
    run_id: str,
    name: str,
    *,
    approved: bool,
    by: str,
    via: Via,
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
    if _decidable(store.history(run_id), name, position, secret) is None:
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
    approval = _decidable(list(claim.events), name, position, secret)
    if approval is None:  # decided, or parked otherwise, in between
        hand_back(store, claim, now, Event(claim.events[-1].seq + 1, EventKind.RELEASED, now))
        raise DurablyError(refusal())
    decision = Decision(approved, by, now, comment, "token" if secret else "person")
    event = Event(
        claim.events[-1].seq + 1,
        EventKind.APPROVAL_DECIDED,
        now,
        approval.position,
        approval_call(approval.name),
        None,
        encode_payload(decision),
    )
    action = Action.APPROVE if approved else Action.REJECT
    how = "token" if secret else None  # decided with the approval's own token
    audit = audit_of(action, by, via, approval=approval.name, comment=comment, using=how)
    hand_back(store, claim, now, event, audit=audit)
    return decision


def check_escalation(store: Store, run_id: str) -> None:
    """Refuse, saying why, unless the run is parked on a durably.escalate call."""
    run = store.get_run(run_id)
    if run is None:
        raise RunNotFound(f"no run has the id {run_id!r} in {store.url}")
    step = failed_step(store, run_id)
    if run.status is not RunStatus.NEEDS_ATTENTION or step != ESCALATION:
        why = f"it is {run.status}" if step is None else f"it is parked on step {step!r}"
        raise DurablyError(
            f"run {run_id!r} waits for no escalation ({why}); `durably approvals list` shows "
            "those waiting, `durably dlq list` the failed steps"
        )


def decide_with_token(
    store: Store,
    token: str,
    *,
    approved: bool,
    by: str,
    via: Via,
    now: datetime,
    comment: str | None,
) -> Decision:
    """Decide the approval a token was made for (approve or reject; once)."""
    run_id, position, secret = parse_token(token)
    return decide(
        store,
        run_id,
        "",
        approved=approved,
        by=by,
        via=via,
        now=now,
        comment=comment,
        secret=secret,
        position=position,
    )


def _decidable(
    events: list[Event], name: str, position: int | None, secret: str | None
) -> Approval | None:
    """The approval to decide, if the run waits for it (and `secret` is one of its tokens)."""
    approval = _find(fold_approvals(events), name, position)
    if approval is None or not approval.pending or not awaiting_approval(events):
        return None
    return approval if not secret or approval.accepts(secret) else None


def _escalated(events: list[Event]) -> bool:
    step = last_failed_step(events)
    return step is not None and step.name == ESCALATION


def _waiting_for_decisions(store: Store, *, page: int) -> Iterator[RunRecord]:
    """Every run parked for a person's decision, oldest first, `page` rows at a time."""
    after: tuple[datetime, str] | None = None
    while found := store.parked(decisions=True, limit=page, after=after):
        yield from found
        after = (found[-1].updated_at, found[-1].id)


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
    events = store.history(run_id)
    approval = _find(fold_approvals(events), name, position)
    if approval is None or (secret and not approval.accepts(secret)):
        if secret is not None:
            return "that token does not match any approval of this run: check it was copied whole"
        return (
            f"run {run_id!r} has no approval {name!r}; `durably approvals list` shows those waiting"
        )
    what = f"approval {approval.name!r} of run {run_id!r}"
    if approval.decision is not None:
        decision = approval.decision
        verdict = "approved" if decision.approved else "rejected"
        return (
            f"{what} was already decided: {verdict} by {decision.by} at "
            f"{decision.at.isoformat()}; a decision is made once"
        )
    if run.status is RunStatus.RUNNING:
        return (
            f"{what} cannot be decided this moment: a worker holds the run (a reminder is "
            "going out); try again shortly"
        )
    if run.status in PARKED and not awaiting_approval(events):
        return (
            f"{what} cannot be decided now: the run is parked {run.status} by a failure "
            f"({run.error.message if run.error else 'see durably dlq show'}); retry it "
            "(durably dlq retry) and decide once it waits for the approval again"
        )
    return f"{what} cannot be decided: the run is {run.status}"

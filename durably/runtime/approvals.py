"""durably.approval on the run's side: ask, notify, remind, time out, return the decision.

The approval takes the next position; its notices (the request, then one per reminder) each
take the position after it, as calls of the workflow's notify step. A notice first records a
fresh token's hash (`approval_token`), committed with the notify step's start, so the token is
good before anyone can hold it; the token itself reaches only the notify step's arguments and
is left out of the recorded input. A notice whose notify step must start over (its worker
died, or it is retried after a backoff) gets a new token: the old one cannot be made again,
and stays good.

While nobody has decided, the run is parked `needs_attention` (a person must act) until its
next reminder or its timeout; a decision (durably.client.client) hands it back due at once. On the
timeout, the approval is rejected or approved by durably, or escalated: it then waits for a
person with no timeout (the workflow's deadline still ends it).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, Protocol

from durably.core.approvals import (
    AWAITING_APPROVAL_ERROR,
    Approval,
    ApprovalRequest,
    approval_call,
    fold_approvals,
    hash_secret,
    make_token,
)
from durably.core.event_data import encode_payload
from durably.core.history import ErrorInfo, EventKind
from durably.core.payloads import ApprovalRequested, ApprovalToken, Decision
from durably.core.replay import StepRecord
from durably.runtime.checkpoints import HistoryWriter
from durably.runtime.flow import WaitForPerson
from durably.workflow.definitions import Step
from durably.workflow.people import ApprovalCall

__all__ = ["Host", "await_approval"]

_NO_NOTIFY = "durably.approval (called with no notify step)"
_TOKEN_BYTES = 32  # 256 bits from secrets: far past guessing
_DOES = {"reject": "rejects", "approve": "approves", "escalate": "escalates"}


class Host(Protocol):
    """The run execution, as an approval uses it."""

    run_id: str

    def clock_now(self) -> datetime: ...

    def place(self, name: str) -> tuple[int, StepRecord | None]: ...

    def peek(self, position: int) -> StepRecord | None: ...

    async def call_step(
        self, step: Step, args: Sequence[Any], kwargs: Mapping[str, Any], *, hide: str = ""
    ) -> Any: ...


async def await_approval(host: Host, writer: HistoryWriter, ask: ApprovalCall) -> Decision:
    """The decision on `ask`: recorded already, made now by its timeout, or else the run is
    parked until a person decides or its next reminder or timeout comes (WaitForPerson)."""
    call = approval_call(ask.name)
    position, record = host.place(call)
    if record is None:
        until = None if ask.timeout is None else host.clock_now() + ask.timeout
        remind = None if ask.remind_after is None else ask.remind_after.total_seconds()
        asked = ApprovalRequested(until, ask.on_timeout, remind, ask.details)
        writer.append(EventKind.APPROVAL_REQUESTED, position, call, None, encode_payload(asked))
    approval = _approval_at(writer, position)
    for notice in range(approval.notices):  # the notices so far, in the positions they took
        await _notice(host, writer, ask, approval, notice)
    if approval.decision is not None:
        return approval.decision
    now = host.clock_now()
    if approval.until is not None and approval.until <= now:
        if approval.on_timeout != "escalate":
            decision = Decision(
                approval.on_timeout == "approve",
                "durably",
                now,
                f"nobody decided by {approval.until.isoformat()}",
                "timeout",
            )
            writer.append(
                EventKind.APPROVAL_DECIDED, position, call, None, encode_payload(decision)
            )
            return decision
        writer.append(EventKind.APPROVAL_ESCALATED, position, call)
        approval = replace(approval, until=None, escalated=True)
        if ask.notify is not None:  # tell them it is escalated (until: none now)
            await _notice(host, writer, ask, approval, approval.notices)
    elif ask.notify is not None and _notice_due(approval, now):
        await _notice(host, writer, ask, approval, approval.notices)
    approval = _approval_at(writer, position)
    raise WaitForPerson(_next_due(approval, ask), _why(approval))


async def _notice(
    host: Host, writer: HistoryWriter, ask: ApprovalCall, approval: Approval, notice: int
) -> None:
    """The notify step's call for `notice`: replayed if it has an outcome (or no longer
    matters: the approval is decided), else made with a fresh token."""
    notify = ask.notify
    if notify is None:  # notices were sent, so the workflow named a notify step then
        host.place(_NO_NOTIFY)  # a NonDeterminismError naming the recorded step
        return
    record = host.peek(approval.position + 1 + notice)
    if record is not None and record.settled:
        await host.call_step(notify, (None,), {})  # replays its outcome; runs nothing
        return
    if approval.decision is not None:
        host.place(notify.name)  # cut short by the decision: only its position is taken
        return
    secret = secrets.token_urlsafe(_TOKEN_BYTES)
    token = encode_payload(ApprovalToken(hash_secret(secret), notice))
    call = approval_call(approval.name)
    writer.append(EventKind.APPROVAL_TOKEN, approval.position, call, None, token)
    details = None if approval.details is None else json.loads(approval.details)
    request = ApprovalRequest(
        host.run_id,
        approval.name,
        make_token(host.run_id, approval.position, secret),
        notice,
        approval.until,
        approval.on_timeout,
        details,
        approval.escalated,
    )
    await host.call_step(notify, (request,), {}, hide=secret)


def _approval_at(writer: HistoryWriter, position: int) -> Approval:
    events = [event for event in writer.events if event.position == position]
    return fold_approvals(events)[0]


def _notice_due(approval: Approval, now: datetime) -> bool:
    if approval.notices == 0:
        return True
    remind = approval.remind_after
    last = approval.last_notice_at
    return remind is not None and last is not None and last + remind <= now


def _next_due(approval: Approval, ask: ApprovalCall) -> datetime | None:
    """When the run wakes by itself: its next reminder or its timeout, whichever is first."""
    times = [approval.until] if approval.until is not None else []
    remind, last = approval.remind_after, approval.last_notice_at
    if ask.notify is not None and remind is not None and last is not None:
        times.append(last + remind)
    return min(times, default=None)


def _why(approval: Approval) -> ErrorInfo:
    then = (
        f"; at {approval.until.isoformat()} durably {_DOES[approval.on_timeout]} it"
        if approval.until is not None
        else ""
    )
    escalated = " (escalated: it timed out)" if approval.escalated else ""
    return ErrorInfo(
        AWAITING_APPROVAL_ERROR,
        f"approval {approval.name!r} waits for a person's decision{escalated}{then}",
    )

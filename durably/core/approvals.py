"""What a run's history says of its approvals (durably.approval), and their tokens.

An approval sits at a position like a step call. Its events there: `approval_requested`
(once), `approval_token` (one per token handed to the notify step: the request, each
reminder, and again for a notice whose notify step had to start over), `approval_escalated`
(it timed out with on_timeout="escalate"), `approval_decided` (its end). The notify step's
calls take the positions right after the approval's, one per notice.

A token is "<run id>.<position>.<secret>": the secret is 256 bits from `secrets` (made by the
runtime), and only its SHA-256 is stored, so the history never holds a usable token. Any
token handed out for an approval decides it, once: the first decision ends it.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from durably.core.event_data import read_payload
from durably.core.history import Event, EventKind
from durably.core.payloads import ApprovalRequested, ApprovalToken, Decision, RunParked
from durably.errors import DurablyError

__all__ = [
    "APPROVAL_CALL",
    "AWAITING_APPROVAL",
    "AWAITING_APPROVAL_ERROR",
    "ESCALATION",
    "ON_TIMEOUT",
    "Approval",
    "ApprovalRequest",
    "approval_call",
    "awaiting_approval",
    "fold_approvals",
    "hash_secret",
    "make_token",
    "parse_token",
]

AWAITING_APPROVAL = "awaiting approval"  # the reason of a run parked for an approval
AWAITING_APPROVAL_ERROR = "durably.AwaitingApproval"  # the error class it is parked with
ESCALATION = "durably.escalate"  # the step name durably.escalate is recorded under
APPROVAL_CALL = "durably.approval:"  # the name an approval is recorded under, before its own
ON_TIMEOUT = ("reject", "approve", "escalate")


def approval_call(name: str) -> str:
    return APPROVAL_CALL + name


@dataclass(frozen=True, slots=True)
class Approval:
    """One approval of a run, as its history has it so far."""

    position: int
    name: str
    requested_at: datetime
    until: datetime | None  # when it times out (None: never, or no more: escalated)
    on_timeout: str
    remind_after: timedelta | None
    details: str | None  # JSON, for the person
    tokens: tuple[str, ...] = ()  # the hashes of the tokens handed out
    notices: int = 0  # notices (request, reminders) a token was made for
    last_notice_at: datetime | None = None
    escalated: bool = False
    decision: Decision | None = None

    @property
    def pending(self) -> bool:
        return self.decision is None

    def accepts(self, secret: str) -> bool:
        """Whether `secret` is the secret of one of the tokens handed out for it."""
        digest = hash_secret(secret)
        return any(hmac.compare_digest(digest, known) for known in self.tokens)


def fold_approvals(events: Iterable[Event]) -> list[Approval]:
    """Every approval in a history, in position order."""
    found: dict[int, Approval] = {}
    for event in events:
        position = event.position
        if event.kind is EventKind.RUN_RETRIED and position is not None:
            found = {at: approval for at, approval in found.items() if at < position}
        if position is None or event.name is None:
            continue
        if event.kind is EventKind.APPROVAL_REQUESTED:
            asked = read_payload(event, ApprovalRequested)
            remind = None if asked.remind_after is None else timedelta(seconds=asked.remind_after)
            name = event.name.removeprefix(APPROVAL_CALL)
            found[position] = Approval(
                position, name, event.at, asked.until, asked.on_timeout, remind, asked.details
            )
        elif (approval := found.get(position)) is not None:
            found[position] = _apply(approval, event)
    return [found[position] for position in sorted(found)]


def _apply(approval: Approval, event: Event) -> Approval:
    if event.kind is EventKind.APPROVAL_TOKEN:
        token = read_payload(event, ApprovalToken)
        return replace(
            approval,
            tokens=(*approval.tokens, token.hash),
            notices=max(approval.notices, token.notice + 1),
            last_notice_at=event.at,
        )
    if event.kind is EventKind.APPROVAL_ESCALATED:
        return replace(approval, escalated=True, until=None)
    if event.kind is EventKind.APPROVAL_DECIDED:
        return replace(approval, decision=read_payload(event, Decision))
    return approval


def awaiting_approval(events: Sequence[Event]) -> bool:
    """Whether a parked run's latest park is an approval's wait (not a failure)."""
    for event in reversed(events):
        if event.kind is EventKind.RUN_PARKED:
            return read_payload(event, RunParked).reason == AWAITING_APPROVAL
    return False


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def make_token(run_id: str, position: int, secret: str) -> str:
    return f"{run_id}.{position}.{secret}"


def parse_token(token: str) -> tuple[str, int, str]:
    """The run id, approval position and secret a token names; DurablyError if it is none."""
    run_id, _, rest = token.rpartition(".")
    run_id, _, position = run_id.rpartition(".")
    if not run_id or not position.isdigit() or not rest:
        raise DurablyError(
            "that is not an approval token: a token looks like '<run id>.<number>.<secret>', "
            "as the approval's notify step was given it"
        )
    return run_id, int(position), rest


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """What a durably.approval's notify step is called with: the request (`notice` 0) and
    each reminder (1, 2, ...), and a notice that it escalated (`escalated`). `token` decides
    the approval (app.client.decide_with_token, `durably approve --token`); each notice carries a
    fresh one, and every one stays good until the approval is decided. Never log it: whoever
    has it can decide."""

    run_id: str
    name: str
    token: str
    notice: int
    until: datetime | None  # when the approval times out, if it does
    on_timeout: str
    details: object = None  # what the workflow gave as `details` (plain JSON)
    escalated: bool = False  # it timed out with on_timeout="escalate": no timeout now

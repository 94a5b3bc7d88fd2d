"""The typed payloads of events: one frozen class per kind of event that carries data, the
`Payload` union of them and the `Failure` union of those that carry an error. The one place
that encodes them to JSON and decodes them back is durably.core.payloads, which re-exports
them all (import them from there)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TypeAlias, TypeVar

from durably.core.history import ErrorInfo
from durably.core.status import RunStatus

__all__ = [
    "ApprovalRequested",
    "ApprovalToken",
    "AttemptFailed",
    "ChildStarted",
    "Claimed",
    "Command",
    "Compensating",
    "CompensationAttemptFailed",
    "CompensationFailed",
    "CompensationStarted",
    "Decision",
    "Failure",
    "MessageReceived",
    "P",
    "Payload",
    "Released",
    "Restarted",
    "Result",
    "RunFailed",
    "RunParked",
    "RunRetried",
    "RunStarted",
    "RunningAlone",
    "SignalReceived",
    "StepFailed",
    "StepReconciled",
    "StepStarted",
    "StepWaiting",
    "Upgraded",
    "WaitStarted",
]


@dataclass(frozen=True, slots=True)
class RunStarted:
    """`run_started` of a run restarted from another (`durably runs restart`): the run it
    came from, the step it runs again from, who restarted it; of a child run: the run that
    started it (`parent`) and the deadline it inherits from it; of a run that continued as
    new, its `generation` (and its parent and deadline); of any run, the correlation id and
    the starter's trace context when there are any. A plain start carries none."""

    restarted_from: str | None = None
    from_step: int | None = None
    by: str | None = None
    parent: str | None = None
    deadline: datetime | None = None
    generation: int | None = None  # after durably.continue_as_new: 2, 3, ...
    correlation_id: str | None = None  # given to start(), inherited by children and restarts
    trace_parent: str | None = None  # the starter's W3C traceparent: steps' spans join its trace


@dataclass(frozen=True, slots=True)
class ChildStarted:
    """`child_started`: the workflow started a child run (`durably.start_child`, or a call of
    a workflow from a workflow); `detached`: it is not cancelled when its parent ends."""

    run: str
    workflow: str
    detached: bool = False


@dataclass(frozen=True, slots=True)
class Restarted:
    """`run_restarted`, appended to an ended run restarted as `run` from `from_step`."""

    run: str
    from_step: int
    by: str


@dataclass(frozen=True, slots=True)
class Command:
    """`run_paused`: who paused the run, and why (None: no reason given);
    `compensation_skipped`: who undid the step by hand, and what they said."""

    by: str
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class Claimed:
    """`claimed`: who leased the run, under which epoch; whose expired lease it took over."""

    owner: str
    epoch: int
    took_over_from: str | None = None  # the key is left out when nobody was taken over


@dataclass(frozen=True, slots=True)
class StepStarted:
    """`step_started`: the attempt's idempotency key and the step's call as codec.encode_call
    wrote it (`{"args": [...], "kwargs": {...}}`), parsed, and whether the step had an undo
    then (so a deploy that drops it cannot skip it silently). The engine writes it with
    `step_started_data`, which embeds the encoded call's text as is."""

    key: str
    input: Mapping[str, object]
    undo: bool = False  # the step had a compensation when it started (left out when not)


@dataclass(frozen=True, slots=True)
class Result:
    """`step_completed`, `step_skipped`: a step's result as JSON text, stored as is;
    `value_recorded`: the value (durably.now, uuid4, random) likewise; `step_heartbeat`: the
    details given to durably.heartbeat."""

    text: str


@dataclass(frozen=True, slots=True)
class AttemptFailed:
    """`attempt_failed`: another attempt follows at `retry_at`. `unknown`: the failed
    attempt may have taken effect (a timeout), so the next one reconciles first. `of`: the
    attempts the step's retry policy allows; `dependency`: the service the step calls (both
    left out by older versions; `dependency` also when the step names none)."""

    error: ErrorInfo
    retry_at: datetime
    unknown: bool = False
    of: int | None = None
    dependency: str | None = None


@dataclass(frozen=True, slots=True)
class StepReconciled:
    """`step_reconciled`: whether the reconcile hook found the unknown attempt's effect."""

    found: bool


@dataclass(frozen=True, slots=True)
class StepFailed:
    """`step_failed`: the step's final failure. `attempts` is left out when no attempt
    counted (a result that could not be stored). `unknown`: its last attempt may have taken
    effect all the same (a body cancelled or timed out in flight), so an undo is owed."""

    error: ErrorInfo
    reason: str = "terminal"  # terminal, attempts exhausted, budget exhausted, escalated
    attempts: int | None = None
    unknown: bool = False  # left out when False


@dataclass(frozen=True, slots=True)
class StepWaiting:
    """`step_waiting`: a breaker or limit of `dependency` said wait until `until`."""

    waiting: str  # breaker open, rate limit, concurrency limit
    dependency: str
    until: datetime


@dataclass(frozen=True, slots=True)
class Compensating:
    """`compensating`: why the run is being undone, and the status it ends in then."""

    error: ErrorInfo
    then: RunStatus = RunStatus.FAILED


@dataclass(frozen=True, slots=True)
class CompensationStarted:
    """`compensation_started`: the undo's idempotency key (the step's, plus `:undo`)."""

    key: str


@dataclass(frozen=True, slots=True)
class CompensationAttemptFailed:
    """`compensation_attempt_failed`: the undo is tried again at `retry_at`."""

    error: ErrorInfo
    retry_at: datetime


@dataclass(frozen=True, slots=True)
class CompensationFailed:
    """`compensation_failed`: the undo failed for good; the run is parked."""

    error: ErrorInfo
    reason: str
    attempts: int


@dataclass(frozen=True, slots=True)
class RunFailed:
    """`run_failed`: the failure the run ended with (its status says failed or timed out);
    `run_cancelled`: who cancelled it and why, as a durably.errors.RunCancelled."""

    error: ErrorInfo


@dataclass(frozen=True, slots=True)
class RunParked:
    """`run_parked`: the run waits for a person, and why."""

    error: ErrorInfo
    reason: str


@dataclass(frozen=True, slots=True)
class RunRetried:
    """`run_retried`: who retried the run, and from which step (None: its compensations)."""

    by: str
    from_step: int | None


@dataclass(frozen=True, slots=True)
class Upgraded:
    """`upgraded`: the run was moved from the version it ran on (`from_version`, None: a run
    from before versions) to `to_version`, whose code replays its history, by `by`."""

    from_version: str | None
    to_version: str
    by: str


@dataclass(frozen=True, slots=True)
class Released:
    """`released` with a reason: a run that ran alone handed back for the next suspect."""

    reason: str


@dataclass(frozen=True, slots=True)
class RunningAlone:
    """`running_alone`: why the run now runs with no other run on its worker but `others`
    suspects started together with it (0: strictly alone)."""

    reason: str
    others: int = 0


@dataclass(frozen=True, slots=True)
class MessageReceived:
    """`message_received`: a message from the run's inbox (`id` is its place there), folded
    into the history by the lease holder: what it is, its JSON `data`, who sent it, when."""

    id: int
    kind: str
    name: str | None
    data: str | None  # JSON text, as the sender's client encoded it
    sender: str
    sent_at: datetime


@dataclass(frozen=True, slots=True)
class WaitStarted:
    """`timer_set`, `signal_waiting`: the wait ends at `until` (a timer's time, a signal's
    timeout; None: a signal awaited with no timeout), or earlier, at the workflow's deadline."""

    until: datetime | None


@dataclass(frozen=True, slots=True)
class SignalReceived:
    """`signal_received`: the inbox message (`message`, its id there) the wait took, with
    the signal's JSON payload as the sender wrote it, who sent it and when."""

    message: int
    data: str | None
    sender: str
    sent_at: datetime


@dataclass(frozen=True, slots=True)
class ApprovalRequested:
    """`approval_requested`: a durably.approval began. It times out at `until` (None: never,
    but the workflow's deadline), then does `on_timeout` (reject, approve or escalate); a
    reminder goes out every `remind_after` seconds; `details` is JSON for the person."""

    until: datetime | None
    on_timeout: str
    remind_after: float | None = None
    details: str | None = None


@dataclass(frozen=True, slots=True)
class ApprovalToken:
    """`approval_token`: a token was made for notice `notice` (0: the request, 1 on: the
    reminders) and handed to the notify step. Only its SHA-256 `hash` is kept."""

    hash: str
    notice: int


@dataclass(frozen=True, slots=True)
class Decision:
    """`approval_decided`, and what durably.approval returns: approved or rejected, by whom,
    when, with an optional comment. `via`: "person" (by run and name, an operator), "token"
    (with the approval's token), or "timeout" (nobody decided in time; `by` is "durably")."""

    approved: bool
    by: str
    at: datetime
    comment: str | None = None
    via: str = "person"


Payload: TypeAlias = (
    RunStarted
    | ChildStarted
    | Restarted
    | Command
    | Claimed
    | StepStarted
    | Result
    | AttemptFailed
    | StepReconciled
    | StepFailed
    | StepWaiting
    | Compensating
    | CompensationStarted
    | CompensationAttemptFailed
    | CompensationFailed
    | RunFailed
    | RunParked
    | RunRetried
    | Upgraded
    | Released
    | RunningAlone
    | MessageReceived
    | WaitStarted
    | SignalReceived
    | ApprovalRequested
    | ApprovalToken
    | Decision
)
P = TypeVar("P", bound=Payload)

# The payloads that carry an error, as `.error`: for readers of any kind's failure.
Failure: TypeAlias = (
    AttemptFailed
    | StepFailed
    | Compensating
    | CompensationAttemptFailed
    | CompensationFailed
    | RunFailed
    | RunParked
)

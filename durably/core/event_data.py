"""An event's `data` as JSON and back: the one place that encodes each kind's typed payload
(durably.core.payloads) to the JSON the stores keep, and decodes it again.

The stored format is the JSON objects the engine has always written, key for key, so older
histories decode unchanged (tests/unit/test_payloads.py holds one literal of each). Keys this
version does not know are ignored; a missing or mistyped key is a PayloadError naming the
event, as is data that is not JSON.

Results are not wrapped: the data of `step_completed`, `step_skipped`, `value_recorded` and
`step_heartbeat` is the result's (value's, details') JSON text as the codec made it, and
stays so (the hot path appends it as is, and replay hands it to the codec as is). `Result`
only names it, for callers that read any event's payload.

Kinds that carry nothing (`compensation_completed`, `run_completed`) decode to None, as does
any event whose data is None (`released` by a stopping worker, `run_started` of a plain start).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping

from durably.core import fields as read
from durably.core.history import ErrorInfo, Event, EventKind
from durably.core.payloads import (
    ApprovalRequested,
    ApprovalToken,
    AttemptFailed,
    ChildStarted,
    Claimed,
    Command,
    Compensating,
    CompensationAttemptFailed,
    CompensationFailed,
    CompensationStarted,
    Decision,
    MessageReceived,
    P,
    Payload,
    Released,
    Restarted,
    Result,
    RunFailed,
    RunningAlone,
    RunParked,
    RunRetried,
    RunStarted,
    SignalReceived,
    StepFailed,
    StepReconciled,
    StepStarted,
    StepWaiting,
    Upgraded,
    WaitStarted,
)
from durably.core.status import RunStatus

__all__ = [
    "PAYLOAD_CLASSES",
    "encode_payload",
    "payload_of",
    "read_payload",
    "step_started_data",
]


# Each kind's payload class (None: no data). A unit test checks that every kind is here.
PAYLOAD_CLASSES: Mapping[EventKind, type[Payload] | None] = {
    EventKind.RUN_STARTED: RunStarted,
    EventKind.CLAIMED: Claimed,
    EventKind.STEP_STARTED: StepStarted,
    EventKind.STEP_COMPLETED: Result,
    EventKind.STEP_ATTEMPT_FAILED: AttemptFailed,
    EventKind.STEP_RECONCILED: StepReconciled,
    EventKind.STEP_FAILED: StepFailed,
    EventKind.STEP_WAITING: StepWaiting,
    EventKind.STEP_SKIPPED: Result,
    EventKind.COMPENSATING: Compensating,
    EventKind.COMPENSATION_STARTED: CompensationStarted,
    EventKind.COMPENSATION_COMPLETED: None,
    EventKind.COMPENSATION_ATTEMPT_FAILED: CompensationAttemptFailed,
    EventKind.COMPENSATION_FAILED: CompensationFailed,
    EventKind.COMPENSATION_SKIPPED: Command,
    EventKind.RUN_COMPLETED: None,
    EventKind.RUN_FAILED: RunFailed,
    EventKind.RUN_PARKED: RunParked,
    EventKind.RUN_CANCELLED: RunFailed,
    EventKind.RUN_PAUSED: Command,
    EventKind.RUN_RESTARTED: Restarted,
    EventKind.RUN_RETRIED: RunRetried,
    EventKind.UPGRADED: Upgraded,
    EventKind.RELEASED: Released,
    EventKind.RUNNING_ALONE: RunningAlone,
    EventKind.MESSAGE_RECEIVED: MessageReceived,
    EventKind.TIMER_SET: WaitStarted,
    EventKind.TIMER_FIRED: None,
    EventKind.SIGNAL_WAITING: WaitStarted,
    EventKind.SIGNAL_RECEIVED: SignalReceived,
    EventKind.SIGNAL_TIMED_OUT: None,
    EventKind.VALUE_RECORDED: Result,
    EventKind.PATCH_DECIDED: Result,  # true (the new code) or false (the old)
    EventKind.ATTEMPT_LOST: None,
    EventKind.CHILD_STARTED: ChildStarted,
    EventKind.APPROVAL_REQUESTED: ApprovalRequested,
    EventKind.APPROVAL_TOKEN: ApprovalToken,
    EventKind.APPROVAL_ESCALATED: None,
    EventKind.APPROVAL_DECIDED: Decision,
    EventKind.STEP_HEARTBEAT: Result,
    EventKind.EVENT_SET: Result,
}


# -- encoding -----------------------------------------------------------------------------


def step_started_data(key: str, input_json: str, *, undo: bool = False) -> str:
    """The data of `step_started`, built as text: written once per step attempt, it embeds
    the already-encoded input rather than parsing and encoding it again."""
    text = '{"key": ' + json.dumps(key) + ', "input": ' + input_json
    return text + (', "undo": true}' if undo else "}")


def encode_payload(payload: Payload) -> str:
    """The JSON text stored in `Event.data` for `payload`."""
    if isinstance(payload, Result):
        return payload.text
    if isinstance(payload, StepStarted):
        return step_started_data(payload.key, json.dumps(payload.input), undo=payload.undo)
    return json.dumps(_fields(payload))


def _fields(payload: Payload) -> dict[str, object]:
    """The JSON object of a payload, keys in the order the engine has always written them."""
    match payload:
        case RunStarted(
            restarted_from, from_step, by, parent, deadline, generation, correlation, trace
        ):
            time = None if deadline is None else deadline.isoformat()
            named = {
                "restarted_from": restarted_from,
                "from_step": from_step,
                "by": by,
                "parent": parent,
                "deadline": time,
                "generation": generation,
                "correlation_id": correlation,
                "trace_parent": trace,
            }
            return {key: value for key, value in named.items() if value is not None}
        case ChildStarted(run, workflow, detached):
            return {"run": run, "workflow": workflow, **({"detached": True} if detached else {})}
        case Restarted(run, from_step, by):
            return {"run": run, "from_step": from_step, "by": by}
        case Command(by, reason):
            return {"by": by, "reason": reason}
        case Claimed(owner, epoch, took_over_from):
            fields: dict[str, object] = {"owner": owner, "epoch": epoch}
            if took_over_from is not None:
                fields["took_over_from"] = took_over_from
            return fields
        case AttemptFailed(error, retry_at, unknown, of, dependency):
            fields = {**_error(error), "retry_at": retry_at.isoformat(), "unknown": unknown}
            if of is not None:
                fields["of"] = of
            if dependency is not None:
                fields["dependency"] = dependency
            return fields
        case StepReconciled(found):
            return {"found": found}
        case StepFailed(error, reason, attempts, unknown):
            fields = {**_error(error), "reason": reason}
            if attempts is not None:
                fields["attempts"] = attempts
            if unknown:
                fields["unknown"] = True
            return fields
        case StepWaiting(waiting, dependency, until):
            return {"waiting": waiting, "dependency": dependency, "until": until.isoformat()}
        case Compensating(error, then):
            return {**_error(error), "then": str(then)}
        case CompensationStarted(key):
            return {"key": key}
        case CompensationAttemptFailed(error, retry_at):
            return {**_error(error), "retry_at": retry_at.isoformat()}
        case CompensationFailed(error, reason, attempts):
            return {**_error(error), "reason": reason, "attempts": attempts}
        case RunFailed(error):
            return _error(error)
        case RunParked(error, reason):
            return {**_error(error), "reason": reason}
        case RunRetried(by, from_step):
            return {"by": by, "from_step": from_step}
        case Upgraded(from_version, to_version, by):
            return {"from": from_version, "to": to_version, "by": by}
        case RunningAlone(reason, others) if others:
            return {"reason": reason, "others": others}
        case Released(reason) | RunningAlone(reason):
            return {"reason": reason}
        case MessageReceived(id_, kind, name, data, sender, sent_at):
            return {
                "id": id_,
                "kind": kind,
                "name": name,
                "data": data,
                "sender": sender,
                "sent_at": sent_at.isoformat(),
            }
        case WaitStarted(until):
            return {"until": None if until is None else until.isoformat()}
        case SignalReceived(message, data, sender, sent_at):
            return {
                "message": message,
                "data": data,
                "sender": sender,
                "sent_at": sent_at.isoformat(),
            }
        case ApprovalRequested(until, on_timeout, remind_after, details):
            time = None if until is None else until.isoformat()
            return {
                "until": time,
                "on_timeout": on_timeout,
                "remind_after": remind_after,
                "details": details,
            }
        case ApprovalToken(hash_, notice):
            return {"hash": hash_, "notice": notice}
        case Decision(approved, by, at, comment, via):
            return {
                "approved": approved,
                "by": by,
                "at": at.isoformat(),
                "comment": comment,
                "via": via,
            }
    raise TypeError(f"not an event payload: {payload!r}")  # Result and StepStarted: above


def _error(error: ErrorInfo) -> dict[str, object]:
    fields: dict[str, object] = {"error_class": error.error_class, "message": error.message}
    if error.traceback is not None:  # left out when there is none, as older versions wrote
        fields["traceback"] = error.traceback
    return fields


# -- decoding -----------------------------------------------------------------------------


def payload_of(event: Event) -> Payload | None:
    """The typed payload of `event`: None if its kind carries none or its data is None.
    Raises PayloadError, naming the event, if the data cannot be read as its kind's."""
    cls = PAYLOAD_CLASSES.get(event.kind)
    text = event.data
    if cls is None or text is None:
        return None
    if cls is Result:
        return Result(text)
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise read.Unreadable(f"a JSON object was expected, not {type(data).__name__}")
        return _DECODERS[cls](data)
    # JSONDecodeError and bad ISO times are both ValueErrors; JSON nested too deep for the
    # decoder (a corrupted row) is a RecursionError
    except (ValueError, RecursionError, read.Unreadable) as exc:
        raise read.unreadable(event, str(exc)) from None


def read_payload(event: Event, cls: type[P]) -> P:
    """The payload of `event`, which must be a `cls`: for readers that know the kind."""
    payload = payload_of(event)
    if not isinstance(payload, cls):
        found = "no data" if payload is None else type(payload).__name__
        raise read.unreadable(event, f"a {cls.__name__} was expected, found {found}")
    return payload


def _read_error(data: Mapping[str, object]) -> ErrorInfo:
    return ErrorInfo(
        read.string(data, "error_class"),
        read.string(data, "message"),
        read.optional_string(data, "traceback"),
    )


def _then(data: Mapping[str, object]) -> RunStatus:
    return RunStatus(read.string(data, "then", "failed"))  # a ValueError if it is no status


# Defaults are the ones the engine's readers have always applied to a missing key.
_DECODERS: Mapping[type[Payload], Callable[[dict[str, object]], Payload]] = {
    RunStarted: lambda d: RunStarted(
        read.optional_string(d, "restarted_from"),
        read.optional_integer(d, "from_step"),
        read.optional_string(d, "by"),
        read.optional_string(d, "parent"),
        read.optional_moment(d, "deadline"),
        read.optional_integer(d, "generation"),
        read.optional_string(d, "correlation_id"),
        read.optional_string(d, "trace_parent"),
    ),
    ChildStarted: lambda d: ChildStarted(
        read.string(d, "run"), read.string(d, "workflow"), read.boolean(d, "detached", False)
    ),
    Restarted: lambda d: Restarted(
        read.string(d, "run"), read.integer(d, "from_step"), read.string(d, "by")
    ),
    Command: lambda d: Command(read.string(d, "by"), read.optional_string(d, "reason")),
    Claimed: lambda d: Claimed(
        read.string(d, "owner"),
        read.integer(d, "epoch"),
        None if d.get("took_over_from") is None else read.string(d, "took_over_from"),
    ),
    StepStarted: lambda d: StepStarted(
        read.string(d, "key"), read.json_object(d, "input"), read.boolean(d, "undo", False)
    ),
    AttemptFailed: lambda d: AttemptFailed(
        _read_error(d),
        read.moment(d, "retry_at"),
        read.boolean(d, "unknown", False),
        read.optional_integer(d, "of"),
        read.optional_string(d, "dependency"),
    ),
    StepReconciled: lambda d: StepReconciled(read.boolean(d, "found")),
    StepFailed: lambda d: StepFailed(
        _read_error(d),
        read.string(d, "reason", "terminal"),
        read.optional_integer(d, "attempts"),
        read.boolean(d, "unknown", False),
    ),
    StepWaiting: lambda d: StepWaiting(
        read.string(d, "waiting"), read.string(d, "dependency"), read.moment(d, "until")
    ),
    Compensating: lambda d: Compensating(_read_error(d), _then(d)),
    CompensationStarted: lambda d: CompensationStarted(read.string(d, "key")),
    CompensationAttemptFailed: lambda d: CompensationAttemptFailed(
        _read_error(d), read.moment(d, "retry_at")
    ),
    CompensationFailed: lambda d: CompensationFailed(
        _read_error(d), read.string(d, "reason"), read.integer(d, "attempts")
    ),
    RunFailed: lambda d: RunFailed(_read_error(d)),
    RunParked: lambda d: RunParked(_read_error(d), read.string(d, "reason")),
    RunRetried: lambda d: RunRetried(read.string(d, "by"), read.optional_integer(d, "from_step")),
    Upgraded: lambda d: Upgraded(
        read.optional_string(d, "from"), read.string(d, "to"), read.string(d, "by")
    ),
    Released: lambda d: Released(read.string(d, "reason")),
    RunningAlone: lambda d: RunningAlone(
        read.string(d, "reason"), read.optional_integer(d, "others") or 0
    ),
    MessageReceived: lambda d: MessageReceived(
        read.integer(d, "id"),
        read.string(d, "kind"),
        read.optional_string(d, "name"),
        read.optional_string(d, "data"),
        read.string(d, "sender"),
        read.moment(d, "sent_at"),
    ),
    WaitStarted: lambda d: WaitStarted(read.optional_moment(d, "until")),
    SignalReceived: lambda d: SignalReceived(
        read.integer(d, "message"),
        read.optional_string(d, "data"),
        read.string(d, "sender"),
        read.moment(d, "sent_at"),
    ),
    ApprovalRequested: lambda d: ApprovalRequested(
        read.optional_moment(d, "until"),
        read.string(d, "on_timeout"),
        read.optional_number(d, "remind_after"),
        read.optional_string(d, "details"),
    ),
    ApprovalToken: lambda d: ApprovalToken(read.string(d, "hash"), read.integer(d, "notice")),
    Decision: lambda d: Decision(
        read.boolean(d, "approved"),
        read.string(d, "by"),
        read.moment(d, "at"),
        read.optional_string(d, "comment"),
        read.string(d, "via", "person"),
    ),
}

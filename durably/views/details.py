"""Each event of a run's history in words: the DETAIL of `durably runs show`, the API's
`detail` and the dashboard's event rows. A value your code gave or got (an input, a result, a
signal's data) stays as its JSON; everything else is said."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime

from durably.codec.encryption import PREFIX, masked, sealed_key
from durably.core.event_data import payload_of
from durably.core.history import Event, EventKind
from durably.core.payloads import (
    ApprovalRequested,
    ApprovalToken,
    AttemptFailed,
    ChildStarted,
    Claimed,
    Command,
    CompensationStarted,
    Decision,
    Failure,
    MessageReceived,
    Released,
    Restarted,
    RunningAlone,
    RunRetried,
    RunStarted,
    SignalReceived,
    StepReconciled,
    StepStarted,
    StepWaiting,
    Upgraded,
    WaitStarted,
)
from durably.core.secrets import redact, redact_text
from durably.errors import PayloadError

__all__ = ["detail", "moment", "short", "shown", "started_pairs"]


def moment(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds")


def shown(text: str) -> str:
    """A stored value as a person may see it: one encrypted with a key this process does not
    hold (durably.codec.encryption) as `encrypted (key k2)`, the secrets in JSON text
    redacted (durably.core.secrets)."""
    return masked(text) if sealed_key(text) is not None else redact_text(text)


def short(text: str, limit: int) -> str:
    """`text` as a person may see it (`shown`), cut to `limit` characters."""
    text = shown(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def detail(event: Event) -> str:
    """The event in words (a value your code gave or got stays as its JSON)."""
    if event.data is None:
        return ""
    if event.kind is EventKind.PATCH_DECIDED:
        return "the new code" if event.data == "true" else "the old code (it got here before)"
    try:
        payload = payload_of(event)
    except PayloadError:
        if event.kind is EventKind.STEP_STARTED and PREFIX in event.data:  # its input, sealed
            fields = json.loads(event.data)
            return f"{event.name}({masked(fields['input'])}), key {fields['key']}"
        return f"(unreadable: {short(event.data, 80)})"
    if isinstance(payload, StepStarted):
        call = _call(event.name or "", payload.input)
        return f"{'undo ' if payload.undo else ''}{call}, key {payload.key}"
    if isinstance(payload, StepReconciled):
        found = "it had taken effect" if payload.found else "it had not taken effect"
        return f"the reconcile hook found {found}"
    if isinstance(payload, StepWaiting):
        until = moment(payload.until)
        return f"{payload.waiting} of {payload.dependency}: no attempt until {until}"
    if isinstance(payload, CompensationStarted):
        return f"the undo, key {payload.key}"
    if isinstance(payload, Released):
        return f"handed back: {payload.reason}"
    if isinstance(payload, RunningAlone):
        others = f", with {payload.others} other suspect(s)" if payload.others else ""
        return f"runs with no other run on its worker{others}: {payload.reason}"
    if isinstance(payload, Upgraded):
        return f"from version {payload.from_version} to {payload.to_version} by {payload.by}"
    if isinstance(payload, AttemptFailed):
        retry = f"; retry {payload.retry_at.isoformat(timespec='milliseconds')}"
        of = "" if payload.of is None else f" (of {payload.of} attempts)"
        by = "" if payload.dependency is None else f" [{payload.dependency}]"
        error = f"{payload.error.error_class}: {short(payload.error.message, 120)}"
        return f"{error}{by}{retry}{of}"
    if isinstance(payload, Failure):
        return f"{payload.error.error_class}: {short(payload.error.message, 120)}"
    if isinstance(payload, Claimed):
        taken = f", took over from {payload.took_over_from}" if payload.took_over_from else ""
        return f"by {payload.owner} (epoch {payload.epoch}){taken}"
    if isinstance(payload, WaitStarted):
        return "no timeout" if payload.until is None else f"until {moment(payload.until)}"
    if isinstance(payload, SignalReceived):
        data = short(payload.data or "null", 80)
        return f"message {payload.message} from {payload.sender}: {data}"
    if isinstance(payload, ApprovalRequested):
        until = "no timeout" if payload.until is None else f"until {moment(payload.until)}"
        then = "" if payload.until is None else f", then {payload.on_timeout}"
        every = (
            "" if payload.remind_after is None else f", reminders every {payload.remind_after:g}s"
        )
        details = "" if payload.details is None else f"; {short(payload.details, 80)}"
        return f"{until}{then}{every}{details}"
    if isinstance(payload, ApprovalToken):
        notice = "the request" if payload.notice == 0 else f"reminder {payload.notice}"
        return f"a token for {notice} (its hash is kept)"
    if isinstance(payload, Decision):
        verdict = "approved" if payload.approved else "rejected"
        comment = "" if payload.comment is None else f": {short(payload.comment, 80)}"
        return f"{verdict} by {payload.by} ({payload.via}){comment}"
    if isinstance(payload, Command):
        return f"by {payload.by}" + ("" if payload.reason is None else f": {payload.reason}")
    if isinstance(payload, RunStarted):
        pairs = started_pairs(payload)
        if payload.correlation_id is not None:
            pairs.append(("correlation", payload.correlation_id))
        if payload.trace_parent is not None:
            pairs.append(("trace", payload.trace_parent))
        return "; ".join(f"{label} {value}" for label, value in pairs)
    if isinstance(payload, ChildStarted):
        return f"{payload.run} ({payload.workflow}{', detached' if payload.detached else ''})"
    if isinstance(payload, RunRetried):
        where = "" if payload.from_step is None else f" from step #{payload.from_step}"
        return f"fresh attempts{where}, asked by {payload.by}"
    if isinstance(payload, Restarted):
        return f"restarted as {payload.run} from step #{payload.from_step} by {payload.by}"
    if isinstance(payload, MessageReceived):
        what = payload.kind if payload.name is None else f"{payload.kind} {payload.name!r}"
        data = "" if payload.data is None else f": {short(payload.data, 80)}"
        return f"{what} from {payload.sender}{data}"
    return _value(event.kind, event.data)


# A kind whose data is a value your code made: what it was, then the value as its JSON
_VALUES = {
    EventKind.STEP_COMPLETED: "returned",
    EventKind.STEP_SKIPPED: "a person gave the result",
    EventKind.VALUE_RECORDED: "recorded",
    EventKind.STEP_HEARTBEAT: "heartbeat",
    EventKind.EVENT_SET: "set",
}


def _value(kind: EventKind, data: str) -> str:
    said = _VALUES.get(kind)
    return short(data, 120) if said is None else f"{said} {short(data, 110)}"


def _call(name: str, given: Mapping[str, object]) -> str:
    """A step's input as the call it was: `charge({"id": "o-1"}, 12, retry=True)`."""
    given = redact(dict(given))
    args = given.get("args", [])
    kwargs = given.get("kwargs", {})
    shown = [json.dumps(arg) for arg in args] if isinstance(args, list) else []
    if isinstance(kwargs, dict):
        shown += [f"{key}={json.dumps(value)}" for key, value in kwargs.items()]
    return f"{name}({short(', '.join(shown), 80)})"


def started_pairs(started: RunStarted) -> list[tuple[str, str]]:
    """Where a run came from: a restart, a parent, an earlier generation."""
    pairs = []
    if started.restarted_from is not None:
        pairs.append(
            (
                "restart of",
                f"{started.restarted_from} at step #{started.from_step}, by {started.by}",
            )
        )
    if started.parent is not None:
        pairs.append(("parent", started.parent + _deadline(started)))
    if started.generation is not None:
        pairs.append(
            (
                "generation",
                f"{started.generation}: it continued as new (the "
                "histories of earlier generations are gone)",
            )
        )
    return pairs


def _deadline(started: RunStarted) -> str:
    when = started.deadline
    return "" if when is None else f" (its deadline, inherited: {moment(when)})"

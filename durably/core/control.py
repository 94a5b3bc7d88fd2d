"""A person's control of a run (cancel, pause, resume), as its history records it.

Each command is a message in the run's inbox (kinds below, the reason as the message's JSON
data, the person as its sender), so it reaches the run wherever it is: a waiting run is woken
to fold it, a running one hears it from its worker between renewals, a parked or paused one
is handed back by the command itself. Folded into the history (`message_received`), in the
order they were sent, they say whether the run is to be cancelled and whether it is paused.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from durably.core.event_data import read_payload
from durably.core.history import ErrorInfo, Event, EventKind
from durably.core.payloads import MessageReceived
from durably.errors import RunCancelled

__all__ = [
    "CANCEL",
    "CANCEL_KEY",
    "CONTROL_KINDS",
    "PAUSE",
    "RESUME",
    "Control",
    "Request",
    "cancel_error",
    "fold_control",
    "reason_data",
]

CANCEL, PAUSE, RESUME = "cancel", "pause", "resume"  # inbox message kinds
CONTROL_KINDS = frozenset({CANCEL, PAUSE, RESUME})
CANCEL_KEY = "durably:cancel"  # the dedupe key of a cancel: one in a run's inbox at a time


@dataclass(frozen=True, slots=True)
class Request:
    """One person's command: who, why (None: no reason given), when it was sent."""

    by: str
    reason: str | None
    at: datetime


@dataclass(frozen=True, slots=True)
class Control:
    """What the commands folded so far ask of the run."""

    cancel: Request | None = None  # the first cancel (later ones change nothing)
    pause: Request | None = None  # the pause in force (a resume after it lifts it)


def fold_control(events: Iterable[Event]) -> Control:
    cancel: Request | None = None
    pause: Request | None = None
    for event in events:
        if event.kind is not EventKind.MESSAGE_RECEIVED:
            continue
        message = read_payload(event, MessageReceived)
        if message.kind not in CONTROL_KINDS:
            continue
        request = Request(message.sender, _reason(message.data), message.sent_at)
        if message.kind == CANCEL:
            cancel = cancel or request
        elif message.kind == PAUSE:
            pause = request
        else:
            pause = None
    return Control(cancel, pause)


def cancel_error(request: Request) -> ErrorInfo:
    """What a cancelled run ends with (its `run_cancelled` event and its error)."""
    why = f": {request.reason}" if request.reason else ""
    return ErrorInfo.of(RunCancelled(f"cancelled by {request.by}{why}"))


def reason_data(reason: str | None) -> str | None:
    """The data of a command's message: its reason as JSON text."""
    return None if reason is None else json.dumps(reason)


def _reason(data: str | None) -> str | None:
    if data is None:
        return None
    try:
        reason = json.loads(data)
    except ValueError:
        return data  # sent by hand, not as JSON: kept as it came
    return reason if isinstance(reason, str) else data

"""Child runs, as the histories of a parent and its children record them.

A parent's `child_started` event (at the position of its `durably.start_child` call, or of
its call of a workflow) names the child run; the child's `run_started` names its parent
(and the deadline it inherits). When the child ends, a `child` message with its outcome goes
to the parent's inbox, in the transaction that ends the child; folded into the parent's
history (`message_received`), it is what the parent's wait for the child reads, the same on
every replay.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from durably.core import fields as read
from durably.core.event_data import read_payload
from durably.core.history import ErrorInfo, Event, EventKind
from durably.core.payloads import ChildStarted, MessageReceived, RunStarted
from durably.core.status import RunStatus
from durably.errors import PayloadError

__all__ = [
    "CHILD",
    "ChildEnded",
    "child_name",
    "ended_children",
    "lineage",
    "started_children",
    "unfinished_children",
]

CHILD = "child"  # the inbox message kind of a child's end (its name: the child's id)
_CALL = "durably.child:"


def child_name(workflow: str) -> str:
    """The name a child's start has at its position (the determinism check compares it)."""
    return _CALL + workflow


@dataclass(frozen=True, slots=True)
class ChildEnded:
    """How a child run ended: its final status, its result (JSON) or its error."""

    run: str
    status: RunStatus
    result: str | None = None
    error: ErrorInfo | None = None

    def to_json(self) -> str:
        error = self.error
        return json.dumps(
            {
                "status": str(self.status),
                "result": self.result,
                "error_class": None if error is None else error.error_class,
                "message": None if error is None else error.message,
            }
        )

    @classmethod
    def of_message(cls, message: MessageReceived) -> ChildEnded:
        """The outcome a `child` message carries (PayloadError if it is not one)."""
        try:
            data = json.loads(message.data or "")
            if not isinstance(data, dict):
                raise read.Unreadable("a JSON object was expected")
            status = RunStatus(read.string(data, "status"))
            error_class = read.optional_string(data, "error_class")
            error = None
            if error_class is not None:
                error = ErrorInfo(error_class, read.optional_string(data, "message") or "")
            return cls(message.name or "", status, read.optional_string(data, "result"), error)
        except (ValueError, read.Unreadable) as exc:
            raise PayloadError(
                f"the end of child run {message.name!r} came as unreadable data "
                f"{message.data!r}: {exc}"
            ) from None


@dataclass(frozen=True, slots=True)
class Lineage:
    """Where a run stands in a family: the run that started it (None: nobody did) and the
    deadline it inherits from it."""

    parent: str | None = None
    deadline: datetime | None = None
    correlation_id: str | None = None  # the family's: given to the first start
    trace_parent: str | None = None  # the starter's trace context (W3C traceparent)


def lineage(events: Iterable[Event]) -> Lineage:
    for event in events:  # the first event is the run's start
        if event.kind is EventKind.RUN_STARTED and event.data is not None:
            started = read_payload(event, RunStarted)
            return Lineage(
                started.parent, started.deadline, started.correlation_id, started.trace_parent
            )
        return Lineage()
    return Lineage()


def started_children(events: Iterable[Event]) -> list[ChildStarted]:
    """The children the run started, in the order it started them."""
    return [
        read_payload(event, ChildStarted)
        for event in events
        if event.kind is EventKind.CHILD_STARTED
    ]


def ended_children(events: Iterable[Event]) -> dict[str, ChildEnded]:
    """The children whose end the run heard of, by id."""
    ended: dict[str, ChildEnded] = {}
    for event in events:
        if event.kind is EventKind.MESSAGE_RECEIVED:
            message = read_payload(event, MessageReceived)
            if message.kind == CHILD and message.name is not None:
                ended[message.name] = ChildEnded.of_message(message)
    return ended


def unfinished_children(events: Iterable[Event]) -> list[str]:
    """The children (not detached) that had not ended when the run last heard: the ones a
    parent that ends takes with it."""
    events = list(events)
    ended = ended_children(events)
    return [
        child.run
        for child in started_children(events)
        if not child.detached and child.run not in ended
    ]

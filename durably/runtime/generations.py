"""durably.continue_as_new: a long-lived run begins again, under the same id, with a new input
and a fresh history, so a loop that runs for months replays a short history and keeps a short
one in the store.

The new generation's history begins with a `run_started` giving its number (2, 3, ...), the
run's parent and its deadline (a deadline does not start over), followed by the messages the
old generation received and did not use yet (signals no wait took, messages of kinds the
engine does not consume), so nothing sent to the run is lost. The checkpoint that writes it
sets the run's new input and deletes the old generation's events, in one transaction
(`Checkpoint.input`), and hands the run back due now: the next claim runs the workflow from
its start with the new input. Children the old generation started and did not see end (and
did not start detached) are cancelled, as when a run completes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from durably.clock import Clock
from durably.codec.encoding import encode_call
from durably.core.children import CHILD, lineage
from durably.core.control import CONTROL_KINDS
from durably.core.event_data import encode_payload, read_payload
from durably.core.history import Event, EventKind
from durably.core.payloads import MessageReceived, RunStarted, SignalReceived
from durably.core.status import RunStatus
from durably.core.updates import ANSWER_PREFIX, UPDATE_KIND, Request, is_answer_key
from durably.errors import DurablyError, PayloadError
from durably.runtime.checkpoints import HistoryWriter
from durably.runtime.lineage import cancel_children

if TYPE_CHECKING:
    from durably.workflow.definitions import Workflow

__all__ = ["continue_as_new", "generation", "next_input", "unused_messages"]

_LEFT_BEHIND = "its parent run continued as new without waiting for its end"


async def continue_as_new(
    writer: HistoryWriter,
    input_json: str,
    *,
    deadline: datetime | None,
    clock: Clock,
    version: str | None = None,
) -> datetime:
    """Begin the run's next generation with `input_json`, pinned to `version` (the running
    code's: a fresh history follows nothing older); when it is due (now)."""
    await writer.flush()  # what the old generation did last is its own, committed first
    events = list(writer.events)
    writer.outbox += cancel_children(writer.run_id, events, _LEFT_BEHIND)
    family = lineage(events)
    started = RunStarted(
        parent=family.parent,
        deadline=deadline,
        generation=generation(events) + 1,
        correlation_id=family.correlation_id,
        trace_parent=family.trace_parent,
    )
    writer.append(EventKind.RUN_STARTED, data=encode_payload(started))
    for message in unused_messages(events):
        writer.append(EventKind.MESSAGE_RECEIVED, data=message.data)
    writer.input, writer.version = input_json, version
    now = clock.now()
    await writer.flush(RunStatus.PENDING, available_at=now)
    return now


def next_input(workflow: Workflow, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
    """The new generation's input, as JSON; DurablyError if it would not round-trip."""
    what = f"the input of workflow {workflow.name!r}"
    try:
        return encode_call(args, kwargs, workflow.fn, what=what)
    except PayloadError as exc:
        raise DurablyError(f"durably.continue_as_new(): {exc}") from None


def generation(events: Sequence[Event]) -> int:
    """Which generation of its run a history is (1 until the run continues as new)."""
    first = events[0] if events else None
    if first is None or first.kind is not EventKind.RUN_STARTED or first.data is None:
        return 1
    return read_payload(first, RunStarted).generation or 1


def unused_messages(events: Sequence[Event]) -> list[Event]:
    """The `message_received` events the run has not used: signals no wait took, updates it
    did not answer, and kinds the engine does not consume (a person's commands and children's
    ends are used as they are folded)."""
    taken = {
        read_payload(event, SignalReceived).message
        for event in events
        if event.kind is EventKind.SIGNAL_RECEIVED
    }
    answered = {
        event.name.removeprefix(ANSWER_PREFIX)
        for event in events
        if event.kind is EventKind.EVENT_SET and event.name and is_answer_key(event.name)
    }
    unused = []
    for event in events:
        if event.kind is not EventKind.MESSAGE_RECEIVED:
            continue
        message = read_payload(event, MessageReceived)
        if message.kind in CONTROL_KINDS or message.kind == CHILD or message.id in taken:
            continue
        if message.kind == UPDATE_KIND:
            request = Request.from_json(message.data)
            if request is None or request.id in answered:
                continue  # answered (its answer stays readable): the next generation owes none
        unused.append(event)
    return unused

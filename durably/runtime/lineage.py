"""The messages a run sends its family when it ends: a child tells its parent how it ended,
a parent that ends before its children cancels them (those not started `detached`). Each goes
out in the transaction of the checkpoint that ends (or starts undoing) the run, through
`Checkpoint.messages`, so the family hears exactly what the history says."""

from __future__ import annotations

from collections.abc import Sequence

from durably.core.children import CHILD, ChildEnded, lineage, unfinished_children
from durably.core.control import CANCEL, CANCEL_KEY, reason_data
from durably.core.history import ErrorInfo, Event
from durably.core.status import RunStatus
from durably.stores.records import Message

__all__ = ["cancel_children", "parent_notice"]


def parent_notice(
    run_id: str,
    events: Sequence[Event],
    status: RunStatus,
    *,
    result: str | None = None,
    error: ErrorInfo | None = None,
) -> tuple[Message, ...]:
    """For a child run that ends in `status`: the message telling its parent (none if it
    has no parent)."""
    parent = lineage(events).parent
    if parent is None:
        return ()
    ended = ChildEnded(run_id, status, result, error)
    key = f"durably:child:{run_id}"
    return (Message(parent, CHILD, f"child run {run_id}", run_id, ended.to_json(), key),)


def cancel_children(run_id: str, events: Sequence[Event], why: str) -> tuple[Message, ...]:
    """For a run that ends (or starts undoing its steps): a cancel for each child it started
    that has not ended, as far as its history knows (a child that has is left as it is)."""
    sender, reason = f"parent run {run_id}", reason_data(why)
    return tuple(
        Message(child, CANCEL, sender, None, reason, CANCEL_KEY, from_parent=run_id)
        for child in unfinished_children(events)
    )

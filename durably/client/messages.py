"""Messages to a run's inbox from outside it (Client.send, Client.signal): checked, encoded,
recorded in the audit trail with the write that stores them, and kept for the run's lease
holder, which folds each into the history exactly once (durably.stores.sql.inbox)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from durably.codec.encoding import encode
from durably.core.audit import Action, Via, audit_of
from durably.core.control import CONTROL_KINDS
from durably.core.signals import SIGNAL_KIND, check_signal_name
from durably.core.status import RunStatus
from durably.errors import DurablyError, RunEnded, RunNotFound
from durably.stores import Message, SentOutcome, Store

__all__ = ["Delivered", "check_signal", "send"]


@dataclass(frozen=True, slots=True)
class Delivered:
    """A message in a run's inbox: its id there, and False if a message with the same
    dedupe_key was there already (this one was not stored again)."""

    message_id: int
    stored: bool


def send(
    store: Store,
    run_id: str,
    kind: str,
    *,
    by: str,
    via: Via,
    name: str | None,
    data: Any,
    dedupe_key: str | None,
    max_payload: int | None,
    now: datetime,
) -> Delivered:
    """Store the message in the run's inbox (see Client.send)."""
    if kind in CONTROL_KINDS:
        raise DurablyError(
            f"{kind!r} messages are the engine's own: call {kind}() (or durably {kind}) so "
            "that the run's state is checked and the command reaches it wherever it is"
        )
    what = f"the data of the {kind!r} message"
    encoded = None if data is None else encode(data, what=what, limit=max_payload)
    # Always a key: a send tried again after its answer was lost is then found, not doubled.
    key = dedupe_key if dedupe_key is not None else f"durably:{uuid.uuid4().hex}"
    # In the trail: the signal's name (or the message's kind and name), never its data.
    if kind == SIGNAL_KIND:
        audit = audit_of(Action.SIGNAL, by, via, signal=name)
    else:
        audit = audit_of(Action.MESSAGE, by, via, kind=kind, name=name)
    sent = store.send(Message(run_id, kind, by, name, encoded, key, audit=audit), now=now)
    if sent.outcome is SentOutcome.NO_RUN:
        raise RunNotFound(f"no run has the id {run_id!r} in {store.url}")
    if sent.outcome is SentOutcome.ENDED:
        what = f"the {kind} {name!r}" if name else f"the {kind!r} message"
        raise RunEnded(
            f"run {run_id!r} has finished ({sent.status}), so {what} cannot reach it: "
            "a message reaches only a run that has not ended"
        )
    assert sent.message_id is not None
    return Delivered(sent.message_id, sent.outcome is SentOutcome.STORED)


def check_signal(store: Store, run_id: str, name: str) -> None:
    """Refuse a signal no wait of the run could take: a bad name, or a run whose undo failed."""
    check_signal_name(name)
    run = store.get_run(run_id)
    if run is not None and run.status is RunStatus.COMPENSATION_FAILED:
        raise DurablyError(
            f"run {run_id!r} is being undone and an undo failed, so no wait will take the "
            f"signal {name!r}: retry the undo (durably dlq retry {run_id}), record that you "
            f"did it by hand (durably dlq skip {run_id}), or fail the run"
        )

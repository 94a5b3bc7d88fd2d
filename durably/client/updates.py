"""Sending an update to a run (durably.core.updates) from outside it: the request a caller
makes, and what it is told when no answer comes. RunHandle.update sends it and waits."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from durably.codec.encoding import encode
from durably.core.event_data import read_payload
from durably.core.history import Event, EventKind
from durably.core.names import check_name
from durably.core.payloads import MessageReceived
from durably.core.updates import UPDATE_KIND, Request
from durably.errors import EventNotSet, UpdateRefused

__all__ = ["ended_first", "not_yet", "request", "waiting", "was_sent"]


def request(name: str, args: Sequence[Any], update_id: str | None) -> Request:
    """The update's request: its id (given, or new) and its arguments, checked to be JSON
    that reads back unchanged (PayloadError naming the argument if not)."""
    check_name(name, "an update's name")
    if update_id is not None:
        check_name(update_id, "an update's id")
    text = encode(list(args), what=f"the arguments of update {name!r}", path="args")
    return Request(update_id or uuid.uuid4().hex, json.loads(text))


def was_sent(history: Sequence[Event], update_id: str) -> bool:
    """Whether the run's history holds the update `update_id` (it was sent, and reached it)."""
    for event in history:
        if event.kind is EventKind.MESSAGE_RECEIVED:
            message = read_payload(event, MessageReceived)
            request = Request.from_json(message.data) if message.kind == UPDATE_KIND else None
            if request is not None and request.id == update_id:
                return True
    return False


@contextmanager
def waiting(run_id: str, name: str, update_id: str) -> Iterator[None]:
    """Around a caller's wait for the answer to update `update_id`: why none came, said."""
    try:
        yield
    except EventNotSet as exc:
        raise ended_first(run_id, name) from exc
    except TimeoutError as exc:
        raise not_yet(run_id, name, update_id, str(exc)) from exc


def ended_first(run_id: str, name: str) -> UpdateRefused:
    return UpdateRefused(
        f"run {run_id!r} ended before it applied update {name!r}: its workflow registered no "
        "handler of that name (@durably.update) by its end, or ended before its next durable "
        "call",
        name=name,
        by="run",
        error_class="",
        detail="the run ended first",
    )


def not_yet(run_id: str, name: str, update_id: str, why: str) -> TimeoutError:
    return TimeoutError(
        f"update {name!r} (id {update_id}) was sent to run {run_id!r} but not answered in time "
        f"({why}). A run applies an update at its workflow's next durable call, after a step "
        "that is running ends; ask again with update_id= to get the answer once it comes"
    )

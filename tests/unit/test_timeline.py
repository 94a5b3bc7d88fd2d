"""The detail column of a run's timeline, read from each event's typed payload."""

from __future__ import annotations

from datetime import UTC, datetime

from durably.core.history import Event, EventKind
from durably.timeline import timeline

AT = datetime(2026, 1, 1, tzinfo=UTC)
WAIT = '{"waiting": "rate limit", "dependency": "dhl", "until": "2026-01-01T00:00:30+00:00"}'
MESSAGE = (
    '{"id": 4, "kind": "signal", "name": "approved", "data": "{\\"by\\":\\"erin\\"}", '
    '"sender": "erin", "sent_at": "2026-01-01T00:00:00+00:00"}'
)


def details(*events: Event) -> list[str]:
    return [row.detail for row in timeline(events)]


def step(seq: int, kind: EventKind, data: str) -> Event:
    return Event(seq, kind, AT, 0, "charge", 1, data)


def test_each_kind_of_payload_reads_as_a_line() -> None:
    assert details(
        Event(1, EventKind.RUN_STARTED, AT),
        Event(2, EventKind.CLAIMED, AT, data='{"owner": "w2", "epoch": 2, "took_over_from": "w1"}'),
        step(3, EventKind.STEP_STARTED, '{"key": "k-1", "input": {"args":[7],"kwargs":{}}}'),
        step(4, EventKind.STEP_FAILED, '{"error_class": "E", "message": "no", "reason": "x"}'),
        step(5, EventKind.STEP_WAITING, WAIT),
        Event(6, EventKind.MESSAGE_RECEIVED, AT, data=MESSAGE),
    ) == [
        "",
        "by w2 (epoch 2), took over from w1",
        'key=k-1 input={"args": [7], "kwargs": {}}',
        "E: no",
        WAIT,
        'signal \'approved\' from erin: {"by":"erin"}',
    ]


def test_data_that_is_not_its_kinds_payload_is_shown_as_unreadable() -> None:
    assert details(
        Event(1, EventKind.CLAIMED, AT, data='{"owner": "w"}'),
        step(2, EventKind.STEP_FAILED, "{oops"),
    ) == ['(unreadable: {"owner": "w"})', "(unreadable: {oops)"]

"""The detail column of a run's timeline, read from each event's typed payload."""

from __future__ import annotations

from datetime import UTC, datetime

from durably.core.history import Event, EventKind
from durably.views.timeline import timeline

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
        "charge(7), key k-1",
        "E: no",
        "rate limit of dhl: no attempt until 2026-01-01T00:00:30.000+00:00",
        'signal \'approved\' from erin: {"by":"erin"}',
    ]


def test_data_that_is_not_its_kinds_payload_is_shown_as_unreadable() -> None:
    assert details(
        Event(1, EventKind.CLAIMED, AT, data='{"owner": "w"}'),
        step(2, EventKind.STEP_FAILED, "{oops"),
    ) == ['(unreadable: {"owner": "w"})', "(unreadable: {oops)"]


def test_timers_signals_and_values_read_as_words() -> None:
    def call(seq: int, kind: EventKind, name: str, data: str | None = None) -> Event:
        return Event(seq, kind, AT, 0, name, None, data)

    rows = timeline(
        [
            call(1, EventKind.TIMER_SET, "durably.sleep", '{"until": "2026-01-08T00:00:00+00:00"}'),
            call(2, EventKind.TIMER_FIRED, "durably.sleep"),
            call(3, EventKind.SIGNAL_WAITING, "durably.signal:approved", '{"until": null}'),
            call(
                4,
                EventKind.SIGNAL_RECEIVED,
                "durably.signal:approved",
                '{"message": 9, "data": "{\\"ok\\": true}", "sender": "erin", '
                '"sent_at": "2026-01-01T00:00:00+00:00"}',
            ),
            call(5, EventKind.VALUE_RECORDED, "durably.now", '"2026-01-01T00:00:00+00:00"'),
        ]
    )
    assert [(row.what, row.step, row.detail) for row in rows] == [
        ("timer_set", "#0 durably.sleep", "until 2026-01-08T00:00:00.000+00:00"),
        ("timer_fired", "#0 durably.sleep", ""),
        ("signal_waiting", "#0 durably.signal:approved", "no timeout"),
        ("signal_received", "#0 durably.signal:approved", 'message 9 from erin: {"ok": true}'),
        ("value_recorded", "#0 durably.now", 'recorded "2026-01-01T00:00:00+00:00"'),
    ]

"""Event payloads: every kind's data decodes from the JSON the engine writes (and has written
before typed payloads: the literals below are byte for byte what that code wrote), and every
payload survives a round trip."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from durably.core.event_data import (
    PAYLOAD_CLASSES,
    encode_payload,
    payload_of,
    read_payload,
    step_started_data,
)
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
from durably.errors import PayloadError

AT = datetime(2026, 1, 1, tzinfo=UTC)
DUE = datetime(2026, 1, 1, 0, 0, 2, 500000, tzinfo=UTC)
RESET = ErrorInfo("ConnectionError", "reset by peer")
STEP_KINDS = {
    EventKind.STEP_STARTED,
    EventKind.STEP_COMPLETED,
    EventKind.STEP_ATTEMPT_FAILED,
    EventKind.STEP_RECONCILED,
    EventKind.STEP_FAILED,
    EventKind.STEP_WAITING,
    EventKind.STEP_SKIPPED,
    EventKind.COMPENSATION_STARTED,
    EventKind.COMPENSATION_COMPLETED,
    EventKind.COMPENSATION_ATTEMPT_FAILED,
    EventKind.COMPENSATION_FAILED,
    EventKind.TIMER_SET,
    EventKind.TIMER_FIRED,
    EventKind.SIGNAL_WAITING,
    EventKind.SIGNAL_RECEIVED,
    EventKind.SIGNAL_TIMED_OUT,
    EventKind.VALUE_RECORDED,
}


def event(kind: EventKind, data: str | None, seq: int = 7) -> Event:
    if kind in STEP_KINDS:
        return Event(seq, kind, AT, 0, "charge", 1, data)
    return Event(seq, kind, AT, data=data)


# (kind, data as the engine wrote it before typed payloads, what it decodes to)
WRITTEN: list[tuple[EventKind, str, Payload]] = [
    (EventKind.CLAIMED, '{"owner": "worker-a", "epoch": 1}', Claimed("worker-a", 1)),
    (
        EventKind.CLAIMED,
        '{"owner": "worker-b", "epoch": 2, "took_over_from": "worker-a"}',
        Claimed("worker-b", 2, took_over_from="worker-a"),
    ),
    (
        EventKind.STEP_STARTED,
        '{"key": "run-1:0:charge", "input": {"args":[{"id":"o-1","total":12}],"kwargs":{}}}',
        StepStarted("run-1:0:charge", {"args": [{"id": "o-1", "total": 12}], "kwargs": {}}),
    ),
    (
        EventKind.STEP_STARTED,
        '{"key": "run-1:0:reserve", "input": {"args":[],"kwargs":{}}, "undo": true}',
        StepStarted("run-1:0:reserve", {"args": [], "kwargs": {}}, undo=True),
    ),
    (EventKind.STEP_COMPLETED, '{"id":"ch_1"}', Result('{"id":"ch_1"}')),
    (
        EventKind.STEP_ATTEMPT_FAILED,
        '{"error_class": "ConnectionError", "message": "reset by peer", '
        '"retry_at": "2026-01-01T00:00:02.500000+00:00", "unknown": true}',
        AttemptFailed(RESET, DUE, unknown=True),
    ),
    (EventKind.STEP_RECONCILED, '{"found": true}', StepReconciled(found=True)),
    (
        EventKind.STEP_FAILED,
        '{"error_class": "durably.errors.Terminal", "message": "card declined", '
        '"reason": "attempts exhausted", "attempts": 3}',
        StepFailed(ErrorInfo("durably.errors.Terminal", "card declined"), "attempts exhausted", 3),
    ),
    (  # a result that could not be stored: no attempts
        EventKind.STEP_FAILED,
        '{"error_class": "durably.errors.PayloadError", "message": "x", "reason": "terminal"}',
        StepFailed(ErrorInfo("durably.errors.PayloadError", "x"), "terminal"),
    ),
    (
        EventKind.STEP_WAITING,
        '{"waiting": "breaker open", "dependency": "payments", '
        '"until": "2026-01-01T00:00:30+00:00"}',
        StepWaiting("breaker open", "payments", datetime(2026, 1, 1, 0, 0, 30, tzinfo=UTC)),
    ),
    (EventKind.STEP_SKIPPED, '"paid-by-phone"', Result('"paid-by-phone"')),
    (
        EventKind.COMPENSATING,
        '{"error_class": "ConnectionError", "message": "reset by peer", "then": "timed_out"}',
        Compensating(RESET, RunStatus.TIMED_OUT),
    ),
    (
        EventKind.COMPENSATION_STARTED,
        '{"key": "run-1:0:charge:undo"}',
        CompensationStarted("run-1:0:charge:undo"),
    ),
    (
        EventKind.COMPENSATION_ATTEMPT_FAILED,
        '{"error_class": "ConnectionError", "message": "reset by peer", '
        '"retry_at": "2026-01-01T00:00:02.500000+00:00"}',
        CompensationAttemptFailed(RESET, DUE),
    ),
    (
        EventKind.COMPENSATION_FAILED,
        '{"error_class": "ConnectionError", "message": "reset by peer", '
        '"reason": "attempts exhausted", "attempts": 5}',
        CompensationFailed(RESET, "attempts exhausted", 5),
    ),
    (
        EventKind.RUN_FAILED,
        '{"error_class": "ConnectionError", "message": "reset by peer"}',
        RunFailed(RESET),
    ),
    (
        EventKind.RUN_PARKED,
        '{"error_class": "ConnectionError", "message": "reset by peer", "reason": "PoisonPill"}',
        RunParked(RESET, "PoisonPill"),
    ),
    (EventKind.RUN_RETRIED, '{"by": "erin", "from_step": 2}', RunRetried("erin", 2)),
    (EventKind.RUN_RETRIED, '{"by": "erin", "from_step": null}', RunRetried("erin", None)),
    (
        EventKind.UPGRADED,
        '{"from": "57c67945b449", "to": "9f0e1d2c3b4a", "by": "erin"}',
        Upgraded("57c67945b449", "9f0e1d2c3b4a", "erin"),
    ),
    (
        EventKind.UPGRADED,
        '{"from": null, "to": "v2", "by": "worker w1"}',
        Upgraded(None, "v2", "worker w1"),
    ),
    (
        EventKind.RELEASED,
        '{"reason": "ran alone past where its worker died; others wait"}',
        Released("ran alone past where its worker died; others wait"),
    ),
    (
        EventKind.RUNNING_ALONE,
        '{"reason": "a worker died while running it"}',
        RunningAlone("a worker died while running it"),
    ),
    (
        EventKind.MESSAGE_RECEIVED,
        '{"id": 4, "kind": "signal", "name": "approved", "data": "{\\"by\\": \\"erin\\"}", '
        '"sender": "erin", "sent_at": "2026-01-01T00:00:00+00:00"}',
        MessageReceived(4, "signal", "approved", '{"by": "erin"}', "erin", AT),
    ),
    (  # no name, no data
        EventKind.MESSAGE_RECEIVED,
        '{"id": 5, "kind": "cancel", "name": null, "data": null, "sender": "ops", '
        '"sent_at": "2026-01-01T00:00:02.500000+00:00"}',
        MessageReceived(5, "cancel", None, None, "ops", DUE),
    ),
    (
        EventKind.TIMER_SET,
        '{"until": "2026-01-01T00:00:02.500000+00:00"}',
        WaitStarted(DUE),
    ),
    (EventKind.SIGNAL_WAITING, '{"until": null}', WaitStarted(None)),
    (
        EventKind.SIGNAL_RECEIVED,
        '{"message": 4, "data": "{\\"ok\\": true}", "sender": "erin", '
        '"sent_at": "2026-01-01T00:00:00+00:00"}',
        SignalReceived(4, '{"ok": true}', "erin", AT),
    ),
    (
        EventKind.VALUE_RECORDED,
        '"2026-01-01T00:00:00+00:00"',
        Result('"2026-01-01T00:00:00+00:00"'),
    ),
    (
        EventKind.APPROVAL_REQUESTED,
        '{"until": "2026-01-01T00:00:02.500000+00:00", "on_timeout": "escalate", '
        '"remind_after": 3600.0, "details": "{\\"order\\": 7}"}',
        ApprovalRequested(DUE, "escalate", 3600.0, '{"order": 7}'),
    ),
    (
        EventKind.APPROVAL_REQUESTED,
        '{"until": null, "on_timeout": "reject", "remind_after": null, "details": null}',
        ApprovalRequested(None, "reject"),
    ),
    (EventKind.APPROVAL_TOKEN, '{"hash": "ab12", "notice": 1}', ApprovalToken("ab12", 1)),
    (
        EventKind.APPROVAL_DECIDED,
        '{"approved": true, "by": "maria", "at": "2026-01-01T00:00:00+00:00", '
        '"comment": null, "via": "token"}',
        Decision(True, "maria", AT, None, "token"),
    ),
    (EventKind.STEP_HEARTBEAT, '{"rows": 1200}', Result('{"rows": 1200}')),
    (EventKind.EVENT_SET, '{"done": 3, "total": 5}', Result('{"done": 3, "total": 5}')),
    (
        EventKind.RUN_STARTED,
        '{"restarted_from": "order-7", "from_step": 2, "by": "erin"}',
        RunStarted("order-7", 2, "erin"),
    ),
    (
        EventKind.RUN_STARTED,
        '{"parent": "order-7", "deadline": "2026-01-01T00:00:00+00:00"}',
        RunStarted(parent="order-7", deadline=AT),
    ),
    (EventKind.RUN_STARTED, '{"parent": "order-7"}', RunStarted(parent="order-7")),
    (
        EventKind.CHILD_STARTED,
        '{"run": "order-7.1.pick", "workflow": "pick"}',
        ChildStarted("order-7.1.pick", "pick"),
    ),
    (
        EventKind.CHILD_STARTED,
        '{"run": "audit-7", "workflow": "audit", "detached": true}',
        ChildStarted("audit-7", "audit", detached=True),
    ),
    (
        EventKind.RUN_RESTARTED,
        '{"run": "order-7.restart-1", "from_step": 2, "by": "erin"}',
        Restarted("order-7.restart-1", 2, "erin"),
    ),
    (
        EventKind.RUN_CANCELLED,
        '{"error_class": "durably.errors.RunCancelled", "message": "cancelled by ops: dup"}',
        RunFailed(ErrorInfo("durably.errors.RunCancelled", "cancelled by ops: dup")),
    ),
    (
        EventKind.RUN_PAUSED,
        '{"by": "ops", "reason": "supplier down"}',
        Command("ops", "supplier down"),
    ),
    (EventKind.RUN_PAUSED, '{"by": "ops", "reason": null}', Command("ops")),
    (EventKind.PATCH_DECIDED, "false", Result("false")),
    (
        EventKind.COMPENSATION_SKIPPED,
        '{"by": "ops", "reason": "refunded by hand"}',
        Command("ops", "refunded by hand"),
    ),
]
NO_DATA = [kind for kind, cls in PAYLOAD_CLASSES.items() if cls is None]


def test_every_kind_has_its_payload_class_or_none() -> None:
    assert set(PAYLOAD_CLASSES) == set(EventKind)
    assert set(NO_DATA) == {
        EventKind.COMPENSATION_COMPLETED,
        EventKind.RUN_COMPLETED,
        EventKind.TIMER_FIRED,
        EventKind.SIGNAL_TIMED_OUT,
        EventKind.APPROVAL_ESCALATED,
        EventKind.ATTEMPT_LOST,
    }


def test_every_kind_with_data_has_a_literal_of_its_stored_format() -> None:
    assert {kind for kind, _, _ in WRITTEN} == set(EventKind) - set(NO_DATA)


@pytest.mark.parametrize(("kind", "data", "expected"), WRITTEN)
def test_data_written_before_typed_payloads_decodes(
    kind: EventKind, data: str, expected: Payload
) -> None:
    decoded = payload_of(event(kind, data))
    assert decoded == expected
    assert type(decoded) is PAYLOAD_CLASSES[kind]


@pytest.mark.parametrize(("kind", "data", "expected"), WRITTEN)
def test_encoding_writes_the_stored_format_byte_for_byte(
    kind: EventKind, data: str, expected: Payload
) -> None:
    if isinstance(expected, StepStarted):  # the engine writes it on its own path, below
        encoded = step_started_data(expected.key, data.split(', "input": ', 1)[1][:-1])
    else:
        encoded = encode_payload(expected)
    assert encoded == data


@pytest.mark.parametrize(("kind", "data", "expected"), WRITTEN)
def test_every_payload_survives_a_round_trip(kind: EventKind, data: str, expected: Payload) -> None:
    assert payload_of(event(kind, encode_payload(expected))) == expected


@pytest.mark.parametrize("kind", NO_DATA)
def test_kinds_without_data_decode_to_none(kind: EventKind) -> None:
    assert payload_of(event(kind, None)) is None


def test_a_released_event_without_a_reason_has_no_payload() -> None:
    """A stopping worker hands its run back with no data."""
    assert payload_of(event(EventKind.RELEASED, None)) is None
    with pytest.raises(PayloadError, match=r"event #7 \(released\).*Released was expected"):
        read_payload(event(EventKind.RELEASED, None), Released)


@pytest.mark.parametrize(
    "key", ["run-1:0:charge", 'quo"te\\back', "naïve ☃", "line\nbreak", "\u2028"]
)
def test_the_hot_path_writes_what_json_writes(key: str) -> None:
    """step_started_data builds text by hand: it must be what json.dumps would write."""
    input_json = '{"args":["café",{"n":1.5}],"kwargs":{"k":null}}'
    data = step_started_data(key, input_json)
    assert data == json.dumps({"key": key})[:-1] + f', "input": {input_json}}}'
    assert json.loads(data) == {"key": key, "input": json.loads(input_json)}
    assert payload_of(event(EventKind.STEP_STARTED, data)) == StepStarted(
        key, json.loads(input_json)
    )


def test_keys_this_version_does_not_know_are_ignored() -> None:
    data = '{"owner": "w", "epoch": 3, "region": "eu", "took_over_from": null}'
    assert payload_of(event(EventKind.CLAIMED, data)) == Claimed("w", 3)


@pytest.mark.parametrize(
    ("kind", "data", "expected"),
    [  # the defaults the engine's readers have always applied to these missing keys
        (
            EventKind.STEP_FAILED,
            '{"error_class": "E", "message": "m"}',
            StepFailed(ErrorInfo("E", "m"), "terminal", None),
        ),
        (
            EventKind.STEP_ATTEMPT_FAILED,
            '{"error_class": "E", "message": "m", "retry_at": "2026-01-01T00:00:02.500000+00:00"}',
            AttemptFailed(ErrorInfo("E", "m"), DUE, unknown=False),
        ),
        (
            EventKind.COMPENSATING,
            '{"error_class": "E", "message": "m"}',
            Compensating(ErrorInfo("E", "m"), RunStatus.FAILED),
        ),
    ],
)
def test_optional_keys_take_their_old_defaults(
    kind: EventKind, data: str, expected: Payload
) -> None:
    assert payload_of(event(kind, data)) == expected


@pytest.mark.parametrize(
    ("kind", "data", "why"),
    [
        (EventKind.STEP_FAILED, "not json", "Expecting value"),
        (EventKind.STEP_FAILED, "[1, 2]", "a JSON object was expected, not list"),
        (EventKind.STEP_FAILED, '{"message": "m"}', "'error_class' is missing"),
        (EventKind.CLAIMED, '{"owner": "w", "epoch": "1"}', "'epoch' should be an integer"),
        (EventKind.CLAIMED, '{"owner": "w", "epoch": true}', "'epoch' should be an integer"),
        (EventKind.CLAIMED, '{"owner": 5, "epoch": 1}', "'owner' should be a string, not 5"),
        (
            EventKind.STEP_ATTEMPT_FAILED,
            '{"error_class": "E", "message": "m", "retry_at": "soon"}',
            "Invalid isoformat string",
        ),
        (
            EventKind.STEP_ATTEMPT_FAILED,
            '{"error_class": "E", "message": "m", "retry_at": "2026-01-01", "unknown": "yes"}',
            "'unknown' should be true or false",
        ),
        (
            EventKind.COMPENSATING,
            '{"error_class": "E", "message": "m", "then": "later"}',
            "'later' is not a valid RunStatus",
        ),
        (EventKind.STEP_STARTED, '{"key": "k"}', "'input' is missing"),
        (EventKind.STEP_STARTED, '{"key": "k", "input": []}', "'input' should be an object"),
        (EventKind.RUN_RETRIED, '{"by": "erin", "from_step": 1.5}', "'from_step' should be an"),
    ],
)
def test_unreadable_data_is_a_payload_error_naming_the_event(
    kind: EventKind, data: str, why: str
) -> None:
    with pytest.raises(PayloadError) as raised:
        payload_of(event(kind, data, seq=12))
    message = str(raised.value)
    assert message.startswith(f"event #12 ({kind}) ")
    assert repr(data) in message
    assert why in message


def test_the_error_names_the_step_of_a_step_event() -> None:
    with pytest.raises(PayloadError, match=r"^event #7 \(step_failed\) of step 'charge' holds"):
        payload_of(event(EventKind.STEP_FAILED, "{}"))


def test_read_payload_checks_the_class_it_is_asked_for() -> None:
    claimed = event(EventKind.CLAIMED, '{"owner": "w", "epoch": 1}')
    assert read_payload(claimed, Claimed) == Claimed("w", 1)
    with pytest.raises(PayloadError, match="a StepFailed was expected, found Claimed"):
        read_payload(claimed, StepFailed)

"""Replay decisions on histories written as plain data: no store, no worker."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from durably.core.history import Event, EventKind
from durably.core.replay import (
    Execute,
    Replay,
    fold_deaths,
    fold_run,
    fold_steps,
    next_action,
    progressed,
)
from durably.errors import NonDeterminismError, PayloadError

AT = datetime(2026, 1, 1, tzinfo=UTC)


def started(seq: int, position: int, name: str, attempt: int = 1) -> Event:
    key = json.dumps({"key": f"run-1:{position}:{name}"})
    return Event(seq, EventKind.STEP_STARTED, AT, position, name, attempt, key)


def completed(seq: int, position: int, name: str, result: object, attempt: int = 1) -> Event:
    return Event(seq, EventKind.STEP_COMPLETED, AT, position, name, attempt, json.dumps(result))


def failed(seq: int, position: int, name: str, error_class: str, message: str) -> Event:
    data = json.dumps({"error_class": error_class, "message": message})
    return Event(seq, EventKind.STEP_FAILED, AT, position, name, 1, data)


def run_events(*steps: Event) -> list[Event]:
    """A history as a worker writes it: run_started, claimed, then the step events."""
    return [
        Event(1, EventKind.RUN_STARTED, AT),
        Event(2, EventKind.CLAIMED, AT, data=json.dumps({"owner": "w1", "epoch": 1})),
        *steps,
    ]


# -- fold_steps ---------------------------------------------------------------------------


def test_an_empty_history_has_no_steps() -> None:
    assert fold_steps([]) == []
    assert fold_steps(run_events()) == []


def test_run_level_events_are_not_steps() -> None:
    history = [
        *run_events(started(3, 0, "charge"), completed(4, 0, "charge", "ch_1")),
        Event(5, EventKind.RELEASED, AT),
        Event(6, EventKind.CLAIMED, AT, data="{}"),
        Event(7, EventKind.RUN_COMPLETED, AT),
    ]
    [record] = fold_steps(history)
    assert (record.position, record.name, record.attempts) == (0, "charge", 1)
    assert record.completed
    assert record.result == '"ch_1"'
    assert record.error is None


def test_steps_are_folded_in_position_order() -> None:
    history = run_events(
        started(3, 0, "charge"),
        completed(4, 0, "charge", "ch_1"),
        started(5, 1, "reserve"),
        failed(6, 1, "reserve", "ValueError", "no stock"),
        started(7, 2, "label"),
    )
    records = fold_steps(history)
    assert [(r.position, r.name) for r in records] == [(0, "charge"), (1, "reserve"), (2, "label")]
    charge, reserve, label = records
    assert charge.completed
    assert charge.result == '"ch_1"'
    assert charge.settled
    assert reserve.error is not None
    assert (reserve.error.error_class, reserve.error.message) == ("ValueError", "no stock")
    assert reserve.settled
    assert not reserve.completed
    assert label.attempts == 1
    assert not label.settled


def test_attempts_count_the_started_attempts() -> None:
    history = run_events(
        started(3, 0, "charge", attempt=1),
        started(4, 0, "charge", attempt=2),
        started(5, 0, "charge", attempt=3),
    )
    [record] = fold_steps(history)
    assert (record.position, record.name, record.attempts) == (0, "charge", 3)
    assert not record.settled


def test_unreadable_failure_data_is_a_payload_error_naming_the_event() -> None:
    broken = Event(4, EventKind.STEP_FAILED, AT, 0, "charge", 1, "not json")
    with pytest.raises(PayloadError, match=r"event #4 .*'charge'.*'not json'"):
        fold_steps(run_events(started(3, 0, "charge"), broken))


def test_failure_data_without_the_error_fields_is_a_payload_error() -> None:
    broken = Event(4, EventKind.STEP_FAILED, AT, 0, "charge", 1, json.dumps({"oops": 1}))
    with pytest.raises(PayloadError, match=r"event #4 \(step_failed\).*'error_class' is missing"):
        fold_steps(run_events(started(3, 0, "charge"), broken))


# -- next_action --------------------------------------------------------------------------


def test_a_fresh_position_executes_attempt_one() -> None:
    first = next_action([], 0, "charge")
    assert isinstance(first, Execute)
    assert (first.position, first.attempt) == (0, 1)
    assert not first.unknown
    steps = fold_steps(run_events(started(3, 0, "charge"), completed(4, 0, "charge", "ch_1")))
    second = next_action(steps, 1, "reserve")
    assert isinstance(second, Execute)
    assert (second.position, second.attempt) == (1, 1)


def test_a_completed_step_replays_its_result() -> None:
    steps = fold_steps(run_events(started(3, 0, "charge"), completed(4, 0, "charge", {"id": 7})))
    action = next_action(steps, 0, "charge")
    assert isinstance(action, Replay)
    assert action.record.completed
    assert json.loads(action.record.result or "") == {"id": 7}


def test_a_failed_step_replays_its_error() -> None:
    steps = fold_steps(
        run_events(started(3, 0, "charge"), failed(4, 0, "charge", "app.Declined", "card declined"))
    )
    action = next_action(steps, 0, "charge")
    assert isinstance(action, Replay)
    assert not action.record.completed
    assert action.record.error is not None
    assert action.record.error.error_class == "app.Declined"
    assert action.record.error.message == "card declined"


@pytest.mark.parametrize("attempts", [1, 2, 5])
def test_a_step_started_without_an_outcome_executes_the_next_attempt(attempts: int) -> None:
    """A crash mid-step leaves it unknown: it runs again, as the following attempt."""
    history = run_events(*(started(2 + n, 0, "charge", attempt=n) for n in range(1, attempts + 1)))
    action = next_action(fold_steps(history), 0, "charge")
    assert isinstance(action, Execute)
    assert (action.position, action.attempt) == (0, attempts + 1)
    assert action.unknown  # it may have happened: reconcile before running it again


def test_a_different_step_at_a_recorded_position_is_non_determinism() -> None:
    steps = fold_steps(
        run_events(
            started(3, 0, "charge"),
            completed(4, 0, "charge", "ch_1"),
            started(5, 1, "reserve"),
            completed(6, 1, "reserve", None),
        )
    )
    with pytest.raises(NonDeterminismError) as raised:
        next_action(steps, 1, "create_label")
    error = raised.value
    assert (error.position, error.recorded, error.called) == (1, "reserve", "create_label")
    message = str(error)
    assert "#1" in message
    assert "'reserve'" in message
    assert "'create_label'" in message


def test_non_determinism_is_detected_on_an_unsettled_step_too() -> None:
    steps = fold_steps(run_events(started(3, 0, "charge")))
    with pytest.raises(NonDeterminismError, match=r"#0 .*'charge'.*'refund'"):
        next_action(steps, 0, "refund")


# -- fold_deaths: which worker deaths are a run's own ---------------------------------------


def _history(*kinds: str) -> list[Event]:
    """A history from short words: 'claim', 'takeover' (a claim after the lease expired),
    'alone', 'start' (a step started) and 'done' (a step completed)."""
    events = [Event(1, EventKind.RUN_STARTED, AT)]
    for word in kinds:
        seq = len(events) + 1
        if word in ("claim", "takeover"):
            data: dict[str, object] = {"owner": f"w{seq}", "epoch": seq}
            if word == "takeover":
                data["took_over_from"] = "dead"
            events.append(Event(seq, EventKind.CLAIMED, AT, data=json.dumps(data)))
        elif word == "alone":
            events.append(Event(seq, EventKind.RUNNING_ALONE, AT))
        elif word == "together":  # running alone with 2 other suspects
            data = json.dumps({"reason": "a worker died while running it", "others": 2})
            events.append(Event(seq, EventKind.RUNNING_ALONE, AT, data=data))
        elif word == "start":
            events.append(started(seq, 0, "charge"))
        else:
            events.append(completed(seq, 0, "charge", 1))
    return events


def test_a_death_while_running_with_others_makes_a_suspect_not_a_culprit() -> None:
    deaths = fold_deaths(_history("claim", "start", "takeover", "takeover", "takeover"))
    assert (deaths.count, deaths.last_alone, deaths.suspect) == (3, False, True)
    assert not deaths.poison(limit=1)


def test_a_death_while_running_alone_counts_against_the_run() -> None:
    deaths = fold_deaths(_history("claim", "start", "takeover", "alone", "start", "takeover"))
    assert (deaths.count, deaths.last_alone, deaths.suspect) == (2, True, True)
    assert deaths.poison(limit=1)
    assert not deaths.poison(limit=2)


def test_getting_past_the_point_of_death_alone_clears_the_suspicion() -> None:
    # alone, it completed the step it died in; a later death (with others again) is not its
    deaths = fold_deaths(
        _history("claim", "start", "takeover", "alone", "start", "done", "start", "takeover")
    )
    assert (deaths.count, deaths.last_alone, deaths.suspect) == (2, False, True)
    cleared = fold_deaths(_history("claim", "start", "takeover", "alone", "start", "done"))
    assert not cleared.suspect


def test_a_suspect_handed_back_before_running_alone_stays_a_suspect() -> None:
    deaths = fold_deaths(_history("claim", "takeover", "claim", "claim"))
    assert deaths.suspect
    assert (deaths.count, deaths.last_alone) == (1, False)


def test_a_manual_retry_resets_the_count_but_not_the_suspicion() -> None:
    events = _history("claim", "takeover", "alone", "takeover")
    events.append(Event(len(events) + 1, EventKind.RUN_RETRIED, AT, data="{}"))
    deaths = fold_deaths(events)
    assert (deaths.count, deaths.last_alone, deaths.suspect) == (0, False, True)


def test_a_death_among_suspects_is_no_conviction_but_makes_the_run_strict() -> None:
    deaths = fold_deaths(_history("claim", "start", "takeover", "together", "takeover"))
    assert (deaths.count, deaths.last_alone, deaths.suspect, deaths.strict) == (
        2,
        False,
        True,
        True,
    )
    assert not deaths.poison(limit=1)


def test_a_run_that_died_isolated_stays_strict_until_it_gets_past_that_point() -> None:
    events = _history("claim", "takeover", "together", "takeover", "alone", "takeover", "claim")
    deaths = fold_deaths(events)
    assert (deaths.count, deaths.last_alone, deaths.strict) == (3, True, True)
    cleared = fold_deaths([*events[:-1], *_history("alone", "start", "done")[1:]])
    assert not cleared.suspect
    assert not cleared.strict


# -- pending retries and waits (a run woken early by a message waits again) ---------------

LATER = datetime(2026, 1, 1, 0, 5, tzinfo=UTC)


def attempt_failed(seq: int, position: int, name: str, retry_at: datetime) -> Event:
    data = json.dumps(
        {"error_class": "ConnectionError", "message": "reset", "retry_at": retry_at.isoformat()}
    )
    return Event(seq, EventKind.STEP_ATTEMPT_FAILED, AT, position, name, 1, data)


def waiting(seq: int, position: int, name: str, until: datetime) -> Event:
    data = json.dumps({"waiting": "rate limit", "dependency": "bank", "until": until.isoformat()})
    return Event(seq, EventKind.STEP_WAITING, AT, position, name, None, data)


def test_a_failed_attempt_holds_its_next_attempt_until_its_retry_time() -> None:
    history = run_events(started(3, 0, "charge"), attempt_failed(4, 0, "charge", LATER))

    action = next_action(fold_steps(history), 0, "charge")

    assert action == Execute(0, attempt=2, first_started_at=AT, not_before=LATER)


def test_a_new_attempt_clears_the_pending_retry() -> None:
    history = run_events(
        started(3, 0, "charge"),
        attempt_failed(4, 0, "charge", LATER),
        started(5, 0, "charge", attempt=2),
    )

    action = next_action(fold_steps(history), 0, "charge")

    assert isinstance(action, Execute)
    assert action.not_before is None
    assert action.attempt == 3


def test_a_gate_wait_spends_no_attempt_and_leaves_the_gate_to_say_when() -> None:
    history = run_events(
        started(3, 0, "reserve"), completed(4, 0, "reserve", 1), waiting(5, 1, "charge", LATER)
    )

    steps = fold_steps(history)

    assert [record.name for record in steps] == ["reserve", "charge"]
    # no not_before: a run woken when the gate opens asks it again at once
    assert next_action(steps, 1, "charge") == Execute(1, attempt=1)


def test_a_step_that_failed_for_good_has_no_pending_retry() -> None:
    history = run_events(
        started(3, 0, "charge"),
        attempt_failed(4, 0, "charge", LATER),
        started(5, 0, "charge", attempt=2),
        failed(6, 0, "charge", "ConnectionError", "reset"),
    )

    [record] = fold_steps(history)

    assert record.not_before is None


def test_a_failed_undo_is_tried_again_only_at_its_retry_time() -> None:
    undo = {"error_class": "ConnectionError", "message": "reset", "retry_at": LATER.isoformat()}
    compensating = json.dumps({"error_class": "Boom", "message": "no", "then": "failed"})
    history = run_events(
        started(3, 0, "charge"),
        completed(4, 0, "charge", 1),
        Event(5, EventKind.COMPENSATING, AT, data=compensating),
        Event(6, EventKind.COMPENSATION_STARTED, AT, 0, "charge", 1, '{"key": "k:undo"}'),
        Event(7, EventKind.COMPENSATION_ATTEMPT_FAILED, AT, 0, "charge", 1, json.dumps(undo)),
    )

    assert fold_run(history).compensation_retry_at == {0: LATER}
    again = Event(8, EventKind.COMPENSATION_STARTED, AT, 0, "charge", 2, '{"key": "k:undo"}')
    assert fold_run([*history, again]).compensation_retry_at == {}
    retried = Event(8, EventKind.RUN_RETRIED, AT, data='{"by": "erin", "from_step": null}')
    assert fold_run([*history, retried]).compensation_retry_at == {}


def test_a_received_message_is_no_step_and_no_progress() -> None:
    data = json.dumps(
        {
            "id": 1,
            "kind": "signal",
            "name": "go",
            "data": None,
            "sender": "erin",
            "sent_at": AT.isoformat(),
        }
    )
    history = run_events(Event(3, EventKind.MESSAGE_RECEIVED, AT, data=data))

    assert fold_steps(history) == []
    assert not progressed(history)

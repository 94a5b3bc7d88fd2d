"""The circuit breaker of a dependency, pure: it opens after enough failures within its
window, waits out its cooldown, sends one probe while the others wait in line, and closes or
opens again on the probe's outcome. A throttled attempt is the rate limit's business, not the
breaker's."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from durably.resilience import Enter, GateState, Wait
from durably.resilience.gates import enter, leave

from .gates import BREAKER, HOLD, SLOW_DOWN, at, attempt, open_breaker


def test_the_breaker_opens_after_threshold_failures_within_the_window() -> None:
    state = GateState()
    assert attempt(BREAKER, state, 0, failed=True) == Enter()
    assert attempt(BREAKER, state, 10, failed=True) == Enter()
    assert state.breaker == "closed"
    assert attempt(BREAKER, state, 20, failed=True) == Enter()
    assert state.breaker == "open"

    assert enter(BREAKER, state, holder="other:0", now=at(21), hold=HOLD) == Wait(
        at(50), "breaker open"
    )


def test_failures_spread_wider_than_the_window_do_not_open_it() -> None:
    state = GateState()
    for when in (0, 40, 80, 120, 160):  # never three within 60 s
        assert attempt(BREAKER, state, when, failed=True) == Enter()
    assert state.breaker == "closed"


def test_a_success_resets_the_failure_count() -> None:
    state = GateState()
    attempt(BREAKER, state, 0, failed=True)
    attempt(BREAKER, state, 1, failed=True)
    attempt(BREAKER, state, 2, failed=False)
    attempt(BREAKER, state, 3, failed=True)
    attempt(BREAKER, state, 4, failed=True)
    assert state.breaker == "closed"
    attempt(BREAKER, state, 5, failed=True)
    assert state.breaker == "open"


def test_an_open_breaker_waits_until_the_cooldown_ends() -> None:
    state = open_breaker()
    for when in (2, 15, 31.999):
        answer = enter(BREAKER, state, holder="r:0", now=at(when), hold=HOLD)
        assert answer == Wait(at(32), "breaker open")
    answer = enter(BREAKER, state, holder="r:0", now=at(32), hold=HOLD)
    assert answer == Enter()
    assert state.breaker == "half_open"


def test_while_the_probe_is_out_everyone_else_waits_in_line() -> None:
    state = open_breaker()
    assert enter(BREAKER, state, holder="probe:0", now=at(40), hold=HOLD) == Enter()
    answer = enter(BREAKER, state, holder="other:0", now=at(41), hold=HOLD)
    # due when the probe's hold runs out, woken before if it reports back
    assert answer == Wait(at(50), "breaker open", woken=True)
    assert state.waiting == {"other:0": at(41).timestamp()}


@pytest.mark.parametrize("failed", [False, True], ids=["probe succeeds", "probe fails"])
def test_the_end_of_the_probe_wakes_everyone_in_line(failed: bool) -> None:
    state = open_breaker()
    enter(BREAKER, state, holder="probe:0", now=at(40), hold=HOLD)
    for n, when in enumerate((43, 41, 42)):
        enter(BREAKER, state, holder=f"r{n}:0", now=at(when), hold=HOLD)

    woken = leave(BREAKER, state, holder="probe:0", now=at(44), failed=failed)

    assert woken == ["r1:0", "r2:0", "r0:0"]  # longest waiting first
    assert state.waiting == {}
    if failed:  # open again: the woken look once more, and wait for the cooldown, out of line
        assert enter(BREAKER, state, holder="r1:0", now=at(44), hold=HOLD) == Wait(
            at(74), "breaker open"
        )
    else:
        assert enter(BREAKER, state, holder="r1:0", now=at(44), hold=HOLD) == Enter()
    assert state.waiting == {}


def test_an_attempt_that_ends_while_the_breaker_is_closed_wakes_nobody() -> None:
    state = GateState()
    enter(BREAKER, state, holder="a:0", now=at(0), hold=HOLD)
    assert leave(BREAKER, state, holder="a:0", now=at(1), failed=True) == []


def test_a_successful_probe_closes_the_breaker() -> None:
    state = open_breaker()
    enter(BREAKER, state, holder="probe:0", now=at(40), hold=HOLD)
    leave(BREAKER, state, holder="probe:0", now=at(41), failed=False)
    assert state.breaker == "closed"
    assert attempt(BREAKER, state, 42, failed=False, holder="x:0") == Enter()
    # and it takes the full threshold to open it again
    attempt(BREAKER, state, 43, failed=True)
    attempt(BREAKER, state, 44, failed=True)
    assert state.breaker == "closed"


def test_a_failed_probe_opens_the_breaker_for_another_cooldown() -> None:
    state = open_breaker()
    enter(BREAKER, state, holder="probe:0", now=at(40), hold=HOLD)
    leave(BREAKER, state, holder="probe:0", now=at(41), failed=True)
    assert state.breaker == "open"
    assert enter(BREAKER, state, holder="r:0", now=at(42), hold=HOLD) == Wait(
        at(71), "breaker open"
    )
    assert enter(BREAKER, state, holder="r:0", now=at(71), hold=HOLD) == Enter()


def test_a_probe_that_never_reports_back_is_replaced_after_its_hold() -> None:
    state = open_breaker()
    enter(BREAKER, state, holder="lost:0", now=at(40), hold=HOLD)  # its worker dies
    assert isinstance(enter(BREAKER, state, holder="r:0", now=at(49), hold=HOLD), Wait)
    assert enter(BREAKER, state, holder="r:0", now=at(50), hold=HOLD) == Enter()
    assert state.waiting == {}  # the new probe is out of line
    answer = enter(BREAKER, state, holder="s:0", now=at(51), hold=HOLD)
    assert answer == Wait(at(60), "breaker open", woken=True)


def test_the_gate_state_round_trips_through_its_stored_text() -> None:
    state = open_breaker()
    state.waiting = {"r:0": at(3).timestamp()}
    assert GateState.load(state.dump()) == state
    assert GateState.load(None) == GateState()


def test_a_state_stored_before_gates_kept_a_line_still_loads() -> None:
    stored = dict(json.loads(open_breaker().dump()))
    del stored["waiting"]
    assert GateState.load(json.dumps(stored)) == open_breaker()


def test_throttled_attempts_do_not_count_as_breaker_failures() -> None:
    state = GateState()
    for when in range(5):
        enter(BREAKER, state, holder="r:0", now=at(when), hold=HOLD)
        leave(BREAKER, state, holder="r:0", now=at(when), failed=True, throttled=SLOW_DOWN)
    assert (state.breaker, state.failures) == ("closed", 0)
    # nor do they prove the service healthy: failures around them still add up
    attempt(BREAKER, state, 10, failed=True)
    attempt(BREAKER, state, 11, failed=True)
    enter(BREAKER, state, holder="r:0", now=at(12), hold=HOLD)
    leave(BREAKER, state, holder="r:0", now=at(12), failed=True, throttled=SLOW_DOWN)
    attempt(BREAKER, state, 13, failed=True)
    assert state.breaker == "open"


def test_a_throttled_probe_closes_the_breaker_and_wakes_the_line() -> None:
    state = open_breaker()
    enter(BREAKER, state, holder="probe:0", now=at(40), hold=HOLD)
    enter(BREAKER, state, holder="r:0", now=at(41), hold=HOLD)
    pause = timedelta(seconds=5)
    woken = leave(BREAKER, state, holder="probe:0", now=at(42), failed=True, throttled=pause)
    assert woken == ["r:0"]
    assert state.breaker == "closed"

"""Durable timers, and values that replay unchanged: on both stores, on the fake clock.

A sleeping run is handed back to the store with its wake-up time and holds no worker; the
next worker to look after that time resumes it by replay."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

import pytest

import durably
from durably import RunStatus
from durably.core.history import EventKind
from durably.errors import DurablyError, NonDeterminismError
from durably.testing import FakeClock

from .conftest import kinds


def test_a_sleep_hands_the_run_back_until_its_time_then_goes_on(
    app: durably.App, clock: FakeClock
) -> None:
    calls: list[str] = []

    @app.step
    async def remind(who: str) -> str:
        calls.append(who)
        return f"reminded {who}"

    @app.workflow
    async def reminder(who: str) -> str:
        await durably.sleep("7d")
        return await remind(who)  # type: ignore[no-any-return]

    started_at = clock.now()
    handle = app.start(reminder, "ada", id="r-1")
    assert app.run_until_idle() == 0  # asleep: nothing ended
    run = app.client.get("r-1")
    assert run.status is RunStatus.PENDING
    assert run.lease_owner is None  # holds no worker
    assert run.available_at == started_at + timedelta(days=7)
    assert calls == []

    clock.advance("6d")
    assert app.run_until_idle() == 0  # not yet: nobody even claims it
    assert kinds(app.client.history("r-1")).count("claimed") == 1

    clock.advance("1d")
    assert app.run_until_idle() == 1
    assert handle.result(timeout=0) == "reminded ada"
    assert calls == ["ada"]
    history = app.client.history("r-1")
    assert kinds(history) == [
        "run_started",
        "claimed",
        "timer_set",
        "claimed",
        "timer_fired",
        "step_started",
        "step_completed",
        "run_completed",
    ]
    timer = next(e for e in history if e.kind is EventKind.TIMER_SET)
    assert (timer.position, timer.name) == (0, "durably.sleep")


def test_sleep_until_and_a_time_already_past(app: durably.App, clock: FakeClock) -> None:
    @app.workflow
    async def waits(until: datetime) -> str:
        await durably.sleep_until(until)
        await durably.sleep_until(until - timedelta(hours=1))  # past by then: no wait
        await durably.sleep(0)
        return "done"

    wake = clock.now() + timedelta(hours=3)
    handle = app.start(waits, wake, id="w-1")
    app.run_until_idle()
    assert app.client.get("w-1").available_at == wake
    clock.advance("3h")
    app.run_until_idle()
    assert handle.result(timeout=0) == "done"
    assert kinds(app.client.history("w-1")).count("timer_fired") == 3


def test_a_timer_keeps_its_recorded_time_when_the_code_asks_for_another(
    app: durably.App, other_app: durably.App, clock: FakeClock
) -> None:
    """Replay ends a timer at the time recorded when it was set, whatever the code (now
    deployed with another duration) would compute."""

    @app.workflow(name="nap", version="1")  # the new deploy keeps the version
    async def nap() -> str:
        await durably.sleep("1h")
        return "rested"

    app.start(nap, id="n-1")
    app.run_until_idle()
    set_at = clock.now()

    @other_app.workflow(name="nap", version="1")
    async def longer_nap() -> str:
        await durably.sleep("5h")
        return "rested"

    clock.advance("1h")
    assert other_app.run_until_idle() == 1
    assert other_app.client.get("n-1").updated_at == set_at + timedelta(hours=1)


def test_a_sync_workflow_sleeps_by_blocking_the_same_way(
    app: durably.App, clock: FakeClock
) -> None:
    @app.step
    def stamp() -> str:
        return "stamped"

    @app.workflow
    def slow_stamp() -> str:
        durably.sleep("30m")
        return stamp()  # type: ignore[no-any-return]

    handle = app.start(slow_stamp, id="s-1")
    app.run_until_idle()
    assert app.client.get("s-1").status is RunStatus.PENDING
    clock.advance("30m")
    app.run_until_idle()
    assert handle.result(timeout=0) == "stamped"


def test_a_workflow_deadline_ends_a_sleep_that_would_outlast_it(
    app: durably.App, clock: FakeClock
) -> None:
    undone: list[str] = []

    @app.step
    async def book() -> str:
        return "booked"

    @book.compensation
    async def unbook(result: str) -> None:
        undone.append(result)

    @app.workflow(deadline="2h")
    async def trip() -> str:
        await book()
        await durably.sleep("1d")
        return "went"

    app.start(trip, id="t-1")
    app.run_until_idle()
    assert app.client.get("t-1").available_at == clock.now() + timedelta(hours=2)
    clock.advance("2h")
    app.run_until_idle()
    run = app.client.get("t-1")
    assert run.status is RunStatus.TIMED_OUT
    assert undone == ["booked"]


def test_a_deadline_wakes_a_run_parked_for_a_person_who_never_answers(
    app: durably.App, clock: FakeClock
) -> None:
    undone: list[str] = []

    @app.step
    async def hold_room() -> str:
        return "room 12"

    @hold_room.compensation
    async def release_room(result: str) -> None:
        undone.append(result)

    @app.workflow(deadline="1d")
    async def booking() -> str:
        room = await hold_room()
        answer = await durably.escalate("is the guest a VIP?")
        return f"{room}: {answer}"

    app.start(booking, id="b-1")
    app.run_until_idle()
    assert app.client.get("b-1").status is RunStatus.NEEDS_ATTENTION
    assert [d.run_id for d in app.client.dead_letters()] == ["b-1"]

    clock.advance("23h")
    app.run_until_idle()
    assert app.client.get("b-1").status is RunStatus.NEEDS_ATTENTION  # still the person's
    clock.advance("1h")
    app.run_until_idle()  # nobody answered: the deadline wakes it on its own
    assert app.client.get("b-1").status is RunStatus.TIMED_OUT
    assert undone == ["room 12"]
    with pytest.raises(DurablyError):
        app.client.skip_step("b-1", result="yes")  # too late: the run has ended


def test_now_uuid4_and_random_replay_unchanged(
    app: durably.App, other_app: durably.App, clock: FakeClock
) -> None:
    seen: list[tuple[datetime, uuid.UUID, float]] = []

    def define(target: durably.App) -> None:
        @target.step(name="note")
        async def note(at: str, ident: str, roll: float) -> str:
            return f"{at} {ident} {roll}"

        @target.workflow(name="stamped")
        async def stamped() -> str:
            values = (durably.now(), durably.uuid4(), durably.random())
            seen.append(values)
            await durably.sleep("1m")
            at, ident, roll = values
            return await note(at.isoformat(), str(ident), roll)  # type: ignore[no-any-return]

    define(app)
    define(other_app)
    first_time = clock.now()
    handle = app.start("stamped", id="v-1")
    app.run_until_idle()
    clock.advance("1m")
    other_app.run_until_idle()  # another process replays the values
    assert len(seen) == 2
    assert seen[0] == seen[1]
    at, ident, roll = seen[0]
    assert at == first_time
    assert at.tzinfo is not None
    assert isinstance(ident, uuid.UUID)
    assert ident.version == 4
    assert 0 <= roll < 1
    assert handle.result(timeout=0) == f"{at.isoformat()} {ident} {roll}"
    recorded = [e.name for e in app.client.history("v-1") if e.kind is EventKind.VALUE_RECORDED]
    assert recorded == ["durably.now", "durably.uuid4", "durably.random"]


def test_a_changed_order_of_durable_calls_is_caught(
    app: durably.App, other_app: durably.App, clock: FakeClock
) -> None:
    @app.workflow(name="order", version="1")  # the new deploy keeps the version
    async def first() -> str:
        await durably.sleep("1m")
        return "ok"

    @other_app.workflow(name="order", version="1")
    async def changed() -> str:
        durably.now()  # where the timer was
        await durably.sleep("1m")
        return "ok"

    app.start(first, id="o-1")
    app.run_until_idle()
    clock.advance("1m")
    other_app.run_until_idle()
    run = other_app.client.get("o-1")
    assert run.status is RunStatus.NEEDS_ATTENTION
    assert run.error is not None
    assert run.error.error_class.endswith(NonDeterminismError.__name__)


def test_durable_calls_are_refused_outside_workflow_code(app: durably.App) -> None:
    with pytest.raises(DurablyError, match="outside a workflow"):
        durably.now()
    with pytest.raises(DurablyError, match="time zone"):
        durably.sleep_until(datetime(2026, 1, 1))
    with pytest.raises(DurablyError, match="duration"):
        durably.sleep("soon")

    @app.step
    async def inner() -> str:
        return durably.uuid4().hex

    @app.workflow
    async def uses_it_in_a_step() -> str:
        return await inner()  # type: ignore[no-any-return]

    app.start(uses_it_in_a_step, id="x-1")
    app.run_until_idle()
    run = app.client.get("x-1")
    assert run.status is RunStatus.FAILED
    assert run.error is not None
    assert "inside a step" in run.error.message


def test_a_sleeping_run_is_claimed_by_a_worker_started_after_its_time(
    app: durably.App, other_app: durably.App, clock: FakeClock
) -> None:
    """Every worker was down when the timer came due: the first one up runs it."""

    def define(target: durably.App) -> None:
        @target.workflow(name="later")
        async def later() -> str:
            await durably.sleep("1h")
            return "late but done"

    define(app)
    define(other_app)
    app.start("later", id="l-1")
    app.run_until_idle()
    app.close()  # the only worker is gone
    clock.advance("5h")  # long past the time
    assert other_app.run_until_idle() == 1
    assert other_app.handle("l-1").result(timeout=0) == "late but done"

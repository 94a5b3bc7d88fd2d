"""Pause and resume of a run that waits, on both stores, on the fake clock: a paused run holds
its timer until it is resumed, then sleeps on until its own time if that has not come; a
resume before any worker took the pause in withdraws it; commands with nothing to do say so,
and a run parked for a person cannot be paused."""

from __future__ import annotations

from datetime import timedelta

import pytest

import durably
from durably import Retry, RunStatus
from durably.core.event_data import read_payload
from durably.core.history import EventKind
from durably.core.payloads import Command
from durably.errors import DurablyError, RunNotFound
from durably.testing import FakeClock

from .conftest import events, kinds


def test_a_paused_run_holds_its_timer_until_it_is_resumed(
    app: durably.App,
    clock: FakeClock,
    order: durably.Workflow,
    undone: list[str],
    calls: list[str],
) -> None:
    handle = app.start("order", "lamp", "sleep", id="z-1")
    app.run_until_idle()  # reserved, asleep for a day

    steered = app.client.pause("z-1", reason="inventory check", by="ops")
    assert (steered.action, steered.changed, steered.status) == ("pause", True, RunStatus.PENDING)
    assert "a worker marks it paused now" in steered.note
    assert app.client.get("z-1").available_at == clock.now()
    assert app.run_until_idle() == 0
    run = app.client.get("z-1")
    assert run.status is RunStatus.PAUSED
    assert run.lease_owner is None
    [paused] = events(app, "z-1", EventKind.RUN_PAUSED)
    assert read_payload(paused, Command) == Command("ops", "inventory check")
    assert [r.id for r in app.client.runs(status=RunStatus.PAUSED).runs] == ["z-1"]

    again = app.client.pause("z-1", by="erin")
    assert (again.changed, again.status, again.note) == (
        False,
        RunStatus.PAUSED,
        "it is paused already",
    )

    clock.advance(timedelta(days=2))  # its timer comes due while it is paused
    assert app.run_until_idle() == 0
    assert app.client.get("z-1").status is RunStatus.PAUSED
    assert "timer_fired" not in kinds(app.client.history("z-1"))
    assert calls == ["reserve lamp"]

    resumed = app.client.resume("z-1", by="ops")
    assert (resumed.action, resumed.changed, resumed.status) == ("resume", True, RunStatus.PAUSED)
    run = app.client.get("z-1")
    assert (run.status, run.available_at) == (RunStatus.PENDING, clock.now())
    assert app.client.runs(status=RunStatus.PAUSED).runs == []
    assert app.run_until_idle() == 1
    assert handle.result(timeout=0) == "shipped lamp"
    assert calls == ["reserve lamp", "ship lamp"]  # nothing ran twice
    assert undone == []
    history = kinds(app.client.history("z-1"))
    assert history.index("run_paused") < history.index("timer_fired")


def test_a_run_resumed_before_its_timer_is_due_sleeps_on_until_then(
    app: durably.App, clock: FakeClock, order: durably.Workflow, calls: list[str]
) -> None:
    handle = app.start("order", "lamp", "sleep", id="q-1")
    app.run_until_idle()
    due = clock.now() + timedelta(days=1)
    app.client.pause("q-1", by="ops")
    app.run_until_idle()
    assert app.client.get("q-1").status is RunStatus.PAUSED

    clock.advance(timedelta(hours=1))
    assert app.client.resume("q-1", by="ops").changed
    assert app.run_until_idle() == 0  # taken up, and asleep again: its timer is not due
    run = app.client.get("q-1")
    assert (run.status, run.available_at) == (RunStatus.PENDING, due)
    assert calls == ["reserve lamp"]
    clock.advance(timedelta(days=1))
    assert app.run_until_idle() == 1
    assert handle.result(timeout=0) == "shipped lamp"


def test_pause_and_resume_say_when_there_is_nothing_to_do(
    app: durably.App, clock: FakeClock, order: durably.Workflow
) -> None:
    app.start("order", "lamp", "sleep", id="n-1")
    app.run_until_idle()
    due = clock.now() + timedelta(days=1)

    nothing = app.client.resume("n-1", by="ops")
    assert (nothing.action, nothing.changed, nothing.status) == ("resume", False, RunStatus.PENDING)
    assert nothing.note == "it is not paused (it is pending)"

    # A resume before any worker took the pause up withdraws it: the run is never paused.
    assert app.client.pause("n-1", by="ops").changed
    withdrawn = app.client.resume("n-1", by="ops")
    assert withdrawn.changed
    assert "withdrawn" in withdrawn.note
    app.run_until_idle()
    run = app.client.get("n-1")
    assert run.status is RunStatus.PENDING
    assert run.available_at == due  # asleep again until its own time
    assert events(app, "n-1", EventKind.RUN_PAUSED) == []

    clock.advance(timedelta(days=1))
    assert app.run_until_idle() == 1
    assert app.client.get("n-1").status is RunStatus.COMPLETED
    with pytest.raises(DurablyError, match=r"cannot pause run 'n-1': it has finished"):
        app.client.pause("n-1", by="ops")
    with pytest.raises(DurablyError, match=r"cannot resume run 'n-1': it has finished"):
        app.client.resume("n-1", by="ops")
    with pytest.raises(RunNotFound):
        app.client.pause("nobody", by="ops")
    with pytest.raises(RunNotFound):
        app.client.resume("nobody", by="ops")


def test_a_pause_of_a_parked_run_is_refused(app: durably.App) -> None:
    @app.step(retry=Retry(attempts=1))
    async def charge(item: str) -> str:
        raise ConnectionError("payment service down")

    @app.workflow
    async def order(item: str) -> str:
        return await charge(item)  # type: ignore[no-any-return]

    app.start("order", "lamp", id="k-1")
    app.run_until_idle()
    assert app.client.get("k-1").status is RunStatus.NEEDS_ATTENTION
    with pytest.raises(DurablyError, match=r"it is needs_attention.*durably dlq"):
        app.client.pause("k-1", by="ops")
    assert app.client.get("k-1").status is RunStatus.NEEDS_ATTENTION
    assert app.client.resume("k-1", by="ops").changed is False

"""A pause that reaches a run while a step (or an undo, or a branch of a gather) is in flight,
on both stores: the one in flight finishes and is recorded, nothing after it starts, and the
run holds `paused` until a resume; a resume of a pause the run took in but has not stopped for
yet withdraws it."""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta

import pytest

import durably
from durably import Retry, RunStatus
from durably.core.event_data import read_payload
from durably.core.history import EventKind
from durably.core.payloads import Command
from durably.errors import WorkflowFailed
from durably.testing import FakeClock

from .conftest import events, kinds
from .steering import (
    WAIT,
    Held,
    join,
    step_started,
    undo_events,
    wait_until,
    worker_thread,
)


def test_a_pause_lets_the_step_in_flight_finish_and_stops_before_the_next(
    app: durably.App, held: Held, calls: list[str]
) -> None:
    @app.step
    def slow(item: str) -> str:
        held.hold()
        calls.append(f"slow {item}")
        return f"slow {item}"

    @app.step
    async def after(item: str) -> str:
        calls.append(f"after {item}")
        return f"after {item}"

    @app.workflow
    async def two(item: str) -> str:
        await slow(item)
        return await after(item)  # type: ignore[no-any-return]

    handle = app.start("two", "x", id="f-1")
    worker = worker_thread(app)
    assert held.entered.wait(WAIT)
    steered = app.client.pause("f-1", by="ops", reason="look first")
    assert (steered.changed, steered.status) == (True, RunStatus.RUNNING)
    assert "stops before its next step" in steered.note
    held.go_once_taken_in("pause")
    join(worker)

    run = app.client.get("f-1")
    assert run.status is RunStatus.PAUSED
    assert calls == ["slow x"]  # the step in flight finished; the next did not start
    [completed] = events(app, "f-1", EventKind.STEP_COMPLETED)
    assert (completed.name, completed.data) == ("slow", '"slow x"')
    assert not step_started(app, "f-1", "after")
    [paused] = events(app, "f-1", EventKind.RUN_PAUSED)
    assert read_payload(paused, Command) == Command("ops", "look first")
    assert [r.id for r in app.client.runs(status=RunStatus.PAUSED).runs] == ["f-1"]

    assert app.client.resume("f-1", by="ops").changed
    assert app.run_until_idle() == 1
    assert handle.result(timeout=0) == "after x"
    assert calls == ["slow x", "after x"]  # slow is replayed, not run again


def test_a_pause_while_undoing_lets_the_undo_in_flight_finish_and_stops_before_the_next(
    app: durably.App, held: Held, reserve: durably.Step, undone: list[str]
) -> None:
    @app.step
    async def charge(item: str) -> str:
        return f"charge-{item}"

    @charge.compensation
    def refund(item: str, charged: str) -> None:
        held.hold()
        undone.append(charged)

    @app.step
    async def pack(item: str) -> str:
        raise durably.Terminal("no box fits")

    @app.workflow
    async def order(item: str) -> str:
        await reserve(item)
        await charge(item)
        return await pack(item)  # type: ignore[no-any-return]

    handle = app.start("order", "lamp", id="v-1")
    worker = worker_thread(app)
    assert held.entered.wait(WAIT)
    assert app.client.pause("v-1", by="ops").changed
    held.go_once_taken_in("pause")
    join(worker)

    assert app.client.get("v-1").status is RunStatus.PAUSED
    assert undone == ["charge-lamp"]  # the undo in flight finished; the next did not start
    assert undo_events(app, "v-1") == [
        ("compensation_started", 1, "charge"),
        ("compensation_completed", 1, "charge"),
    ]

    assert app.client.resume("v-1", by="ops").changed
    app.run_until_idle()
    assert undone == ["charge-lamp", "hold-lamp"]
    with pytest.raises(WorkflowFailed, match=r"failed: durably\.errors\.StepFailed"):
        handle.result(timeout=0)


def test_a_pause_during_a_gather_lets_the_branch_in_flight_finish_and_starts_no_other(
    app: durably.App, held: Held, calls: list[str]
) -> None:
    @app.step
    def fetch(part: str) -> str:
        if part == "a":
            held.hold()
        calls.append(part)
        return part.upper()

    @app.workflow
    async def assemble() -> list[str]:
        parts: list[str] = await durably.gather(fetch("a"), fetch("b"), fetch("c"), limit=1)
        return parts

    handle = app.start("assemble", id="gp-1")
    worker = worker_thread(app)
    assert held.entered.wait(WAIT)
    assert app.client.pause("gp-1", by="ops").changed
    held.go_once_taken_in("pause")
    join(worker)

    assert app.client.get("gp-1").status is RunStatus.PAUSED
    assert calls == ["a"]
    assert events(app, "gp-1", EventKind.STEP_FAILED) == []  # a pause fails no branch
    assert app.client.resume("gp-1", by="ops").changed
    app.run_until_idle()
    assert handle.result(timeout=0) == ["A", "B", "C"]
    assert calls == ["a", "b", "c"]


# -- found while writing these tests (engine bugs, fixed) -------------------------------------


def test_a_resume_withdraws_a_pause_the_run_took_in_but_has_not_stopped_for(
    app: durably.App,
) -> None:
    exporting = threading.Event()
    go = threading.Event()

    @app.step(heartbeat_timeout="1s")
    async def export(rows: int) -> int:
        exporting.set()
        done = 0
        while not go.is_set():
            durably.heartbeat({"done": done})  # its beats are checkpointed as it goes
            done += 1
            await asyncio.sleep(0.05)  # a long step beats in real time: the point here
        return rows

    @app.step
    async def publish(rows: int) -> str:
        return f"published {rows}"

    @app.workflow
    async def nightly(rows: int) -> str:
        await export(rows)
        return await publish(rows)  # type: ignore[no-any-return]

    handle = app.start("nightly", 10, id="hb-1")
    worker = worker_thread(app)
    try:
        assert exporting.wait(WAIT)
        assert app.client.pause("hb-1", by="ops").changed

        def pause_committed() -> bool:
            received = events(app, "hb-1", EventKind.MESSAGE_RECEIVED)
            return any('"pause"' in (event.data or "") for event in received)

        wait_until("a heartbeat's checkpoint took the pause in", pause_committed)
        assert app.client.get("hb-1").status is RunStatus.RUNNING
        resumed = app.client.resume("hb-1", by="ops")
    finally:
        go.set()
        join(worker)
    assert resumed.changed, resumed.note
    assert app.client.get("hb-1").status is RunStatus.COMPLETED
    assert handle.result(timeout=0) == "published 10"


def test_a_pause_taken_in_while_the_step_fails_for_a_retry_pauses_the_run_at_once(
    app: durably.App, clock: FakeClock, held: Held
) -> None:
    tries: list[int] = []

    @app.step(retry=Retry(attempts=3, initial="1h", max_delay="1h", jitter="none"))
    def charge(item: str) -> str:
        tries.append(1)
        if len(tries) == 1:
            held.hold()  # until the worker has the pause
            raise ConnectionError("payment service down")
        return f"charged {item}"

    @app.workflow
    async def order(item: str) -> str:
        return await charge(item)  # type: ignore[no-any-return]

    handle = app.start("order", "lamp", id="rp-1")
    worker = worker_thread(app)
    assert held.entered.wait(WAIT)
    assert app.client.pause("rp-1", by="ops").changed
    held.go_once_taken_in("pause")
    join(worker)
    [execution] = held.executions
    assert execution.control.pause is not None  # the worker did take it in
    assert "attempt_failed" in kinds(app.client.history("rp-1"))

    assert app.client.get("rp-1").status is RunStatus.PAUSED
    assert [run.id for run in app.client.runs(status=RunStatus.PAUSED).runs] == ["rp-1"]
    assert app.client.resume("rp-1", by="ops").changed
    clock.advance(timedelta(hours=1))
    app.run_until_idle()
    assert handle.result(timeout=0) == "charged lamp"

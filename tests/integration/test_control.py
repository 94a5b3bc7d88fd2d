"""A person steers a run: app.cancel, app.pause and app.resume, on both stores, on the fake
clock. A cancel reaches the run wherever it is: an async step in flight (in a worker thread of
this process) is cancelled, a sync one may look at durably.cancelled() and stop early, and a
sleeping, signal-waiting, dead-lettered, approval-waiting or paused run is taken up and
undone; in each case its completed steps are compensated once, in reverse order, and it ends
`cancelled`. A pause stops a run before its next step (the one in flight finishes and is
recorded) and holds it, timers and all, until a resume. Commands that have nothing to do say
so; those that cannot apply are refused."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

import durably
from durably import Retry, RunStatus, Steered
from durably.core.event_data import read_payload
from durably.core.history import ErrorInfo, Event, EventKind
from durably.core.payloads import Command, Compensating, CompensationStarted, StepFailed
from durably.errors import DurablyError, NotInWorkflow, RunNotFound, WorkflowFailed
from durably.runtime.execution import RunExecution
from durably.testing import FakeClock
from durably.workflow.context import current_execution

from .conftest import DEAD_LEASE, dead_worker, kinds

WAIT = 20.0  # seconds: generous, for a loaded machine; nothing here is timed


def wait_until(what: str, done: Callable[[], bool], timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if done():
            return
        time.sleep(0.02)
    pytest.fail(f"{what} did not happen within {timeout}s")


def worker_thread(app: durably.App) -> threading.Thread:
    """`app.run_until_idle()` in a thread of its own: the test thread steers meanwhile."""
    thread = threading.Thread(target=app.run_until_idle, name="test-worker", daemon=True)
    thread.start()
    return thread


def join(thread: threading.Thread) -> None:
    thread.join(WAIT)
    assert not thread.is_alive(), "the worker did not become idle"


def events(app: durably.App, run_id: str, kind: EventKind) -> list[Event]:
    return [event for event in app.history(run_id) if event.kind is kind]


def step_started(app: durably.App, run_id: str, name: str) -> bool:
    return any(event.name == name for event in events(app, run_id, EventKind.STEP_STARTED))


def assert_cancelled(app: durably.App, run_id: str, by: str, reason: str | None) -> None:
    """The run ended cancelled, compensated, with the error that names who and why."""
    run = app.get_run(run_id)
    assert run.status is RunStatus.CANCELLED
    why = f": {reason}" if reason else ""
    assert run.error == ErrorInfo("durably.errors.RunCancelled", f"cancelled by {by}{why}")
    history = app.history(run_id)
    assert history[-1].kind is EventKind.RUN_CANCELLED
    [compensating] = [e for e in history if e.kind is EventKind.COMPENSATING]
    payload = read_payload(compensating, Compensating)
    assert payload.then is RunStatus.CANCELLED
    assert payload.error == run.error
    assert kinds(history).count("run_cancelled") == 1


def undo_events(app: durably.App, run_id: str) -> list[tuple[str, int | None, str | None]]:
    """(kind, position, name) of every compensation event, in order."""
    undoing = {EventKind.COMPENSATION_STARTED, EventKind.COMPENSATION_COMPLETED}
    return [(str(e.kind), e.position, e.name) for e in app.history(run_id) if e.kind in undoing]


def order_app(app: durably.App, undone: list[str], calls: list[str]) -> None:
    """A workflow `order` that reserves (undone by release), then waits as `wait` says
    ("sleep", "signal"), then ships."""

    @app.step
    async def reserve(item: str) -> str:
        calls.append(f"reserve {item}")
        return f"hold-{item}"

    @reserve.compensation
    async def release(item: str, hold: str) -> None:
        undone.append(hold)

    @app.step
    async def ship(item: str) -> str:
        calls.append(f"ship {item}")
        return f"shipped {item}"

    @app.workflow
    async def order(item: str, wait: str) -> str:
        await reserve(item)
        if wait == "sleep":
            await durably.sleep("1d")
        elif wait == "signal":
            await durably.wait_for_signal("go")
        return await ship(item)  # type: ignore[no-any-return]


# -- cancel -----------------------------------------------------------------------------------


def test_a_cancel_stops_the_async_step_in_flight_and_undoes_the_completed_ones(
    app: durably.App,
) -> None:
    undone: list[str] = []
    seen: list[str] = []

    @app.step
    async def reserve(item: str) -> str:
        return f"hold-{item}"

    @reserve.compensation
    async def release(item: str, hold: str) -> None:
        undone.append(hold)

    @app.step
    async def charge(item: str) -> str:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            seen.append("cancelled")  # the cancel lands inside the step
            raise
        return "charged"

    @charge.compensation
    async def refund(item: str, charged: str | None) -> None:
        undone.append(f"refund {charged}")  # cut off in flight: it may have charged

    @app.step
    async def ship(item: str) -> str:
        return "shipped"

    @app.workflow
    async def order(item: str) -> str:
        await reserve(item)
        await charge(item)
        return await ship(item)  # type: ignore[no-any-return]

    handle = app.start("order", "lamp", id="c-1")
    worker = worker_thread(app)
    wait_until("charge started", lambda: step_started(app, "c-1", "charge"))
    steered = app.cancel("c-1", reason="customer left", by="ops")
    assert isinstance(steered, Steered)
    assert (steered.run_id, steered.action, steered.changed) == ("c-1", "cancel", True)
    assert steered.status is RunStatus.RUNNING
    assert "async step in flight is cancelled" in steered.note
    join(worker)

    assert seen == ["cancelled"]
    # charge was cut off in flight, so it may have taken effect: its undo runs too (first,
    # with no result); then reserve's, once, with its recorded result
    assert undone == ["refund None", "hold-lamp"]
    assert_cancelled(app, "c-1", "ops", "customer left")
    [failed] = events(app, "c-1", EventKind.STEP_FAILED)
    assert (failed.position, failed.name) == (1, "charge")
    payload = read_payload(failed, StepFailed)
    assert (payload.reason, payload.unknown) == ("cancelled", True)
    assert payload.error.error_class == "durably.errors.RunCancelled"
    assert undo_events(app, "c-1") == [
        ("compensation_started", 1, "charge"),
        ("compensation_completed", 1, "charge"),
        ("compensation_started", 0, "reserve"),
        ("compensation_completed", 0, "reserve"),
    ]
    undos = events(app, "c-1", EventKind.COMPENSATION_STARTED)
    assert [read_payload(undo, CompensationStarted).key for undo in undos] == [
        "c-1:1:charge:undo",
        "c-1:0:reserve:undo",
    ]
    assert not step_started(app, "c-1", "ship")
    history = kinds(app.history("c-1"))
    assert history.index("step_failed") < history.index("compensating") < len(history) - 1
    with pytest.raises(WorkflowFailed, match=r"cancelled.*RunCancelled: cancelled by ops"):
        handle.result(timeout=0)


def test_a_sync_step_that_looks_at_cancelled_stops_early_and_is_undone_too(
    app: durably.App,
) -> None:
    undone: list[Any] = []
    entered = threading.Event()

    @app.step
    async def reserve(item: str) -> str:
        return f"hold-{item}"

    @reserve.compensation
    async def release(item: str, hold: str) -> None:
        undone.append(hold)

    @app.step
    def export(rows: int) -> int:
        """Exports `rows` rows, one at a time; stops early if the run is cancelled."""
        assert not durably.cancelled()
        entered.set()
        done = 0
        deadline = time.monotonic() + WAIT
        while done < rows and time.monotonic() < deadline:
            if durably.cancelled():
                break
            time.sleep(0.01)
            done += 1
        return done

    @export.compensation
    def delete_export(rows: int, done: int) -> None:
        undone.append(("delete", done))

    @app.step
    async def publish(item: str) -> str:
        return "published"

    @app.workflow
    async def nightly(item: str) -> str:
        await reserve(item)
        await export(1_000_000)
        return await publish(item)  # type: ignore[no-any-return]

    app.start("nightly", "report", id="s-1")
    worker = worker_thread(app)
    assert entered.wait(WAIT)
    steered = app.cancel("s-1", by="ops")
    assert steered.changed
    join(worker)

    assert_cancelled(app, "s-1", "ops", None)
    [completed] = [e for e in events(app, "s-1", EventKind.STEP_COMPLETED) if e.name == "export"]
    done = int(completed.data or "0")
    assert 0 < done < 1_000_000  # it stopped early, and its result was recorded
    assert events(app, "s-1", EventKind.STEP_FAILED) == []  # it was not interrupted
    # it completed, so it is undone too, first (reverse order), with its recorded result
    assert undone == [("delete", done), "hold-report"]
    assert undo_events(app, "s-1") == [
        ("compensation_started", 1, "export"),
        ("compensation_completed", 1, "export"),
        ("compensation_started", 0, "reserve"),
        ("compensation_completed", 0, "reserve"),
    ]
    assert not step_started(app, "s-1", "publish")


def test_cancelled_outside_a_run_is_refused() -> None:
    with pytest.raises(NotInWorkflow, match="outside a run"):
        durably.cancelled()


@pytest.mark.parametrize("wait", ["sleep", "signal"])
def test_a_cancel_takes_up_a_waiting_run_now_and_undoes_it(
    app: durably.App, clock: FakeClock, wait: str
) -> None:
    undone: list[str] = []
    calls: list[str] = []
    order_app(app, undone, calls)
    app.start("order", "lamp", wait, id="w-1")
    assert app.run_until_idle() == 0
    run = app.get_run("w-1")
    assert run.status is RunStatus.PENDING
    assert run.available_at == (clock.now() + timedelta(days=1) if wait == "sleep" else None)

    steered = app.cancel("w-1", reason="out of stock", by="ops")
    assert (steered.changed, steered.status) == (True, RunStatus.PENDING)
    assert "takes it up now" in steered.note
    assert app.get_run("w-1").available_at == clock.now()  # due now, not in a day
    assert app.run_until_idle() == 1  # no clock advance needed

    assert_cancelled(app, "w-1", "ops", "out of stock")
    assert undone == ["hold-lamp"]
    assert calls == ["reserve lamp"]  # ship never ran
    history = kinds(app.history("w-1"))
    assert "timer_fired" not in history
    assert "signal_received" not in history
    assert "message_received" in history  # the cancel, with who sent it

    clock.advance(timedelta(days=2))  # its old timer comes due: nothing more happens
    assert app.run_until_idle() == 0
    assert undone == ["hold-lamp"]


def test_a_cancel_hands_a_dead_lettered_run_back_to_be_undone(app: durably.App) -> None:
    undone: list[str] = []
    tries: list[int] = []

    @app.step
    async def reserve(item: str) -> str:
        return f"hold-{item}"

    @reserve.compensation
    async def release(item: str, hold: str) -> None:
        undone.append(hold)

    @app.step(retry=Retry(attempts=1))
    async def charge(item: str) -> str:
        tries.append(1)
        raise ConnectionError("payment service down")

    @app.workflow
    async def order(item: str) -> str:
        await reserve(item)
        return await charge(item)  # type: ignore[no-any-return]

    app.start("order", "lamp", id="d-1")
    app.run_until_idle()
    assert app.get_run("d-1").status is RunStatus.NEEDS_ATTENTION
    assert [letter.run_id for letter in app.dead_letters()] == ["d-1"]

    steered = app.cancel("d-1", reason="given up", by="ops")
    assert (steered.changed, steered.status) == (True, RunStatus.NEEDS_ATTENTION)
    run = app.get_run("d-1")
    assert run.status is RunStatus.PENDING  # handed back to the workers by the cancel
    assert run.lease_owner is None
    assert app.run_until_idle() == 1

    assert_cancelled(app, "d-1", "ops", "given up")
    assert undone == ["hold-lamp"]
    assert tries == [1]  # the failed step was not tried again
    assert app.dead_letters() == []
    assert "released" in kinds(app.history("d-1"))


def test_a_cancel_ends_a_run_waiting_for_an_approval(app: durably.App) -> None:
    undone: list[str] = []
    asked: list[str] = []

    @app.step
    async def reserve(item: str) -> str:
        return f"hold-{item}"

    @reserve.compensation
    async def release(item: str, hold: str) -> None:
        undone.append(hold)

    @app.step
    async def ask(request: durably.ApprovalRequest) -> None:
        asked.append(request.name)

    @app.step
    async def refund(item: str) -> str:
        return "refunded"

    @app.workflow
    async def refund_flow(item: str) -> str:
        await reserve(item)
        decision = await durably.approval("refund", notify=ask, timeout="2d")
        return await refund(item) if decision.approved else "refused"

    app.start("refund_flow", "lamp", id="a-1")
    app.run_until_idle()
    assert app.get_run("a-1").status is RunStatus.NEEDS_ATTENTION
    assert [pending.run_id for pending in app.approvals()] == ["a-1"]

    steered = app.cancel("a-1", by="ops")
    assert (steered.changed, steered.status) == (True, RunStatus.NEEDS_ATTENTION)
    assert app.get_run("a-1").status is RunStatus.PENDING
    assert app.run_until_idle() == 1

    assert_cancelled(app, "a-1", "ops", None)
    assert undone == ["hold-lamp"]
    assert asked == ["refund"]
    assert app.approvals() == []
    with pytest.raises(DurablyError):  # nobody can decide it any more
        app.approve("a-1", "refund", by="maria")
    assert not step_started(app, "a-1", "refund")


def test_a_cancel_hands_a_paused_run_back_and_undoes_it(app: durably.App, clock: FakeClock) -> None:
    undone: list[str] = []
    calls: list[str] = []
    order_app(app, undone, calls)
    app.start("order", "lamp", "sleep", id="p-1")
    app.run_until_idle()
    app.pause("p-1", by="ops")
    app.run_until_idle()
    assert app.get_run("p-1").status is RunStatus.PAUSED

    steered = app.cancel("p-1", reason="changed my mind", by="erin")
    assert (steered.changed, steered.status) == (True, RunStatus.PAUSED)
    run = app.get_run("p-1")
    assert (run.status, run.available_at) == (RunStatus.PENDING, clock.now())
    assert app.run_until_idle() == 1
    assert_cancelled(app, "p-1", "erin", "changed my mind")
    assert undone == ["hold-lamp"]
    assert calls == ["reserve lamp"]
    history = kinds(app.history("p-1"))
    assert history.index("run_paused") < history.index("released") < history.index("compensating")


def test_a_second_cancel_changes_nothing_and_ended_or_unknown_runs_are_refused(
    app: durably.App,
) -> None:
    undone: list[str] = []
    calls: list[str] = []
    order_app(app, undone, calls)
    app.start("order", "lamp", "sleep", id="t-1")
    app.run_until_idle()

    assert app.cancel("t-1", by="ops").changed
    again = app.cancel("t-1", by="erin", reason="me too")
    assert (again.changed, again.status) == (False, RunStatus.PENDING)
    assert again.note.startswith("it is being cancelled already")  # still in its inbox
    app.run_until_idle()
    assert_cancelled(app, "t-1", "ops", None)  # the first cancel's words, not the second's
    assert undone == ["hold-lamp"]  # undone once

    done = app.cancel("t-1", by="ops")
    assert (done.changed, done.status, done.note) == (
        False,
        RunStatus.CANCELLED,
        "it is cancelled already",
    )

    app.start("order", "vase", "none", id="t-2")
    app.run_until_idle()
    assert app.get_run("t-2").status is RunStatus.COMPLETED
    with pytest.raises(DurablyError, match=r"cannot cancel run 't-2': it has finished \(completed"):
        app.cancel("t-2", by="ops")
    with pytest.raises(RunNotFound, match="nobody"):
        app.cancel("nobody", by="ops")
    with pytest.raises(DurablyError, match="the engine's own"):
        app.send("t-1", "cancel", by="ops")  # not by hand, past the checks


def test_a_cancel_is_refused_once_undoing_failed_for_good(app: durably.App) -> None:
    @app.step(retry=Retry(attempts=1))
    async def reserve(item: str) -> str:
        return f"hold-{item}"

    @reserve.compensation
    async def release(item: str, hold: str) -> None:
        raise ConnectionError("stock service gone")

    @app.step
    async def pack(item: str) -> str:
        raise durably.Terminal("no box fits")

    @app.workflow
    async def order(item: str) -> str:
        await reserve(item)
        return await pack(item)  # type: ignore[no-any-return]

    app.start("order", "lamp", id="f-1")
    app.run_until_idle()
    assert app.get_run("f-1").status is RunStatus.COMPENSATION_FAILED
    with pytest.raises(DurablyError, match=r"durably dlq retry.*durably dlq fail"):
        app.cancel("f-1", by="ops")
    assert app.get_run("f-1").status is RunStatus.COMPENSATION_FAILED
    with pytest.raises(DurablyError, match="compensation_failed"):
        app.pause("f-1", by="ops")  # parked: nothing to pause either


# -- pause and resume -------------------------------------------------------------------------


def test_a_paused_run_holds_its_timer_until_it_is_resumed(
    app: durably.App, clock: FakeClock
) -> None:
    undone: list[str] = []
    calls: list[str] = []
    order_app(app, undone, calls)
    handle = app.start("order", "lamp", "sleep", id="z-1")
    app.run_until_idle()  # reserved, asleep for a day

    steered = app.pause("z-1", reason="inventory check", by="ops")
    assert (steered.action, steered.changed, steered.status) == ("pause", True, RunStatus.PENDING)
    assert "a worker marks it paused now" in steered.note
    assert app.get_run("z-1").available_at == clock.now()
    assert app.run_until_idle() == 0
    run = app.get_run("z-1")
    assert run.status is RunStatus.PAUSED
    assert run.lease_owner is None
    [paused] = events(app, "z-1", EventKind.RUN_PAUSED)
    assert read_payload(paused, Command) == Command("ops", "inventory check")
    assert [r.id for r in app.runs(status=RunStatus.PAUSED)] == ["z-1"]

    again = app.pause("z-1", by="erin")
    assert (again.changed, again.status, again.note) == (
        False,
        RunStatus.PAUSED,
        "it is paused already",
    )

    clock.advance(timedelta(days=2))  # its timer comes due while it is paused
    assert app.run_until_idle() == 0
    assert app.get_run("z-1").status is RunStatus.PAUSED
    assert "timer_fired" not in kinds(app.history("z-1"))
    assert calls == ["reserve lamp"]

    resumed = app.resume("z-1", by="ops")
    assert (resumed.action, resumed.changed, resumed.status) == ("resume", True, RunStatus.PAUSED)
    run = app.get_run("z-1")
    assert (run.status, run.available_at) == (RunStatus.PENDING, clock.now())
    assert app.runs(status=RunStatus.PAUSED) == []
    assert app.run_until_idle() == 1
    assert handle.result(timeout=0) == "shipped lamp"
    assert calls == ["reserve lamp", "ship lamp"]  # nothing ran twice
    assert undone == []
    history = kinds(app.history("z-1"))
    assert history.index("run_paused") < history.index("timer_fired")


def test_a_pause_lets_the_step_in_flight_finish_and_stops_before_the_next(
    app: durably.App,
) -> None:
    calls: list[str] = []
    executions: list[RunExecution] = []
    entered = threading.Event()
    release = threading.Event()

    @app.step
    def slow(item: str) -> str:
        execution = current_execution()
        assert isinstance(execution, RunExecution)
        executions.append(execution)
        entered.set()
        assert release.wait(WAIT)
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
    assert entered.wait(WAIT)
    steered = app.pause("f-1", by="ops", reason="look first")
    assert (steered.changed, steered.status) == (True, RunStatus.RUNNING)
    assert "stops before its next step" in steered.note
    # The worker reads its runs' inboxes every second: hold the step until this run's
    # execution has folded the pause in, or the step could end (and the next start) before
    # the pause reaches it. Nothing about it is in the store before the next checkpoint.
    [execution] = executions
    wait_until("the worker folded the pause", lambda: execution.control.pause is not None)
    release.set()
    join(worker)

    run = app.get_run("f-1")
    assert run.status is RunStatus.PAUSED
    assert calls == ["slow x"]  # the step in flight finished; the next did not start
    [completed] = events(app, "f-1", EventKind.STEP_COMPLETED)
    assert (completed.name, completed.data) == ("slow", '"slow x"')
    assert not step_started(app, "f-1", "after")
    [paused] = events(app, "f-1", EventKind.RUN_PAUSED)
    assert read_payload(paused, Command) == Command("ops", "look first")
    assert [r.id for r in app.runs(status=RunStatus.PAUSED)] == ["f-1"]

    assert app.resume("f-1", by="ops").changed
    assert app.run_until_idle() == 1
    assert handle.result(timeout=0) == "after x"
    assert calls == ["slow x", "after x"]  # slow is replayed, not run again


def test_pause_and_resume_say_when_there_is_nothing_to_do(
    app: durably.App, clock: FakeClock
) -> None:
    undone: list[str] = []
    calls: list[str] = []
    order_app(app, undone, calls)
    app.start("order", "lamp", "sleep", id="n-1")
    app.run_until_idle()
    due = clock.now() + timedelta(days=1)

    nothing = app.resume("n-1", by="ops")
    assert (nothing.action, nothing.changed, nothing.status) == ("resume", False, RunStatus.PENDING)
    assert nothing.note == "it is not paused (it is pending)"

    # A resume before any worker took the pause up withdraws it: the run is never paused.
    assert app.pause("n-1", by="ops").changed
    withdrawn = app.resume("n-1", by="ops")
    assert withdrawn.changed
    assert "withdrawn" in withdrawn.note
    app.run_until_idle()
    run = app.get_run("n-1")
    assert run.status is RunStatus.PENDING
    assert run.available_at == due  # asleep again until its own time
    assert events(app, "n-1", EventKind.RUN_PAUSED) == []

    clock.advance(timedelta(days=1))
    assert app.run_until_idle() == 1
    assert app.get_run("n-1").status is RunStatus.COMPLETED
    with pytest.raises(DurablyError, match=r"cannot pause run 'n-1': it has finished"):
        app.pause("n-1", by="ops")
    with pytest.raises(DurablyError, match=r"cannot resume run 'n-1': it has finished"):
        app.resume("n-1", by="ops")
    with pytest.raises(RunNotFound):
        app.pause("nobody", by="ops")
    with pytest.raises(RunNotFound):
        app.resume("nobody", by="ops")


def test_a_pause_of_a_parked_run_is_refused(app: durably.App) -> None:
    @app.step(retry=Retry(attempts=1))
    async def charge(item: str) -> str:
        raise ConnectionError("payment service down")

    @app.workflow
    async def order(item: str) -> str:
        return await charge(item)  # type: ignore[no-any-return]

    app.start("order", "lamp", id="k-1")
    app.run_until_idle()
    assert app.get_run("k-1").status is RunStatus.NEEDS_ATTENTION
    with pytest.raises(DurablyError, match=r"it is needs_attention.*durably dlq"):
        app.pause("k-1", by="ops")
    assert app.get_run("k-1").status is RunStatus.NEEDS_ATTENTION
    assert app.resume("k-1", by="ops").changed is False


def test_a_cancel_of_a_run_waiting_for_a_retry_does_not_wait_for_it(
    app: durably.App, clock: FakeClock
) -> None:
    undone: list[str] = []
    tries: list[int] = []

    @app.step
    async def reserve(item: str) -> str:
        return f"hold-{item}"

    @reserve.compensation
    async def release(item: str, hold: str) -> None:
        undone.append(hold)

    @app.step(retry=Retry(attempts=5, initial="1h", max_delay="1h", jitter="none"))
    async def charge(item: str) -> str:
        tries.append(1)
        raise ConnectionError("payment service down")

    @app.workflow
    async def order(item: str) -> str:
        await reserve(item)
        return await charge(item)  # type: ignore[no-any-return]

    app.start("order", "lamp", id="r-1")
    app.run_until_idle()
    run = app.get_run("r-1")
    assert run.status is RunStatus.PENDING
    assert run.available_at == clock.now() + timedelta(hours=1)  # its next attempt

    steered = app.cancel("r-1", by="ops")
    assert (steered.changed, steered.status) == (True, RunStatus.PENDING)
    assert app.get_run("r-1").available_at == clock.now()
    assert app.run_until_idle() == 1
    assert_cancelled(app, "r-1", "ops", None)
    assert tries == [1]  # no attempt more
    assert undone == ["hold-lamp"]


def test_a_cancel_stops_every_branch_of_a_gather_in_flight(app: durably.App) -> None:
    undone: list[str] = []
    seen: list[str] = []

    @app.step
    async def reserve(item: str) -> str:
        return f"hold-{item}"

    @reserve.compensation
    async def release(item: str, hold: str) -> None:
        undone.append(hold)

    @app.step
    async def fetch(part: str) -> str:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            seen.append(part)
            raise
        return part

    @app.workflow
    async def assemble(item: str) -> list[str]:
        await reserve(item)
        parts: list[str] = await durably.gather(fetch("a"), fetch("b"), fetch("c"))
        return parts

    app.start("assemble", "lamp", id="g-1")
    worker = worker_thread(app)
    wait_until("every branch started", lambda: len(events(app, "g-1", EventKind.STEP_STARTED)) == 4)
    assert app.cancel("g-1", by="ops").changed
    join(worker)

    assert sorted(seen) == ["a", "b", "c"]
    assert_cancelled(app, "g-1", "ops", None)
    failed = events(app, "g-1", EventKind.STEP_FAILED)
    assert sorted(e.position or 0 for e in failed) == [1, 2, 3]
    assert {read_payload(e, StepFailed).reason for e in failed} == {"cancelled"}
    assert undone == ["hold-lamp"]


def test_a_cancel_stops_an_async_step_of_a_sync_workflow(app: durably.App) -> None:
    undone: list[str] = []
    seen: list[str] = []

    @app.step
    def reserve(item: str) -> str:
        return f"hold-{item}"

    @reserve.compensation
    def release(item: str, hold: str) -> None:
        undone.append(hold)

    @app.step
    async def charge(item: str) -> str:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        return "charged"

    @app.workflow
    def order(item: str) -> str:
        reserve(item)
        return charge(item)  # type: ignore[no-any-return]

    app.start("order", "lamp", id="y-1")
    worker = worker_thread(app)
    wait_until("charge started", lambda: step_started(app, "y-1", "charge"))
    assert app.cancel("y-1", by="ops").changed
    join(worker)
    assert seen == ["cancelled"]
    assert_cancelled(app, "y-1", "ops", None)
    assert undone == ["hold-lamp"]


def test_a_pause_while_undoing_lets_the_undo_in_flight_finish_and_stops_before_the_next(
    app: durably.App,
) -> None:
    undone: list[str] = []
    executions: list[RunExecution] = []
    entered = threading.Event()
    release_it = threading.Event()

    @app.step
    async def reserve(item: str) -> str:
        return f"hold-{item}"

    @reserve.compensation
    async def release(item: str, hold: str) -> None:
        undone.append(hold)

    @app.step
    async def charge(item: str) -> str:
        return f"charge-{item}"

    @charge.compensation
    def refund(item: str, charged: str) -> None:
        execution = current_execution()
        assert isinstance(execution, RunExecution)
        executions.append(execution)
        entered.set()
        assert release_it.wait(WAIT)
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
    assert entered.wait(WAIT)
    assert app.pause("v-1", by="ops").changed
    [execution] = executions  # as above: hold the undo until the worker has the pause
    wait_until("the worker folded the pause", lambda: execution.control.pause is not None)
    release_it.set()
    join(worker)

    assert app.get_run("v-1").status is RunStatus.PAUSED
    assert undone == ["charge-lamp"]  # the undo in flight finished; the next did not start
    assert undo_events(app, "v-1") == [
        ("compensation_started", 1, "charge"),
        ("compensation_completed", 1, "charge"),
    ]

    assert app.resume("v-1", by="ops").changed
    app.run_until_idle()
    assert undone == ["charge-lamp", "hold-lamp"]
    with pytest.raises(WorkflowFailed, match=r"failed: durably\.errors\.StepFailed"):
        handle.result(timeout=0)


def test_a_run_resumed_before_its_timer_is_due_sleeps_on_until_then(
    app: durably.App, clock: FakeClock
) -> None:
    undone: list[str] = []
    calls: list[str] = []
    order_app(app, undone, calls)
    handle = app.start("order", "lamp", "sleep", id="q-1")
    app.run_until_idle()
    due = clock.now() + timedelta(days=1)
    app.pause("q-1", by="ops")
    app.run_until_idle()
    assert app.get_run("q-1").status is RunStatus.PAUSED

    clock.advance(timedelta(hours=1))
    assert app.resume("q-1", by="ops").changed
    assert app.run_until_idle() == 0  # taken up, and asleep again: its timer is not due
    run = app.get_run("q-1")
    assert (run.status, run.available_at) == (RunStatus.PENDING, due)
    assert calls == ["reserve lamp"]
    clock.advance(timedelta(days=1))
    assert app.run_until_idle() == 1
    assert handle.result(timeout=0) == "shipped lamp"


def test_a_pause_during_a_gather_lets_the_branch_in_flight_finish_and_starts_no_other(
    app: durably.App,
) -> None:
    calls: list[str] = []
    executions: list[RunExecution] = []
    entered = threading.Event()
    release = threading.Event()

    @app.step
    def fetch(part: str) -> str:
        if part == "a":
            execution = current_execution()
            assert isinstance(execution, RunExecution)
            executions.append(execution)
            entered.set()
            assert release.wait(WAIT)
        calls.append(part)
        return part.upper()

    @app.workflow
    async def assemble() -> list[str]:
        parts: list[str] = await durably.gather(fetch("a"), fetch("b"), fetch("c"), limit=1)
        return parts

    handle = app.start("assemble", id="gp-1")
    worker = worker_thread(app)
    assert entered.wait(WAIT)
    assert app.pause("gp-1", by="ops").changed
    [execution] = executions  # as above: hold the branch until the worker has the pause
    wait_until("the worker folded the pause", lambda: execution.control.pause is not None)
    release.set()
    join(worker)

    assert app.get_run("gp-1").status is RunStatus.PAUSED
    assert calls == ["a"]
    assert events(app, "gp-1", EventKind.STEP_FAILED) == []  # a pause fails no branch
    assert app.resume("gp-1", by="ops").changed
    app.run_until_idle()
    assert handle.result(timeout=0) == ["A", "B", "C"]
    assert calls == ["a", "b", "c"]


# -- found while writing these tests (engine bugs, fixed) ---------------------------------------


def test_a_cancel_during_a_reconcile_stops_the_attempt_that_follows(
    app: durably.App, clock: FakeClock
) -> None:
    seen: list[str] = []
    reconciling = threading.Event()

    @app.step
    async def charge(item: str) -> str:
        try:
            await asyncio.sleep(4)  # bounded: with the bug it runs to its end
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        seen.append("ran to its end")
        return "charged"

    @charge.reconcile
    async def find_charge(item: str) -> str | None:
        reconciling.set()
        await asyncio.sleep(3)  # the worker reads the run's inbox (every 1 s) meanwhile
        return None  # not found: the body runs again

    @app.workflow
    async def order(item: str) -> str:
        return await charge(item)  # type: ignore[no-any-return]

    app.start("order", "lamp", id="rc-1")
    dead_worker(app.store, clock, "order", [], unknown="charge")  # its attempt is unknown
    clock.advance(DEAD_LEASE + timedelta(seconds=1))
    worker = worker_thread(app)
    assert reconciling.wait(WAIT)
    assert app.cancel("rc-1", by="ops").changed
    join(worker)
    assert_cancelled(app, "rc-1", "ops", None)
    assert seen == []  # the attempt after the reconcile never started: the run was cancelled


def test_a_resume_withdraws_a_pause_the_run_took_in_but_has_not_stopped_for(
    app: durably.App,
) -> None:
    go = threading.Event()

    @app.step(heartbeat_timeout="1s")
    async def export(rows: int) -> int:
        done = 0
        while not go.is_set():
            durably.heartbeat({"done": done})  # its beats are checkpointed as it goes
            done += 1
            await asyncio.sleep(0.05)
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
        wait_until("export started", lambda: step_started(app, "hb-1", "export"))
        assert app.pause("hb-1", by="ops").changed

        def pause_committed() -> bool:
            received = events(app, "hb-1", EventKind.MESSAGE_RECEIVED)
            return any('"pause"' in (event.data or "") for event in received)

        wait_until("a heartbeat's checkpoint took the pause in", pause_committed)
        assert app.get_run("hb-1").status is RunStatus.RUNNING
        resumed = app.resume("hb-1", by="ops")
    finally:
        go.set()
        join(worker)
    assert resumed.changed, resumed.note
    assert app.get_run("hb-1").status is RunStatus.COMPLETED
    assert handle.result(timeout=0) == "published 10"


def test_a_pause_taken_in_while_the_step_fails_for_a_retry_pauses_the_run_at_once(
    app: durably.App, clock: FakeClock
) -> None:
    tries: list[int] = []
    executions: list[RunExecution] = []
    entered = threading.Event()

    @app.step(retry=Retry(attempts=3, initial="1h", max_delay="1h", jitter="none"))
    def charge(item: str) -> str:
        tries.append(1)
        if len(tries) == 1:
            execution = current_execution()
            assert isinstance(execution, RunExecution)
            executions.append(execution)
            entered.set()
            deadline = time.monotonic() + WAIT
            while execution.control.pause is None and time.monotonic() < deadline:
                time.sleep(0.02)  # until the worker has the pause, as above
            raise ConnectionError("payment service down")
        return f"charged {item}"

    @app.workflow
    async def order(item: str) -> str:
        return await charge(item)  # type: ignore[no-any-return]

    handle = app.start("order", "lamp", id="rp-1")
    worker = worker_thread(app)
    assert entered.wait(WAIT)
    assert app.pause("rp-1", by="ops").changed
    join(worker)
    [execution] = executions
    assert execution.control.pause is not None  # the worker did take it in
    assert "attempt_failed" in kinds(app.history("rp-1"))

    assert app.get_run("rp-1").status is RunStatus.PAUSED
    assert [run.id for run in app.runs(status=RunStatus.PAUSED)] == ["rp-1"]
    assert app.resume("rp-1", by="ops").changed
    clock.advance(timedelta(hours=1))
    app.run_until_idle()
    assert handle.result(timeout=0) == "charged lamp"

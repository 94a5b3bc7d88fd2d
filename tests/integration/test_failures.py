"""Failures: a failing step or workflow, non-determinism, unreadable stored payloads."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

import durably
from durably.core.history import EventKind
from durably.testing import FakeClock

from .conftest import execute_sql, kinds, step_events


class Opaque:
    """Neither JSON, a dataclass nor a pydantic model."""


@pytest.mark.parametrize(
    ("make", "type_name"),
    [(object, "object"), (Opaque, "Opaque"), (lambda: lambda: None, "function")],
    ids=["object", "class-instance", "lambda"],
)
def test_a_step_returning_an_unserializable_value_fails(
    app: durably.App, make: Callable[[], object], type_name: str
) -> None:
    calls: list[str] = []

    @app.step
    async def produce() -> object:
        calls.append("produce")
        return make()

    @app.workflow
    async def consume() -> str:
        await produce()
        return "unreachable"

    handle = app.start(consume, id="c-1")
    assert app.run_until_idle() == 1
    assert app.run_until_idle() == 0  # not retried
    assert calls == ["produce"]

    run = app.client.get(handle.id)
    assert run.status is durably.RunStatus.FAILED
    assert run.error is not None
    assert run.error.error_class == "durably.errors.StepFailed"
    assert "'produce'" in run.error.message
    assert f"cannot be stored: result is {type_name} (" in run.error.message
    assert "which durably cannot store as JSON" in run.error.message
    with pytest.raises(durably.WorkflowFailed) as failed:
        handle.result(timeout=0)
    assert failed.value.error_class == "durably.errors.StepFailed"
    assert failed.value.message == run.error.message
    history = app.client.history(handle.id)
    assert step_events(history) == [
        ("step_started", 0, "produce", 1),
        ("step_failed", 0, "produce", 1),
    ]
    [step_failed] = [e for e in history if e.kind is EventKind.STEP_FAILED]
    assert "durably.errors.PayloadError" in (step_failed.data or "")
    assert kinds(history)[-1] == "run_failed"


def test_the_workflow_can_catch_a_failed_step(app: durably.App) -> None:
    @app.step
    async def produce() -> object:
        return object()

    @app.workflow
    async def tolerant() -> dict[str, str]:
        try:
            await produce()
        except durably.StepFailed as failed:
            return {"step": failed.step, "class": failed.error_class, "message": failed.message}
        return {}

    handle = app.start(tolerant)
    app.run_until_idle()
    outcome = handle.result(timeout=0)
    assert outcome["step"] == "produce"
    assert outcome["class"] == "durably.errors.PayloadError"
    assert "the result of step 'produce' cannot be stored: result is object" in outcome["message"]


def test_a_step_given_an_unserializable_argument_fails_without_running(app: durably.App) -> None:
    calls: list[object] = []

    @app.step
    async def take(thing: object) -> None:
        calls.append(thing)

    @app.workflow
    async def give() -> None:
        await take(Opaque())

    handle = app.start(give)
    app.run_until_idle()
    assert calls == []
    with pytest.raises(durably.WorkflowFailed) as failed:
        handle.result(timeout=0)
    assert failed.value.error_class == "durably.errors.StepFailed"
    assert "the input of step 'take'" in failed.value.message


def test_an_unserializable_workflow_result_fails_the_run(app: durably.App) -> None:
    @app.workflow
    async def weird() -> object:
        return Opaque()

    handle = app.start(weird)
    app.run_until_idle()
    with pytest.raises(durably.WorkflowFailed) as failed:
        handle.result(timeout=0)
    assert failed.value.error_class == "durably.errors.PayloadError"
    assert "the result of workflow 'weird' cannot be stored: result is Opaque (" in (
        failed.value.message
    )


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
def test_a_workflow_that_raises_fails_without_retry(
    app: durably.App, clock: FakeClock, sync: bool
) -> None:
    bodies: list[str] = []

    @app.step
    async def check(x: int) -> int:
        return x

    if sync:

        @app.workflow(name="strict")
        def strict_sync(x: int) -> int:
            bodies.append("strict")
            assert check(x) > 10, "x must be above 10"
            return x

    else:

        @app.workflow(name="strict")
        async def strict_async(x: int) -> int:
            bodies.append("strict")
            assert await check(x) > 10, "x must be above 10"
            return x

    handle = app.start("strict", 3)
    assert app.run_until_idle() == 1
    clock.advance("1d")
    assert app.run_until_idle() == 0
    assert bodies == ["strict"]
    with pytest.raises(durably.WorkflowFailed) as failed:
        handle.result(timeout=0)
    assert (failed.value.status, failed.value.error_class) == ("failed", "AssertionError")
    assert failed.value.message.startswith("x must be above 10")
    assert kinds(app.client.history(handle.id))[-1] == "run_failed"


def test_a_workflow_raising_its_own_exception_records_its_qualified_class(
    app: durably.App,
) -> None:
    @app.workflow
    async def refuses() -> None:
        raise durably.Terminal("card declined")

    handle = app.start(refuses)
    app.run_until_idle()
    with pytest.raises(durably.WorkflowFailed) as failed:
        handle.result(timeout=0)
    assert failed.value.error_class == "durably.errors.Terminal"
    assert failed.value.message == "card declined"


# -- non-determinism ----------------------------------------------------------------------


def leave_in_flight(app: durably.App, first: str, second: str) -> Callable[[], list[str]]:
    """Register `flow` = step `first`, then step `second`; the worker that runs it is told to
    stop while `second` is in flight and hands the run back. Returns a function that runs it
    that far and gives the bodies that ran."""
    worker = app.worker(stop_grace=0)
    calls: list[str] = []

    @app.step(name=first)
    async def one() -> str:
        calls.append(first)
        return f"{first} done"

    @app.step(name=second)
    async def two() -> str:
        calls.append(second)
        worker.stop()
        await asyncio.Event().wait()
        return "never"

    @app.workflow(name="flow", version="1")  # kept by the deploys below: same version
    async def flow() -> list[str]:
        return [await one(), await two()]

    def run() -> list[str]:
        worker.run_until_idle()
        return calls

    return run


def test_a_changed_workflow_is_parked_for_a_person(
    app: durably.App, other_app: durably.App, clock: FakeClock
) -> None:
    run_v1 = leave_in_flight(app, "reserve_stock", "charge_card")
    handle = app.start("flow", id="flow-1")
    assert run_v1() == ["reserve_stock", "charge_card"]
    assert handle.status() is durably.RunStatus.PENDING

    v2_calls: list[str] = []

    @other_app.step
    async def charge_card() -> str:
        v2_calls.append("charge_card")
        return "charged"

    @other_app.step
    async def reserve_stock() -> str:
        v2_calls.append("reserve_stock")
        return "reserved"

    @other_app.workflow(name="flow", version="1")
    async def flow_v2() -> list[str]:  # the new deploy charges first
        return [await charge_card(), await reserve_stock()]

    assert other_app.run_until_idle() == 1
    assert v2_calls == []  # nothing ran for real
    run = other_app.client.get(handle.id)
    assert run.status is durably.RunStatus.NEEDS_ATTENTION
    assert run.lease_owner is None
    assert run.error is not None
    assert run.error.error_class == "durably.errors.NonDeterminismError"
    assert "step #0" in run.error.message
    assert "'reserve_stock'" in run.error.message
    assert "'charge_card'" in run.error.message
    with pytest.raises(TimeoutError, match="still needs_attention"):
        handle.result(timeout=0)

    parked = other_app.client.history(handle.id)
    assert kinds(parked)[-1] == "run_parked"
    clock.advance("1d")
    assert other_app.run_until_idle() == 0  # not retried, ever
    assert app.run_until_idle() == 0
    assert other_app.client.history(handle.id) == parked


def test_a_workflow_calling_more_steps_on_replay_is_fine_past_the_history(
    app: durably.App, other_app: durably.App
) -> None:
    """Only a mismatch at a recorded position is non-determinism; new positions just run."""
    run_v1 = leave_in_flight(app, "a", "b")
    handle = app.start("flow", id="flow-1")
    run_v1()

    @other_app.step
    async def a() -> str:
        raise AssertionError("a is recorded: it must replay")

    @other_app.step
    async def b() -> str:
        return "b done"

    @other_app.step
    async def c() -> str:
        return "c done"

    @other_app.workflow(name="flow", version="1")
    async def flow_v2() -> list[str]:
        return [await a(), await b(), await c()]

    assert other_app.run_until_idle() == 1
    assert handle.result(timeout=0) == ["a done", "b done", "c done"]


# -- unreadable stored payloads -----------------------------------------------------------


def test_a_corrupt_stored_input_parks_the_run_and_keeps_its_history(
    app: durably.App, other_app: durably.App, store_url: str
) -> None:
    run_v1 = leave_in_flight(app, "a", "b")
    handle = app.start("flow", id="flow-1")
    run_v1()
    before = app.client.history(handle.id)
    assert (
        execute_sql(
            store_url, "UPDATE durably_runs SET input = 'not json' WHERE id = ?", [handle.id]
        )
        == 1
    )

    assert app.run_until_idle() == 1
    run = app.client.get(handle.id)
    assert run.status is durably.RunStatus.NEEDS_ATTENTION
    assert run.error is not None
    assert run.error.error_class == "durably.errors.PayloadError"
    assert "the stored input of run 'flow-1' cannot be read" in run.error.message
    after = app.client.history(handle.id)
    assert after[: len(before)] == before
    assert kinds(after[len(before) :]) == ["claimed", "run_parked"]
    assert app.run_until_idle() == 0


def test_a_stored_input_that_no_longer_fits_parks_the_run(app: durably.App, store_url: str) -> None:
    @app.workflow
    async def typed(x: int) -> int:
        return x

    handle = app.start(typed, 1, id="t-1")
    execute_sql(
        store_url,
        """UPDATE durably_runs SET input = '{"args": ["one"], "kwargs": {}}' WHERE id = ?""",
        [handle.id],
    )
    app.run_until_idle()
    run = app.client.get(handle.id)
    assert run.status is durably.RunStatus.NEEDS_ATTENTION
    assert run.error is not None
    assert "does not fit its parameters" in run.error.message


def test_a_corrupt_recorded_step_result_parks_the_run(app: durably.App, store_url: str) -> None:
    run_v1 = leave_in_flight(app, "a", "b")
    handle = app.start("flow", id="flow-1")
    run_v1()
    before = app.client.history(handle.id)
    assert (
        execute_sql(
            store_url,
            "UPDATE durably_events SET data = 'not json'"
            " WHERE run_id = ? AND kind = 'step_completed'",
            [handle.id],
        )
        == 1
    )
    corrupted = app.client.history(handle.id)

    assert app.run_until_idle() == 1
    run = app.client.get(handle.id)
    assert run.status is durably.RunStatus.NEEDS_ATTENTION
    assert run.error is not None
    assert run.error.error_class == "durably.errors.PayloadError"
    assert "the recorded result of step 'a'" in run.error.message
    after = app.client.history(handle.id)
    assert after[: len(before)] == corrupted
    assert kinds(after[len(before) :]) == ["claimed", "run_parked"]
    assert step_events(after) == step_events(before)  # no step ran again


def test_a_corrupt_recorded_failure_parks_the_run(app: durably.App, store_url: str) -> None:
    @app.step
    async def boom() -> None:
        raise durably.Terminal("boom")  # fails at once, no retry

    @app.workflow
    async def catches() -> str:
        try:
            await boom()
        except durably.StepFailed:
            return "caught"
        return "no"

    handle = app.start(catches, id="c-1")
    app.run_until_idle()
    assert handle.result(timeout=0) == "caught"
    # Hand the run back as if it had never finished, with its failure data unreadable.
    execute_sql(
        store_url,
        "UPDATE durably_events SET data = '{' WHERE run_id = ? AND kind = 'step_failed'",
        [handle.id],
    )
    execute_sql(
        store_url,
        "DELETE FROM durably_events WHERE run_id = ? AND kind = 'run_completed'",
        [handle.id],
    )
    last = max(event.seq for event in app.client.history(handle.id))
    execute_sql(
        store_url,
        "UPDATE durably_runs SET status = 'pending', available_at = created_at, result = NULL,"
        " event_count = ? WHERE id = ?",
        [last, handle.id],
    )
    app.run_until_idle()
    run = app.client.get(handle.id)
    assert run.status is durably.RunStatus.NEEDS_ATTENTION
    assert run.error is not None
    assert run.error.error_class == "durably.errors.PayloadError"
    assert "event #4 (step_failed) of step 'boom' holds unreadable data" in run.error.message

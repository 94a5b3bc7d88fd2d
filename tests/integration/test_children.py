"""Child workflows on both stores: a workflow called from a workflow runs as a run of its own,
linked both ways; its start is recorded at its place, so replay never starts a second one;
its end wakes the parent, which holds nothing while it waits; its failure reaches the parent
as a typed error; the parent's cancel, end and deadline reach the children."""

from __future__ import annotations

from datetime import timedelta

import pytest

import durably
from durably import ChildFailed, RunStatus
from durably.core.children import lineage, started_children
from durably.core.history import EventKind
from durably.testing import FakeClock


def family_app(app: durably.App, undone: list[str]) -> None:
    @app.step
    async def reserve(item: str) -> str:
        if item == "ghost":
            raise durably.Terminal(f"no such item: {item}")
        return f"r-{item}"

    @reserve.compensation
    async def release(item: str, result: str) -> None:
        undone.append(result)

    @app.workflow
    async def pick(item: str) -> str:
        return await reserve(item)  # type: ignore[no-any-return]

    @app.workflow
    async def pick_slowly(item: str) -> str:
        reserved = await reserve(item)
        await durably.sleep("2h")
        return reserved  # type: ignore[no-any-return]

    @app.workflow
    async def order(items: list[str]) -> list[str]:
        return [await pick(item) for item in items]

    @app.workflow
    async def order_at_once(items: list[str]) -> list[str]:
        return await durably.gather(*(pick(item) for item in items))  # type: ignore[no-any-return]


def test_a_workflow_called_from_a_workflow_runs_as_a_child_linked_both_ways(
    app: durably.App,
) -> None:
    family_app(app, [])
    handle = app.start("order", ["a", "b"], id="o-1")
    app.run_until_idle()

    assert handle.result(timeout=0) == ["r-a", "r-b"]
    children = started_children(app.client.history("o-1"))
    assert [c.run for c in children] == ["o-1.0.pick", "o-1.1.pick"]
    for child in children:
        run = app.client.get(child.run)
        assert run.status is RunStatus.COMPLETED
        assert run.parent == "o-1"
        assert lineage(app.client.history(child.run)).parent == "o-1"
    # the parent held nothing while each child ran: it was handed back, and woken by the end
    parent = app.client.history("o-1")
    assert [str(e.kind) for e in parent].count("claimed") == 3


def test_a_child_that_fails_raises_a_typed_error_in_its_parent(app: durably.App) -> None:
    family_app(app, [])

    @app.workflow
    async def careful(item: str) -> str:
        try:
            return await app.registry.workflows["pick"](item)  # type: ignore[no-any-return]
        except ChildFailed as failed:
            return f"{failed.status}: {failed.error_class}: {failed.message}"

    handle = app.start("careful", "ghost", id="c-1")
    app.run_until_idle()
    assert handle.result(timeout=0) == (
        "failed: durably.errors.StepFailed: step 'reserve' failed (terminal) with "
        "durably.errors.Terminal: no such item: ghost"
    )


def test_start_child_returns_a_handle_and_a_replay_never_starts_a_second_child(
    app: durably.App, clock: FakeClock
) -> None:
    family_app(app, [])
    pick = app.registry.workflows["pick"]
    waited: list[str] = []

    @app.workflow
    async def ahead(item: str) -> str:
        child = await durably.start_child(pick, item, id=f"pick-{item}")
        await durably.sleep("1m")  # the parent is replayed after this: the start is not redone
        waited.append(child.run_id)
        return await child.result()  # type: ignore[no-any-return]

    handle = app.start("ahead", "a", id="h-1")
    app.run_until_idle()
    assert app.client.get("pick-a").status is RunStatus.COMPLETED  # it ran while the parent slept
    clock.advance(timedelta(minutes=2))
    app.run_until_idle()
    assert handle.result(timeout=0) == "r-a"
    assert waited == ["pick-a"]
    assert [c.run for c in started_children(app.client.history("h-1"))] == ["pick-a"]
    assert len(app.client.runs(workflow="pick").runs) == 1


def test_children_at_once_fan_out_and_in(app: durably.App) -> None:
    family_app(app, [])
    handle = app.start("order_at_once", [f"i{n}" for n in range(8)], id="f-1")
    app.run_until_idle()
    assert handle.result(timeout=0) == [f"r-i{n}" for n in range(8)]
    assert len(app.client.runs(workflow="pick").runs) == 8


def test_cancelling_the_parent_cancels_its_children_and_each_undoes_its_steps(
    app: durably.App,
) -> None:
    undone: list[str] = []
    family_app(app, undone)

    @app.workflow
    async def slow_order(item: str) -> str:
        return await app.registry.workflows["pick_slowly"](item)  # type: ignore[no-any-return]

    app.start("slow_order", "a", id="s-1")
    app.run_until_idle()  # the child reserved and sleeps; the parent waits for it
    child = "s-1.0.pick_slowly"
    assert app.client.get(child).status is RunStatus.PENDING
    app.client.cancel("s-1", reason="customer left")
    app.run_until_idle()

    assert app.client.get("s-1").status is RunStatus.CANCELLED
    run = app.client.get(child)
    assert run.status is RunStatus.CANCELLED
    assert run.error is not None
    assert "parent run s-1" in run.error.message
    assert undone == ["r-a"]


def test_a_parent_that_completes_cancels_the_children_it_never_waited_for_but_not_detached_ones(
    app: durably.App,
) -> None:
    family_app(app, [])
    slowly = app.registry.workflows["pick_slowly"]

    @app.workflow
    async def fire(item: str) -> str:
        await durably.start_child(slowly, item, id="left")
        await durably.start_child(slowly, item, id="free", detached=True)
        return "done"

    app.start("fire", "a", id="p-1")
    app.run_until_idle()
    assert app.client.get("p-1").status is RunStatus.COMPLETED
    assert app.client.get("left").status is RunStatus.CANCELLED
    assert app.client.get("free").status is RunStatus.PENDING  # sleeping, on its own


def test_a_child_inherits_its_parents_deadline(app: durably.App, clock: FakeClock) -> None:
    family_app(app, [])

    @app.workflow(deadline="1h")
    async def hurried(item: str) -> str:
        return await app.registry.workflows["pick_slowly"](item)  # type: ignore[no-any-return]

    app.start("hurried", "a", id="d-1")
    app.run_until_idle()
    clock.advance(timedelta(minutes=61))
    app.run_until_idle()
    assert app.client.get("d-1.0.pick_slowly").status is RunStatus.TIMED_OUT
    assert app.client.get("d-1").status is RunStatus.TIMED_OUT


def test_an_id_taken_by_another_run_fails_the_start_and_touches_nothing(app: durably.App) -> None:
    family_app(app, [])
    pick = app.registry.workflows["pick"]
    app.start("pick", "z", id="mine")
    app.run_until_idle()

    @app.workflow
    async def clash() -> str:
        try:
            return await (await durably.start_child(pick, "a", id="mine")).result()  # type: ignore[no-any-return]
        except ChildFailed as failed:
            return failed.error_class

    handle = app.start("clash", id="x-1")
    app.run_until_idle()
    assert handle.result(timeout=0) == "durably.errors.ChildIdTaken"
    assert app.client.get("mine").result == '"r-z"'  # the other run is as it was
    assert app.client.get("mine").parent is None


def test_a_sync_workflow_calls_a_child_and_blocks_for_it(app: durably.App) -> None:
    family_app(app, [])

    @app.workflow
    def plain(item: str) -> str:
        return str(app.registry.workflows["pick"](item)).upper()

    handle = app.start("plain", "a", id="y-1")
    app.run_until_idle()
    assert handle.result(timeout=0) == "R-A"


def test_a_renamed_child_is_caught_on_replay(
    app: durably.App, other_app: durably.App, clock: FakeClock
) -> None:
    family_app(app, [])

    @app.workflow(version="1")  # the new deploy keeps it: its runs are its to run
    async def parent() -> str:
        child = await durably.start_child(app.registry.workflows["pick"], "a")
        await durably.sleep("1m")
        return await child.result()  # type: ignore[no-any-return]

    app.start("parent", id="n-1")
    app.run_until_idle()  # the child ran; the parent sleeps

    family_app(other_app, [])

    @other_app.workflow
    async def pick_other(item: str) -> str:
        return item

    @other_app.workflow(version="1")
    async def parent() -> str:  # noqa: F811 (the new deploy's code)
        child = await durably.start_child(pick_other, "a")
        await durably.sleep("1m")
        return await child.result()  # type: ignore[no-any-return]

    clock.advance(timedelta(minutes=2))
    other_app.run_until_idle()
    run = other_app.client.get("n-1")
    assert run.status is RunStatus.NEEDS_ATTENTION
    assert run.error is not None
    assert "'durably.child:pick' but the workflow now calls 'durably.child:pick_other'" in (
        run.error.message
    )


@pytest.mark.parametrize("kind", [EventKind.CHILD_STARTED])
def test_the_child_started_event_is_recorded_at_its_position(
    app: durably.App, kind: EventKind
) -> None:
    family_app(app, [])
    app.start("order", ["a"], id="e-1")
    app.run_until_idle()
    [event] = [e for e in app.client.history("e-1") if e.kind is kind]
    assert (event.position, event.name) == (0, "durably.child:pick")


def test_a_paused_child_is_cancelled_with_its_parent_without_anyone_resuming_it(
    app: durably.App, clock: FakeClock
) -> None:
    undone: list[str] = []
    family_app(app, undone)

    @app.workflow
    async def slow_order(item: str) -> str:
        return await app.registry.workflows["pick_slowly"](item)  # type: ignore[no-any-return]

    app.start("slow_order", "a", id="z-1")
    app.run_until_idle()
    child = "z-1.0.pick_slowly"
    app.client.pause(child, by="ops")
    clock.advance(timedelta(hours=3))  # its timer came due: it stops paused
    app.run_until_idle()
    assert app.client.get(child).status is RunStatus.PAUSED

    app.client.cancel("z-1", by="ops")
    app.run_until_idle()
    assert app.client.get(child).status is RunStatus.CANCELLED
    assert app.client.get("z-1").status is RunStatus.CANCELLED
    assert undone == ["r-a"]


def test_a_parked_child_keeps_its_parent_waiting_until_a_person_acts(app: durably.App) -> None:
    family_app(app, [])

    @app.step(retry=durably.Retry(attempts=1))
    async def flaky(item: str) -> str:
        raise ConnectionError("reset")

    @app.workflow
    async def fragile(item: str) -> str:
        return await flaky(item)  # type: ignore[no-any-return]

    @app.workflow
    async def waits(item: str) -> str:
        try:
            return await fragile(item)  # type: ignore[no-any-return]
        except ChildFailed as failed:
            return f"child {failed.status}: {failed.error_class}"

    handle = app.start("waits", "a", id="w-1")
    app.run_until_idle()
    assert app.client.get("w-1.0.fragile").status is RunStatus.NEEDS_ATTENTION
    assert app.client.get("w-1").status is RunStatus.PENDING  # waiting, holding nothing

    app.client.fail("w-1.0.fragile", reason="supplier gone", by="ops")
    app.run_until_idle()
    assert handle.result(timeout=0) == "child failed: durably.FailedByPerson"


def test_a_restart_past_a_child_reuses_its_outcome_and_starts_the_later_ones_anew(
    app: durably.App,
) -> None:
    family_app(app, [])
    app.start("order", ["a", "b"], id="r-1")
    app.run_until_idle()

    again = app.handle(app.client.restart("r-1", from_step=1, id="r-2").id)
    app.run_until_idle()
    assert again.result(timeout=0) == ["r-a", "r-b"]
    assert [c.run for c in started_children(app.client.history("r-2"))] == [
        "r-1.0.pick",
        "r-2.1.pick",
    ]
    assert len(app.client.runs(workflow="pick").runs) == 3  # r-1's two, and r-2's new second one


def test_runs_show_names_the_parent_and_the_children(app: durably.App) -> None:
    from durably.views.timeline import describe_run

    family_app(app, [])

    @app.workflow
    async def slow_order(item: str) -> str:
        return await app.registry.workflows["pick_slowly"](item)  # type: ignore[no-any-return]

    app.start("slow_order", "a", id="v-1")
    app.run_until_idle()
    parent = dict(describe_run(app.client.get("v-1"), app.client.history("v-1")))
    assert parent["child"] == "v-1.0.pick_slowly (pick_slowly): not ended"
    assert parent["due"] == "when its child run v-1.0.pick_slowly ends (no timeout)"
    child = dict(
        describe_run(app.client.get("v-1.0.pick_slowly"), app.client.history("v-1.0.pick_slowly"))
    )
    assert child["parent"] == "v-1"

"""Restarting an ended run from a step, on both stores: the new run reuses what the old one
recorded before the step (results, keys, recorded values) without running it again, runs the
rest for real with fresh idempotency keys, and both histories link to each other. What cannot
be restarted (a run that has not ended, a compensated step, an unknown step) is refused with
the reason and what to do."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import durably
from durably import RunStatus
from durably.core.event_data import read_payload
from durably.core.history import EventKind
from durably.core.payloads import Restarted, RunStarted
from durably.errors import DurablyError, RunConflict, RunNotFound
from durably.testing import FakeClock
from durably.views.timeline import describe_run

from .conftest import started_key
from .test_cli import durably_cli


def shipping_app(app: durably.App, calls: list[tuple[str, str]], broken: set[str]) -> None:
    @app.step
    async def price(order: str) -> int:
        calls.append(("price", durably.idempotency_key()))
        return 42

    @app.step
    async def ship(order: str, amount: int) -> str:
        calls.append(("ship", durably.idempotency_key()))
        if "ship" in broken:
            raise durably.Terminal("the label printer jammed")
        return f"shipped {order} for {amount}"

    @app.workflow
    async def fulfil(order: str) -> dict[str, Any]:
        amount: int = await price(order)
        quoted = durably.now()  # a recorded value: reused as recorded
        label: str = await ship(order, amount)
        return {"label": label, "quoted": quoted.isoformat()}


def test_a_failed_run_restarts_from_a_step_reusing_what_came_before(
    app: durably.App, clock: FakeClock
) -> None:
    calls: list[tuple[str, str]] = []
    broken = {"ship"}
    shipping_app(app, calls, broken)
    app.start("fulfil", "o-1", id="r-1")
    app.run_until_idle()
    assert app.client.get("r-1").status is RunStatus.FAILED
    quoted = next(e for e in app.client.history("r-1") if e.kind is EventKind.VALUE_RECORDED).data

    broken.clear()  # the fix is deployed
    handle = app.handle(app.client.restart("r-1", from_step="ship", by="erin").id)
    assert handle.id == "r-1.restart-1"
    assert app.client.get(handle.id).status is RunStatus.PENDING
    app.run_until_idle()

    result = handle.result(timeout=0)
    assert result["label"] == "shipped o-1 for 42"
    assert json.dumps(result["quoted"]) == quoted  # the recorded value, not a new one
    # price ran once, in the first run; ship ran again under the new run's key
    assert calls == [
        ("price", "r-1:0:price"),
        ("ship", "r-1:2:ship"),
        ("ship", "r-1.restart-1:2:ship"),
    ]

    forked = app.client.history(handle.id)
    assert read_payload(forked[0], RunStarted) == RunStarted("r-1", 2, "erin")
    assert started_key(forked[1]) == "r-1:0:price"  # the reused step keeps its key
    original = app.client.history("r-1")
    assert original[-1].kind is EventKind.RUN_RESTARTED
    assert read_payload(original[-1], Restarted) == Restarted(handle.id, 2, "erin")
    assert app.client.get("r-1").status is RunStatus.FAILED  # the old run stays as it ended

    shown_old = dict(describe_run(app.client.get("r-1"), original))
    shown_new = dict(describe_run(app.client.get(handle.id), forked))
    assert shown_old["restarted as"].startswith("r-1.restart-1 from step #2, by erin")
    assert shown_new["restart of"] == "r-1 at step #2, by erin"


def test_without_a_step_it_restarts_where_the_run_went_wrong(
    app: durably.App, tmp_path: Path, store_url: str
) -> None:
    calls: list[tuple[str, str]] = []
    broken = {"ship"}
    shipping_app(app, calls, broken)
    undone: list[str] = []

    @app.step
    async def hold(order: str) -> str:
        return f"hold-{order}"

    @hold.compensation
    async def unhold(order: str, held: str) -> None:
        undone.append(held)

    @app.step
    async def jam(order: str) -> None:
        raise durably.Terminal("the label printer jammed")

    @app.workflow
    async def held_then_shipped(order: str) -> None:
        await hold(order)
        await jam(order)

    app.start("fulfil", "o-3", id="r-3")
    app.start("held_then_shipped", "o-4", id="r-4")
    app.run_until_idle()
    assert undone == ["hold-o-4"]

    # the step that failed: everything before it is reused
    assert _from_step(app, app.client.restart("r-3").id) == 2
    # a step that was undone cannot be reused: it begins there
    assert _from_step(app, app.client.restart("r-4").id) == 0
    # the command a failed run's `now:` line suggests works as printed
    said = dict(describe_run(app.client.get("r-3"), app.client.history("r-3")))
    assert "(durably runs restart r-3)" in said["now"]
    result = durably_cli("runs", "restart", "r-3", "--store", store_url, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("restarted run r-3 as r-3.restart-2 from step #2\n")


def _from_step(app: durably.App, run_id: str) -> int | None:
    return read_payload(app.client.history(run_id)[0], RunStarted).from_step


def test_restarts_from_the_start_after_the_end_and_by_position_number_their_ids(
    app: durably.App,
) -> None:
    calls: list[tuple[str, str]] = []
    shipping_app(app, calls, set())
    app.start("fulfil", "o-2", id="r-2")
    app.run_until_idle()
    first = app.handle("r-2").result(timeout=0)
    calls.clear()

    again = app.handle(
        app.client.restart("r-2", from_step=0).id
    )  # everything runs again, with fresh keys
    after_end = app.handle(app.client.restart("r-2", from_step=3).id)  # nothing runs again
    mine = app.handle(app.client.restart("r-2", from_step=1, id="r-2-mine").id)
    app.run_until_idle()

    assert (again.id, after_end.id, mine.id) == ("r-2.restart-1", "r-2.restart-2", "r-2-mine")
    assert after_end.result(timeout=0) == first
    assert mine.result(timeout=0)["label"] == first["label"]
    assert sorted(calls) == sorted(
        [
            ("price", "r-2.restart-1:0:price"),
            ("ship", "r-2.restart-1:2:ship"),
            ("ship", "r-2-mine:2:ship"),
        ]
    )
    links = [e for e in app.client.history("r-2") if e.kind is EventKind.RUN_RESTARTED]
    assert [read_payload(e, Restarted).run for e in links] == [again.id, after_end.id, mine.id]


def test_what_cannot_be_restarted_is_refused_with_what_to_do(app: durably.App) -> None:
    calls: list[tuple[str, str]] = []
    shipping_app(app, calls, set())
    app.start("fulfil", "o-3", id="waiting")  # not run yet: pending
    with pytest.raises(DurablyError, match=r"it is pending, and only an ended run"):
        app.handle(app.client.restart("waiting", from_step=0).id)
    with pytest.raises(RunNotFound, match="nobody"):
        app.handle(app.client.restart("nobody", from_step=0).id)
    app.run_until_idle()

    with pytest.raises(DurablyError, match=r"called no step 'pack'; its steps: price, "):
        app.handle(app.client.restart("waiting", from_step="pack").id)
    with pytest.raises(DurablyError, match=r"has steps #0 to #2; .* not #7"):
        app.handle(app.client.restart("waiting", from_step=7).id)
    app.handle(app.client.restart("waiting", from_step=1, id="taken").id)
    with pytest.raises(RunConflict, match="'taken' is taken"):
        app.handle(app.client.restart("waiting", from_step=2, id="taken").id)
    assert (
        app.handle(app.client.restart("waiting", from_step=1, id="taken").id).id == "taken"
    )  # the same: found
    assert "waiting" not in {run.id for run in app.client.runs(status=RunStatus.PENDING).runs}


def test_a_compensated_step_cannot_be_reused(app: durably.App) -> None:
    undone: list[str] = []

    @app.step
    async def reserve(item: str) -> str:
        return f"hold-{item}"

    @reserve.compensation
    async def release(item: str, hold: str) -> None:
        undone.append(hold)

    @app.step
    async def pack(item: str) -> str:
        raise durably.Terminal("no box fits")

    @app.workflow
    async def order(item: str) -> str:
        await reserve(item)
        return await pack(item)  # type: ignore[no-any-return]

    app.start("order", "lamp", id="c-1")
    app.run_until_idle()
    assert undone == ["hold-lamp"]
    with pytest.raises(DurablyError, match=r"step #0 \('reserve'\) was compensated"):
        app.handle(app.client.restart("c-1", from_step="pack").id)
    app.handle(
        app.client.restart("c-1", from_step=0).id
    )  # from the compensated step itself: it runs again
    app.run_until_idle()
    assert app.client.get("c-1.restart-1").status is RunStatus.FAILED
    assert undone == ["hold-lamp", "hold-lamp"]

"""The actions a run's state allows (durably.views.actions, what the dashboard offers) are
exactly those the client accepts, on both stores: for each situation a run can be in, every
allowed action is carried out on a fresh run in that situation, and every other action that
can be refused is refused. No button the dashboard shows is a trap."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import durably
from durably import Retry, RunStatus, Terminal
from durably.errors import DurablyError
from durably.testing import FakeClock
from durably.views.actions import Action, allowed

from .conftest import settle


def situations_app(app: durably.App) -> None:
    @app.step(retry=Retry(attempts=1))
    def call_courier(order: str) -> str:
        raise ConnectionError("courier unreachable")

    @app.step
    def reserve(order: str) -> str:
        return f"res-{order}"

    @reserve.compensation
    def unreserve(order: str, reservation: str) -> None:
        raise Terminal(f"the warehouse lost {reservation}")

    @app.step
    def refuse(order: str) -> None:
        raise Terminal("card declined")

    @app.workflow
    def waits(order: str) -> str:
        return str(durably.wait_for_signal("go"))

    @app.workflow
    def parks(order: str) -> str:
        return call_courier(order)

    @app.workflow
    def undo_fails(order: str) -> None:
        reserve(order)
        refuse(order)

    @app.workflow
    def asks(order: str) -> bool:
        return bool(durably.approval("refund").approved)

    @app.workflow
    def quick(order: str) -> str:
        return order


# situation -> (workflow, the status it rests in, the actions it allows)
SITUATIONS: dict[str, tuple[str, RunStatus, set[Action]]] = {
    "queued": ("quick", RunStatus.PENDING, {Action.PAUSE, Action.CANCEL, Action.SIGNAL}),
    "waiting": ("waits", RunStatus.PENDING, {Action.PAUSE, Action.CANCEL, Action.SIGNAL}),
    "step parked": (
        "parks",
        RunStatus.NEEDS_ATTENTION,
        {Action.RETRY, Action.SKIP_STEP, Action.FAIL, Action.CANCEL, Action.SIGNAL},
    ),
    "undo failed": (
        "undo_fails",
        RunStatus.COMPENSATION_FAILED,
        {Action.RETRY, Action.SKIP_UNDO, Action.FAIL},
    ),
    "approval": (
        "asks",
        RunStatus.NEEDS_ATTENTION,
        {Action.DECIDE, Action.FAIL, Action.CANCEL, Action.SIGNAL},
    ),
    "completed": ("quick", RunStatus.COMPLETED, set()),
}

ACTS: dict[Action, Callable[[durably.App, str], Any]] = {
    Action.RETRY: lambda app, run: app.client.retry(run),
    Action.SKIP_STEP: lambda app, run: app.client.skip_step(run, result="by hand"),
    Action.SKIP_UNDO: lambda app, run: app.client.skip_step(run),
    Action.FAIL: lambda app, run: app.client.fail(run, reason="given up"),
    Action.DECIDE: lambda app, run: app.client.decide(run, "refund", approved=True),
    Action.CANCEL: lambda app, run: app.client.cancel(run),
    Action.PAUSE: lambda app, run: app.client.pause(run),
    Action.SIGNAL: lambda app, run: app.client.signal(run, "go", 1),
    Action.RELEASE: lambda app, run: app.client.release(run),
}
# refused outright when not allowed (a pause or cancel of a run that cannot take one says
# so without raising; resume is tried on paused runs only)
REFUSED_WHEN_NOT_ALLOWED = {
    Action.RETRY,
    Action.SKIP_STEP,
    Action.SKIP_UNDO,
    Action.FAIL,
    Action.DECIDE,
    Action.SIGNAL,
    Action.RELEASE,
}


def put_in(app: durably.App, clock: FakeClock, situation: str, run_id: str) -> str:
    workflow, status, _ = SITUATIONS[situation]
    app.start(workflow, run_id, id=run_id)
    if situation != "queued":
        settle(app, clock)
    assert app.client.get(run_id).status is status
    return run_id


@pytest.mark.parametrize("situation", sorted(SITUATIONS))
def test_what_is_offered_is_accepted_and_nothing_else(
    app: durably.App, clock: FakeClock, situation: str
) -> None:
    situations_app(app)
    run_id = put_in(app, clock, situation, "probe")
    offered = allowed(app.client.get(run_id), app.client.history(run_id), clock.now())

    assert offered == SITUATIONS[situation][2]
    for n, action in enumerate(sorted(ACTS)):
        fresh = put_in(app, clock, situation, f"{action.name.lower()}-{n}")
        if action in offered:
            ACTS[action](app, fresh)  # accepted: no refusal
        elif action in REFUSED_WHEN_NOT_ALLOWED:
            with pytest.raises(DurablyError):
                ACTS[action](app, fresh)

"""A cancel that has nothing left to do says so and changes nothing (a second cancel, a run
cancelled already); one that cannot apply is refused (a run that finished, an unknown one, a
run whose undoing failed for good, which waits for a person)."""

from __future__ import annotations

import pytest

import durably
from durably import Retry, RunStatus
from durably.errors import DurablyError, RunNotFound

from .steering import (
    assert_cancelled,
)


def test_a_second_cancel_changes_nothing_and_ended_or_unknown_runs_are_refused(
    app: durably.App, order: durably.Workflow, undone: list[str]
) -> None:
    app.start("order", "lamp", "sleep", id="t-1")
    app.run_until_idle()

    assert app.client.cancel("t-1", by="ops").changed
    again = app.client.cancel("t-1", by="erin", reason="me too")
    assert (again.changed, again.status) == (False, RunStatus.PENDING)
    assert again.note.startswith("it is being cancelled already")  # still in its inbox
    app.run_until_idle()
    assert_cancelled(app, "t-1", "ops", None)  # the first cancel's words, not the second's
    assert undone == ["hold-lamp"]  # undone once

    done = app.client.cancel("t-1", by="ops")
    assert (done.changed, done.status, done.note) == (
        False,
        RunStatus.CANCELLED,
        "it is cancelled already",
    )

    app.start("order", "vase", "none", id="t-2")
    app.run_until_idle()
    assert app.client.get("t-2").status is RunStatus.COMPLETED
    with pytest.raises(DurablyError, match=r"cannot cancel run 't-2': it has finished \(completed"):
        app.client.cancel("t-2", by="ops")
    with pytest.raises(RunNotFound, match="nobody"):
        app.client.cancel("nobody", by="ops")
    with pytest.raises(DurablyError, match="the engine's own"):
        app.client.send("t-1", "cancel", by="ops")  # not by hand, past the checks


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
    assert app.client.get("f-1").status is RunStatus.COMPENSATION_FAILED
    with pytest.raises(DurablyError, match=r"durably dlq retry.*durably dlq fail"):
        app.client.cancel("f-1", by="ops")
    assert app.client.get("f-1").status is RunStatus.COMPENSATION_FAILED
    with pytest.raises(DurablyError, match="compensation_failed"):
        app.client.pause("f-1", by="ops")  # parked: nothing to pause either

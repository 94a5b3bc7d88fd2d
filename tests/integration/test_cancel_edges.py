"""Where a cancel meets other states, on both stores: a paused run with steps to undo, a sync
step that stops with an error once it sees the cancel, a run being undone after a failure, and
a restart past a step the cancel cut off."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest

import durably
from durably import Retry, RunStatus
from durably.core.history import EventKind
from durably.errors import DurablyError
from durably.testing import FakeClock


def test_a_cancel_undoes_a_paused_run_without_waiting_for_a_resume(app: durably.App) -> None:
    undone: list[str] = []

    @app.step
    async def reserve(item: str) -> str:
        return f"hold-{item}"

    @reserve.compensation
    async def release(item: str, hold: str) -> None:
        undone.append(hold)

    @app.workflow
    async def order(item: str) -> str:
        await reserve(item)
        await durably.sleep("1d")
        return "done"

    app.start("order", "lamp", id="p-1")
    app.run_until_idle()
    app.client.pause("p-1", by="ops")
    app.run_until_idle()
    assert app.client.get("p-1").status is RunStatus.PAUSED

    app.client.cancel("p-1", by="ops", reason="customer left")
    app.run_until_idle()
    assert app.client.get("p-1").status is RunStatus.CANCELLED
    assert undone == ["hold-lamp"]


def test_a_sync_step_that_stops_with_an_error_on_a_cancel_ends_the_run_cancelled(
    app: durably.App,
) -> None:
    started = threading.Event()

    @app.step(retry=Retry(attempts=5))
    def export(rows: int) -> int:
        started.set()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if durably.cancelled():
                raise durably.Terminal("export stopped: the run was cancelled")
            time.sleep(0.02)
        return rows

    @app.workflow
    async def nightly(rows: int) -> int:
        return await export(rows)  # type: ignore[no-any-return]

    app.start("nightly", 10, id="s-1")
    worker = threading.Thread(target=app.run_until_idle)
    worker.start()
    assert started.wait(20)
    app.client.cancel("s-1", by="ops")
    worker.join(30)

    run = app.client.get("s-1")
    assert run.status is RunStatus.CANCELLED
    [failed] = [e for e in app.client.history("s-1") if e.kind is EventKind.STEP_FAILED]
    assert failed.data is not None
    assert '"reason": "cancelled"' in failed.data
    assert "export stopped" in failed.data  # what the step raised on its way out


def test_a_cancel_of_a_run_being_undone_changes_nothing_and_says_so(
    app: durably.App, clock: FakeClock
) -> None:
    flaky = {"release"}

    @app.step
    async def reserve(item: str) -> str:
        return f"hold-{item}"

    @reserve.compensation
    async def release(item: str, hold: str) -> None:
        if "release" in flaky:
            flaky.discard("release")
            raise ConnectionError("stock service down")

    @app.step
    async def pack(item: str) -> str:
        raise durably.Terminal("no box fits")

    @app.workflow
    async def order(item: str) -> str:
        await reserve(item)
        return await pack(item)  # type: ignore[no-any-return]

    app.start("order", "lamp", id="u-1")
    app.run_until_idle()  # failed; its undo waits for a retry
    assert app.client.get("u-1").status is RunStatus.PENDING

    steered = app.client.cancel("u-1", by="ops")
    assert not steered.changed
    assert "being undone already after durably.errors.StepFailed; it ends failed" in steered.note
    clock.advance(timedelta(minutes=5))
    app.run_until_idle()
    assert app.client.get("u-1").status is RunStatus.FAILED


def test_a_restart_past_a_cancelled_step_is_refused(app: durably.App) -> None:
    started = threading.Event()

    @app.step
    async def wait_long() -> str:
        started.set()
        await durably_sleep_forever()
        return "never"

    @app.step
    async def after() -> str:
        return "after"

    @app.workflow
    async def flow() -> str:
        await wait_long()
        return await after()  # type: ignore[no-any-return]

    app.start("flow", id="c-1")
    worker = threading.Thread(target=app.run_until_idle)
    worker.start()
    assert started.wait(20)
    app.client.cancel("c-1", by="ops")
    worker.join(30)
    assert app.client.get("c-1").status is RunStatus.CANCELLED
    with pytest.raises(DurablyError, match=r"step #0 \('wait_long'\) was cancelled"):
        app.handle(app.client.restart("c-1", from_step=1).id)
    app.handle(app.client.restart("c-1", from_step=0).id)  # from the cancelled step itself: fine


async def durably_sleep_forever() -> None:
    import asyncio

    await asyncio.Event().wait()  # only the cancel ends it

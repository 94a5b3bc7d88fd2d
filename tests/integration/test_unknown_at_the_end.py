"""An attempt whose outcome is unknown is resolved before a saga ends, on both stores: its
worker died (or it timed out) after its effect may have happened, and then the run is
cancelled, passes its deadline or fails. Its reconcile hook says whether it happened (its
undo then gets the found result); without one, its undo runs anyway, with no result; a step
with neither is passed over as before."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

import durably
from durably import RunStatus
from durably.core.history import EventKind
from durably.stores import Store
from durably.testing import FakeClock

from .conftest import DEAD_LEASE, dead_worker, step_events


def saga(app: durably.App, done: list[str], *, reconcile: Any = None) -> None:
    """`order`: `reserve` then `charge`, each with an undo; `charge` may have a reconcile
    hook (`reconcile(key)` returns the found charge id, or None)."""

    @app.step
    async def reserve() -> str:
        return "hold-1"

    @reserve.compensation
    async def release(hold: str) -> None:
        done.append(f"release {hold}")

    @app.step
    async def charge() -> str:
        done.append(f"charge {durably.idempotency_key()}")
        return "ch-1"

    @charge.compensation
    async def refund(charge_id: str | None) -> None:
        done.append(f"refund {charge_id} {durably.idempotency_key()}")

    if reconcile is not None:

        @charge.reconcile
        async def find_charge() -> str | None:
            found: str | None = reconcile(durably.idempotency_key())
            return found

    @app.workflow(deadline="1h")
    async def order() -> str:
        await reserve()
        await charge()
        await durably.sleep("1d")
        return "done"


def cancelled_after_a_death(app: durably.App, store: Store, clock: FakeClock) -> str:
    """A run whose worker completed `reserve`, started `charge` and died; then a cancel."""
    handle = app.start("order", id="o-1")
    dead_worker(store, clock, "order", [("reserve", "hold-1")], unknown="charge")
    app.client.cancel("o-1", by="ops")
    clock.advance(DEAD_LEASE + timedelta(seconds=1))
    app.run_until_idle()
    return handle.id


def test_without_a_reconcile_hook_the_unknown_steps_undo_runs_too(
    app: durably.App, store: Store, clock: FakeClock
) -> None:
    done: list[str] = []
    saga(app, done)
    run_id = cancelled_after_a_death(app, store, clock)

    assert app.client.get(run_id).status is RunStatus.CANCELLED
    # the unknown step first (it came last), with no result and its own undo key
    assert done == ["refund None o-1:1:charge:undo", "release hold-1"]
    assert ("compensation_completed", 1, "charge", 1) in step_events(app.client.history(run_id))


@pytest.mark.parametrize("found", ["ch-1", None])
def test_a_reconcile_hook_decides_whether_the_unknown_step_is_undone(
    app: durably.App, store: Store, clock: FakeClock, found: str | None
) -> None:
    done: list[str] = []
    asked: list[str] = []

    def reconcile(key: str) -> str | None:
        asked.append(key)
        return found

    saga(app, done, reconcile=reconcile)
    run_id = cancelled_after_a_death(app, store, clock)

    assert app.client.get(run_id).status is RunStatus.CANCELLED
    assert asked == ["o-1:1:charge"]  # asked with the step's own key
    history = app.client.history(run_id)
    reconciled = [e for e in history if e.kind is EventKind.STEP_RECONCILED]
    assert [e.data for e in reconciled] == [f'{{"found": {str(found is not None).lower()}}}']
    if found is None:  # it did not happen: nothing of it to undo
        assert done == ["release hold-1"]
    else:  # it happened: recorded as the step's result, and undone with it
        assert done == ["refund ch-1 o-1:1:charge:undo", "release hold-1"]
        assert ("step_completed", 1, "charge", 1) in step_events(history)


def test_a_deadline_resolves_the_unknown_step_before_the_run_times_out(
    app: durably.App, store: Store, clock: FakeClock
) -> None:
    done: list[str] = []
    saga(app, done)
    app.start("order", id="o-1")
    dead_worker(store, clock, "order", [("reserve", "hold-1")], unknown="charge")
    clock.advance(timedelta(hours=1, seconds=1))
    app.run_until_idle()

    assert app.client.get("o-1").status is RunStatus.TIMED_OUT
    assert done == ["refund None o-1:1:charge:undo", "release hold-1"]


def test_a_cancel_while_the_retry_of_a_timed_out_attempt_is_due_undoes_it(
    app: durably.App, clock: FakeClock
) -> None:
    done: list[str] = []

    @app.step
    async def reserve() -> str:
        return "hold-1"

    @reserve.compensation
    async def release(hold: str) -> None:
        done.append(f"release {hold}")

    # a per-attempt timeout is real time (that is the point of it), kept to a tenth
    @app.step(timeout="100ms", retry=durably.Retry(attempts=5, initial="1h"))
    async def charge() -> str:
        done.append("charge")
        await asyncio.Event().wait()  # the service hangs: the attempt may have happened
        return "ch-1"

    @charge.compensation
    async def refund(charge_id: str | None) -> None:
        done.append(f"refund {charge_id}")

    @app.workflow
    async def order() -> str:
        await reserve()
        return await charge()  # type: ignore[no-any-return]

    app.start("order", id="o-2")
    app.run_until_idle()
    assert app.client.get("o-2").status is RunStatus.PENDING  # its retry is due in an hour
    app.client.cancel("o-2", by="ops")
    app.run_until_idle()
    assert app.client.get("o-2").status is RunStatus.CANCELLED
    assert done == ["charge", "refund None", "release hold-1"]

"""What a deploy can do to runs in flight, on both stores: code that ends earlier than a run's
history is non-determinism (parked, never completed silently), and `durably.testing.replay`
says so from an exported run too."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

import durably
from durably import NonDeterminismError, RunStatus
from durably.core.history import EventKind
from durably.testing import FakeClock, replay

VERSION = "1"


def first_code(app: durably.App, ran: list[str]) -> durably.Workflow:
    """`flow`: step `a` twice, then an hour's sleep, then its result."""

    @app.step
    async def a(n: int) -> int:
        ran.append(f"a {n}")
        return n

    @app.workflow(name="flow", version=VERSION)
    async def flow() -> int:
        await a(1)
        await a(2)
        await durably.sleep("1h")
        return 3

    return flow


def shorter_code(app: durably.App, ran: list[str], ending: str) -> None:
    """The same version of `flow`, whose body calls `a` once and then `ending`: returns,
    raises, or continues as new."""

    @app.step
    async def a(n: int) -> int:
        ran.append(f"new a {n}")
        return n

    @app.workflow(name="flow", version=VERSION)
    async def flow() -> int:
        await a(1)
        if ending == "raises":
            raise ValueError("the new code gives up here")
        if ending == "continues as new":
            durably.continue_as_new()
        return 1


@pytest.mark.parametrize("ending", ["returns", "raises", "continues as new"])
def test_code_that_ends_before_the_calls_its_history_records_parks_the_run(
    app: durably.App, other_app: durably.App, clock: FakeClock, ending: str
) -> None:
    ran: list[str] = []
    first_code(app, ran)
    handle = app.start("flow", id="f-1")
    app.run_until_idle()
    assert handle.status() is RunStatus.PENDING  # asleep, after a(1) and a(2)

    shorter_code(other_app, ran, ending)
    clock.advance("1h")
    other_app.run_until_idle()

    run = other_app.client.get("f-1")
    assert run.status is RunStatus.NEEDS_ATTENTION
    assert run.error is not None
    assert run.error.error_class == "durably.errors.NonDeterminismError"
    verb = {"returns": "returns", "raises": "raises ValueError"}.get(ending, ending)
    assert f"step #1 is recorded as 'a' but the workflow now {verb} before calling it" in (
        run.error.message
    )
    kinds = [event.kind for event in other_app.client.history("f-1")]
    assert EventKind.RUN_COMPLETED not in kinds
    assert EventKind.RUN_FAILED not in kinds
    assert EventKind.COMPENSATING not in kinds
    assert ran == ["a 1", "a 2"]  # the new code ran nothing for real


def test_code_that_follows_the_whole_history_still_completes(
    app: durably.App, other_app: durably.App, clock: FakeClock
) -> None:
    ran: list[str] = []
    first_code(app, ran)
    handle = app.start("flow", id="f-2")
    app.run_until_idle()
    first_code(other_app, ran)  # the same code, deployed again
    clock.advance("1h")
    other_app.run_until_idle()
    assert handle.result(timeout=0) == 3
    assert ran == ["a 1", "a 2"]


def test_a_gather_that_failed_fast_replays_without_a_false_alarm(
    app: durably.App, other_app: durably.App, clock: FakeClock
) -> None:
    """A gather whose first branch failed for good cancelled the others (each recorded at its
    place): a replay makes the same calls, so the body's failure is its own, not a change."""

    def code(target: durably.App) -> None:
        @target.step(retry=durably.Retry(attempts=1))
        async def fails(n: int) -> int:
            raise durably.Terminal(f"no {n}")

        @target.step
        async def fine(n: int) -> int:
            return n

        @target.workflow(name="fan", version=VERSION)
        async def fan() -> list[int]:
            await durably.sleep("1h")
            results: list[int] = await durably.gather(fails(0), fine(1), fine(2), limit=1)
            return results

    code(app)
    app.start("fan", id="g-1")
    app.run_until_idle()
    clock.advance("1h")
    app.run_until_idle()
    first = app.client.get("g-1")
    assert first.status is RunStatus.FAILED
    exported = app.client.export("g-1")
    code(other_app)
    assert replay(other_app, exported).calls == 4


def test_a_replay_test_catches_code_that_ends_early(
    app: durably.App, other_app: durably.App, clock: FakeClock
) -> None:
    ran: list[str] = []
    first_code(app, ran)
    handle = app.start("flow", id="f-3")
    app.run_until_idle()
    clock.advance("1h")
    app.run_until_idle()
    assert handle.result(timeout=0) == 3
    exported = app.client.export("f-3")

    same = durably.App(app.store_url, clock=clock)
    try:
        first_code(same, ran)
        assert replay(same, exported).calls == 3
    finally:
        same.close()
    shorter_code(other_app, ran, "returns")
    with pytest.raises(NonDeterminismError, match="step #1 is recorded as 'a'"):
        replay(other_app, exported)
    assert ran == ["a 1", "a 2"]


def saga_code(app: durably.App, ran: list[str], *, step_name: str, undo: bool) -> None:
    """`trip`: a step (named `step_name`, undone by `release` if `undo`), then a day's sleep."""

    @app.step(name=step_name)
    async def reserve(room: str) -> str:
        ran.append(f"{step_name} {room}")
        return f"hold-{room}"

    if undo:

        @reserve.compensation
        async def release(room: str, hold: str) -> None:
            ran.append(f"release {hold} {durably.idempotency_key()}")

    @app.workflow(name="trip", version=VERSION)
    async def trip(room: str) -> str:
        await reserve(room)
        await durably.sleep("1d")
        return "booked"


@pytest.mark.parametrize(
    ("deployed", "missing"),
    [
        ({"step_name": "reserve_stock", "undo": True}, "no step of that name is registered"),
        ({"step_name": "reserve", "undo": False}, "its compensation is registered"),
    ],
    ids=["step-renamed", "undo-dropped"],
)
def test_an_undo_the_deployed_code_cannot_run_parks_the_run_instead_of_skipping_it(
    app: durably.App,
    other_app: durably.App,
    clock: FakeClock,
    deployed: dict[str, object],
    missing: str,
) -> None:
    ran: list[str] = []
    saga_code(app, ran, step_name="reserve", undo=True)
    app.start("trip", "r1", id="t-1")
    app.run_until_idle()  # reserved; asleep for a day
    saga_code(other_app, ran, **deployed)  # type: ignore[arg-type]
    other_app.client.cancel("t-1", by="ops")
    other_app.run_until_idle()

    run = other_app.client.get("t-1")
    assert run.status is RunStatus.COMPENSATION_FAILED
    assert run.error is not None
    assert run.error.error_class == "durably.errors.MissingCompensation"
    assert "step 'reserve' (#0) completed" in run.error.message
    assert missing in run.error.message
    assert "durably dlq retry t-1" in run.error.message
    assert "durably dlq skip t-1" in run.error.message
    assert ran == ["reserve r1"]  # nothing was undone, and nothing claims it was
    assert EventKind.RUN_CANCELLED not in [e.kind for e in other_app.client.history("t-1")]
    [letter] = other_app.client.dead_letters()
    assert letter.run_id == "t-1"

    # code that registers the undo again, and a retry: it runs, and the run ends cancelled
    fixed = durably.App(app.store_url, clock=clock)
    try:
        saga_code(fixed, ran, step_name="reserve", undo=True)
        fixed.client.retry("t-1", by="ops")
        fixed.run_until_idle()
        assert fixed.client.get("t-1").status is RunStatus.CANCELLED
    finally:
        fixed.close()
    assert ran == ["reserve r1", "release hold-r1 t-1:0:reserve:undo"]


def test_an_undo_done_by_hand_is_skipped_and_the_rest_are_undone(
    app: durably.App, other_app: durably.App, clock: FakeClock
) -> None:
    ran: list[str] = []
    saga_code(app, ran, step_name="reserve", undo=True)
    app.start("trip", "r2", id="t-2")
    app.run_until_idle()
    saga_code(other_app, ran, step_name="reserve_stock", undo=True)
    other_app.client.cancel("t-2", by="ops")
    other_app.run_until_idle()
    assert other_app.client.get("t-2").status is RunStatus.COMPENSATION_FAILED

    with pytest.raises(durably.DurablyError, match="which has no result to give"):
        other_app.client.skip_step_json("t-2", '"a result"', by="maria")
    other_app.client.skip_step("t-2", by="maria")
    other_app.run_until_idle()
    assert other_app.client.get("t-2").status is RunStatus.CANCELLED
    skipped = [
        e for e in other_app.client.history("t-2") if e.kind is EventKind.COMPENSATION_SKIPPED
    ]
    assert [(e.position, e.name, e.data) for e in skipped] == [
        (0, "reserve", '{"by": "maria", "reason": null}')
    ]
    assert ran == ["reserve r2"]


def test_a_step_that_never_had_an_undo_is_passed_over(
    app: durably.App, other_app: durably.App
) -> None:
    ran: list[str] = []
    saga_code(app, ran, step_name="reserve", undo=False)
    app.start("trip", "r3", id="t-3")
    app.run_until_idle()
    saga_code(other_app, ran, step_name="reserve", undo=False)
    other_app.client.cancel("t-3", by="ops")
    other_app.run_until_idle()
    assert other_app.client.get("t-3").status is RunStatus.CANCELLED


LOADED = """
import os

import durably

app = durably.App(os.environ["DURABLY_DEPLOYED_STORE"])


@app.step
async def pack(item: str) -> str:
    return f"packed {item}"


@app.workflow
async def ship(item: str) -> str:
    return await pack(item)
"""

REWRITTEN = LOADED.replace(
    "return await pack(item)", "packed = await pack(item)\n    return packed.upper()"
)


def test_a_version_is_that_of_the_code_loaded_not_of_the_file_rewritten_since(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process (a web server that only starts runs) imported the code; a deploy rewrote the
    file; then the process starts its first run. The run is pinned to the code the process
    runs, so the process's own worker runs it, and so does any worker of that code."""
    module = f"deployed_{uuid.uuid4().hex[:8]}"
    source = tmp_path / f"{module}.py"
    source.write_text(LOADED)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("DURABLY_DEPLOYED_STORE", store_url)
    loaded = importlib.import_module(module)
    try:
        source.write_text(REWRITTEN)  # the deploy, before the first run starts
        handle = loaded.app.start(loaded.ship, "lamp", id="v-1")
        pinned = loaded.app.client.get("v-1").version
        loaded.app.run_until_idle()
        assert handle.result(timeout=0) == "packed lamp"  # not stranded
    finally:
        loaded.app.close()
        sys.modules.pop(module, None)

    def version_in_a_new_process() -> str:
        code = f"import {module}; print({module}.ship.version)"
        env = {**os.environ, "PYTHONPATH": str(tmp_path)}
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        return done.stdout.strip()

    assert version_in_a_new_process() != pinned  # the rewritten code is another version
    source.write_text(LOADED)
    assert version_in_a_new_process() == pinned  # the code that was loaded

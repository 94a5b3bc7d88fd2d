"""The "now and next" sentence, on both stores: what a run is doing now and what happens next,
in words, for each state a run can be in, read off real runs."""

from __future__ import annotations

import contextlib
from datetime import timedelta

import durably
from durably.stores.records import NewRun, WorkerBeat
from durably.testing import FakeClock
from durably.views.explaining import explain

from .conftest import DEAD_LEASE, dead_worker


class Throttling(durably.Throttled):
    pass


def sentence(app: durably.App, run_id: str, workers: list[WorkerBeat] | None = None) -> str:
    run, history = app.client.get(run_id), app.client.history(run_id)
    return explain(run, history, workers or [], app.clock.now()).sentence


def test_a_retry_says_which_attempt_when_and_why(app: durably.App, clock: FakeClock) -> None:
    @app.step(retry=durably.Retry(attempts=5, initial="10s", jitter="none"), dependency="payments")
    async def charge(order: str) -> None:
        raise Throttling("slow down")

    @app.workflow
    async def order(item: str) -> None:
        await charge(item)

    app.start(order, "lamp", id="o-1")
    app.run_until_idle()
    app.run_until_idle()  # attempt 1 failed; the retry is due in 10 s

    said = sentence(app, "o-1")
    due = (clock.now() + timedelta(seconds=10)).strftime("%H:%M:%S")
    assert said.startswith("waiting: retry 2/5 of charge at ")
    assert due in said
    assert said.endswith(", Throttling by payments")


def test_exhausted_retries_park_the_run_and_say_what_a_person_can_do(
    app: durably.App, clock: FakeClock
) -> None:
    @app.step(retry=durably.Retry(attempts=2, initial="1s", jitter="none"))
    async def charge(order: str) -> None:
        raise ConnectionError("payment service unreachable")

    @app.workflow
    async def order(item: str) -> None:
        await charge(item)

    app.start(order, "lamp", id="o-2")
    for _ in range(4):
        app.run_until_idle()
        clock.advance("2s")

    said = sentence(app, "o-2")
    assert said.startswith("parked for a person after 2 attempt(s): step charge failed ")
    assert "(attempts exhausted) with ConnectionError: payment service unreachable" in said
    assert "durably dlq retry o-2" in said
    assert "durably dlq skip o-2 --result JSON" in said
    assert "durably dlq fail o-2 --reason TEXT" in said


def test_a_failed_undo_names_the_root_cause(app: durably.App, clock: FakeClock) -> None:
    @app.step
    async def reserve(item: str) -> str:
        return f"held {item}"

    @reserve.compensation
    async def release(item: str, held: str) -> None:
        raise durably.Terminal("the warehouse lost the hold")

    @app.step(retry=durably.Retry(attempts=1))
    async def charge(item: str) -> None:
        raise durably.Terminal("card declined")

    @app.workflow
    async def order(item: str) -> None:
        await reserve(item)
        await charge(item)

    app.start(order, "desk", id="o-3")
    for _ in range(3):
        app.run_until_idle()
        clock.advance("1m")

    said = sentence(app, "o-3")
    assert said.startswith("parked for a person: an undo failed: ")
    assert "the warehouse lost the hold" in said
    assert "after step charge failed (terminal) with durably.errors.Terminal: card declined" in said
    assert "durably dlq retry o-3" in said


def test_signal_waits_pauses_and_endings(app: durably.App, clock: FakeClock) -> None:
    @app.workflow
    async def approve_order(item: str) -> str:
        answer: str = await durably.wait_for_signal("go", timeout="1h")
        return answer

    app.start(approve_order, "a", id="w-1")
    app.run_until_idle()
    waiting = sentence(app, "w-1")
    assert waiting.startswith("waiting for signal 'go' until ")
    assert waiting.endswith("send it (durably signal w-1 go --data JSON)")

    app.client.pause("w-1", by="ops", reason="stock count")
    app.run_until_idle()
    assert sentence(app, "w-1").startswith("paused by ops at ")
    assert "(stock count); no step starts until a person resumes it (durably resume w-1)" in (
        sentence(app, "w-1")
    )

    app.client.resume("w-1", by="ops")
    app.client.signal("w-1", "go", "yes")
    app.run_until_idle()
    assert sentence(app, "w-1").startswith("completed at ")
    assert sentence(app, "w-1").endswith("nothing more happens")


def test_queued_and_stranded_runs_say_who_picks_them_up(app: durably.App, clock: FakeClock) -> None:
    @app.step
    async def pack(order: str) -> str:
        return order

    @app.workflow(version="1")
    async def deliver(order: str) -> str:
        return await pack(order)  # type: ignore[no-any-return]

    app.start(deliver, "q", id="q-1")
    assert sentence(app, "q-1").startswith("queued: due since ")
    assert "no live worker runs workflow 'deliver' at version 1" in sentence(app, "q-1")
    alive = WorkerBeat("w-2", clock.now(), clock.now(), timedelta(seconds=10), {"deliver": ("1",)})
    assert sentence(app, "q-1", [alive]).endswith("a worker claims it at its next poll (w-2)")

    dead_worker(app.store, clock, "deliver", [], unknown="pack")
    clock.advance(DEAD_LEASE + timedelta(seconds=1))
    stranded = sentence(app, "q-1", [alive])
    assert stranded.startswith("stranded: the lease of worker dead-worker expired at ")
    assert "presumed dead" in stranded
    assert stranded.endswith("the next worker to poll takes it over (w-2)")


def test_a_run_parked_by_no_step_is_not_offered_a_skip(app: durably.App, clock: FakeClock) -> None:
    @app.workflow
    async def count(n: int) -> int:
        return n

    # an input the workflow cannot read (written by other code): the run is parked, no step
    app.store.create_run(NewRun("odd-1", "count", '{"args": ["x"], "kwargs": {}}'), now=clock.now())
    app.run_until_idle()

    said = sentence(app, "odd-1")
    assert said.startswith("parked for a person: durably.errors.PayloadError: ")
    assert "durably dlq skip" not in said
    assert said.endswith(
        "retry (durably dlq retry odd-1) or give up (durably dlq fail odd-1 --reason TEXT)"
    )
    [letter] = app.client.dead_letters()
    assert letter.error is not None
    assert letter.error.error_class == "durably.errors.PayloadError"


def test_a_failure_the_workflow_went_past_is_not_the_root_cause(
    app: durably.App, clock: FakeClock
) -> None:
    @app.step
    async def caught(item: str) -> None:
        raise durably.Terminal("not this one")

    @app.workflow
    async def odd(item: str) -> list[int]:
        with contextlib.suppress(durably.StepFailed):
            await caught(item)  # the workflow goes past this failure
        return {1, 2}  # type: ignore[return-value]  # a set would come back a list: refused

    app.start(odd, "x", id="odd-2")
    app.run_until_idle()

    said = sentence(app, "odd-2")
    assert said.startswith("failed at ")
    assert "durably.errors.PayloadError" in said
    assert "not this one" not in said

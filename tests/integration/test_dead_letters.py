"""Dead letters: runs parked for a person, and what the person does with them (retry, skip
the step, fail), from the API and the CLI; escalation; poison pills."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import timedelta

import pytest

import durably
from durably import DurablyError, Retry, RunNotFound, RunStatus
from durably.core.history import EventKind
from durably.stores import Store
from durably.testing import FakeClock
from durably.workflow.context import step_key

from .conftest import DEAD_LEASE, data, dying_worker, events, settle
from .processes import REPO
from .test_cli import durably_cli

POLICY = Retry(attempts=3, initial="1s", jitter="none")


@dataclass
class Shop:
    """The outside world: a payment service that fails while `down` says so."""

    down: int = 1_000  # how many more charge calls fail
    charges: list[str] = field(default_factory=list)  # idempotency key of every charge call
    undone: list[str] = field(default_factory=list)


def shop_app(app: durably.App, shop: Shop) -> None:
    """`order(item)`: reserve (undoable), charge (flaky), ship. Returns a summary."""

    @app.step
    async def reserve(item: str) -> str:
        return f"res-{item}"

    @reserve.compensation
    async def release(item: str, reservation: str) -> None:
        shop.undone.append(reservation)

    @app.step(retry=POLICY)
    async def charge(item: str) -> str:
        shop.charges.append(durably.idempotency_key())
        if shop.down > 0:
            shop.down -= 1
            raise ConnectionError("payment service unreachable")
        return f"ch-{item}"

    @app.step
    async def ship(item: str, charge_id: str) -> str:
        return f"shipped {item} ({charge_id})"

    @app.workflow
    async def order(item: str) -> str:
        await reserve(item)
        charge_id: str = await charge(item)
        result: str = await ship(item, charge_id)
        return result


def park(app: durably.App, clock: FakeClock, item: str) -> str:
    """Start an order whose charge exhausts its attempts; return its (parked) run id."""
    run_id = f"order-{item}"
    app.start("order", item, id=run_id)
    settle(app, clock)
    assert app.client.get(run_id).status is RunStatus.NEEDS_ATTENTION
    return run_id


def test_dead_letters_lists_parked_runs_newest_first(app: durably.App, clock: FakeClock) -> None:
    shop = Shop()
    shop_app(app, shop)

    @app.workflow
    async def fine() -> str:
        return "ok"

    @app.workflow
    async def refused() -> None:
        raise durably.Terminal("no")

    older = park(app, clock, "lamp")
    clock.advance("1m")
    newer = park(app, clock, "desk")
    app.start(fine)
    app.start(refused)
    settle(app, clock)

    letters = app.client.dead_letters()
    assert [letter.run_id for letter in letters] == [newer, older]
    for letter in letters:
        assert letter.workflow == "order"
        assert letter.status is RunStatus.NEEDS_ATTENTION
        assert letter.step == "charge"
        assert letter.attempts == 3
        assert letter.error is not None
        # the root cause, with the class the step raised; the run's own error wraps it
        assert letter.error.error_class == "ConnectionError"
        assert letter.error.message == "payment service unreachable"
        assert letter.reason == "attempts exhausted"
        assert letter.run_error is not None
        assert letter.run_error.error_class == "durably.errors.StepFailed"
        assert "attempts exhausted" in letter.run_error.message
    assert letters[0].parked_at > letters[1].parked_at


def test_retry_gives_fresh_attempts_with_the_same_key(app: durably.App, clock: FakeClock) -> None:
    shop = Shop()
    shop_app(app, shop)
    run_id = park(app, clock, "lamp")
    assert len(shop.charges) == 3

    shop.down = 2  # still flaky: the fresh attempts need all of their budget
    app.client.retry(run_id, by="alice")
    assert app.client.get(run_id).status is RunStatus.PENDING
    settle(app, clock)

    assert app.handle(run_id).result(timeout=0) == "shipped lamp (ch-lamp)"
    key = step_key(run_id, 1, "charge")
    assert shop.charges == [key] * 6
    history = app.client.history(run_id)
    charge_starts = [e for e in history if e.kind is EventKind.STEP_STARTED and e.name == "charge"]
    assert {data(e)["key"] for e in charge_starts} == {key}
    [retried] = [e for e in history if e.kind is EventKind.RUN_RETRIED]
    assert data(retried) == {"by": "alice", "from_step": 1}
    after = history[history.index(retried) :]
    charge_attempts = [
        e.attempt for e in after if e.kind is EventKind.STEP_STARTED and e.name == "charge"
    ]
    assert charge_attempts == [1, 2, 3]
    assert shop.undone == []


def test_retry_from_a_completed_step_is_refused(app: durably.App, clock: FakeClock) -> None:
    """A completed step never runs again, even when a person asks: the run stays parked."""
    shop = Shop()
    shop_app(app, shop)
    run_id = park(app, clock, "rug")
    before = app.client.history(run_id)

    with pytest.raises(DurablyError, match=r"step #0 \('reserve'\) completed"):
        app.client.retry(run_id, from_step=0)

    assert app.client.get(run_id).status is RunStatus.NEEDS_ATTENTION
    assert app.client.history(run_id) == before


def test_skip_step_goes_on_with_the_given_result(app: durably.App, clock: FakeClock) -> None:
    shop = Shop()
    shop_app(app, shop)
    run_id = park(app, clock, "vase")

    app.client.skip_step(run_id, result="paid-by-phone", by="bob")
    settle(app, clock)

    assert app.handle(run_id).result(timeout=0) == "shipped vase (paid-by-phone)"
    assert len(shop.charges) == 3  # the skipped step did not run again
    [skipped] = events(app, run_id, EventKind.STEP_SKIPPED)
    assert (skipped.position, skipped.name) == (1, "charge")
    assert json.loads(skipped.data or "null") == "paid-by-phone"


def test_fail_compensates_and_ends_failed(app: durably.App, clock: FakeClock) -> None:
    shop = Shop()
    shop_app(app, shop)
    run_id = park(app, clock, "bike")

    app.client.fail(run_id, reason="customer cancelled", by="carol")
    settle(app, clock)

    assert shop.undone == ["res-bike"]
    run = app.client.get(run_id)
    assert run.status is RunStatus.FAILED
    assert run.error is not None
    assert run.error.error_class == "durably.FailedByPerson"
    assert run.error.message == "customer cancelled (by carol)"
    assert app.client.dead_letters() == []
    assert len(shop.charges) == 3


def test_fail_ends_a_run_whose_compensation_failed(app: durably.App, clock: FakeClock) -> None:
    @app.step
    async def book() -> str:
        return "booking"

    @book.compensation
    async def unbook(booking: str) -> None:
        raise durably.Terminal("the hotel does not answer")

    @app.workflow
    async def trip() -> None:
        await book()
        raise ValueError("no flights")

    handle = app.start(trip)
    settle(app, clock)
    assert handle.status() is RunStatus.COMPENSATION_FAILED
    with pytest.raises(DurablyError, match=r"an undo failed: .* which has no result to give"):
        app.client.skip_step(handle.id, result="x")  # an undo done by hand is skipped with none
    assert handle.status() is RunStatus.COMPENSATION_FAILED

    app.client.fail(handle.id, reason="cancelled the booking by phone")
    settle(app, clock)
    run = app.client.get(handle.id)
    assert run.status is RunStatus.FAILED
    assert run.error is not None
    assert "cancelled the booking by phone" in run.error.message


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
def test_escalate_parks_the_run_until_a_person_answers(
    app: durably.App, clock: FakeClock, sync: bool
) -> None:
    asked: list[str] = []

    @app.step
    async def prepare(amount: int) -> int:
        asked.append("prepare")
        return amount

    @app.step
    async def pay_out(amount: int, answer: str) -> str:
        return f"refunded {amount}" if answer == "yes" else f"kept {amount}"

    if sync:

        @app.workflow(name="refund")
        def refund_sync(amount: int) -> str:
            prepared = prepare(amount)
            answer = durably.escalate(f"approve a refund of {amount}?")
            result: str = pay_out(prepared, answer)
            return result

    else:

        @app.workflow(name="refund")
        async def refund_async(amount: int) -> str:
            prepared = await prepare(amount)
            answer = await durably.escalate(f"approve a refund of {amount}?")
            result: str = await pay_out(prepared, answer)
            return result

    handle = app.start("refund", 500, id="refund-1")
    assert app.run_until_idle() == 1  # parked: ended for now

    run = app.client.get(handle.id)
    assert run.status is RunStatus.NEEDS_ATTENTION
    assert run.error is not None
    assert "approve a refund of 500?" in run.error.message
    [letter] = app.client.dead_letters()
    assert (letter.run_id, letter.step) == ("refund-1", "durably.escalate")
    clock.advance("7d")
    assert app.run_until_idle() == 0  # nobody answers: it waits

    app.client.skip_step(handle.id, result="yes", by="manager")
    settle(app, clock)
    assert handle.result(timeout=0) == "refunded 500"
    assert asked == ["prepare"]  # the answer resumed the run; nothing ran twice


def test_escalate_outside_a_workflow_is_an_error() -> None:
    with pytest.raises(DurablyError, match="inside a workflow"):
        durably.escalate("anyone?")


def test_acting_on_a_run_that_is_not_parked_is_refused(app: durably.App, clock: FakeClock) -> None:
    shop = Shop(down=1)
    shop_app(app, shop)
    waiting = app.start("order", "pen", id="waiting")
    app.run_until_idle()
    assert waiting.status() is RunStatus.PENDING  # a retry is due later: not parked
    shop.down = 0
    done = app.start("order", "cup", id="done")
    app.run_until_idle()
    assert done.status() is RunStatus.COMPLETED

    for run_id, status in [("waiting", "pending"), ("done", "completed")]:
        before = app.client.history(run_id)
        with pytest.raises(DurablyError, match=f"cannot retry run '{run_id}': it is {status}"):
            app.client.retry(run_id)
        not_parked = f"it is {status}, not compensation_failed or needs_attention"
        with pytest.raises(DurablyError, match=not_parked):
            app.client.skip_step(run_id, result="x")
        with pytest.raises(DurablyError, match=f"cannot fail run '{run_id}': it is {status}"):
            app.client.fail(run_id)
        assert app.client.history(run_id) == before  # nothing was written
    with pytest.raises(RunNotFound):
        app.client.retry("no-such-run")


def test_skip_step_on_a_parked_run_without_a_failed_step_is_refused(
    app: durably.App, store: Store, clock: FakeClock
) -> None:
    run_id = poison(app, store, clock, takeovers=app.max_recoveries + 1)
    parked = app.client.get(run_id)
    assert parked.status is RunStatus.NEEDS_ATTENTION

    with pytest.raises(DurablyError, match="no failed step to skip"):
        app.client.skip_step(run_id, result=1)

    after = app.client.get(run_id)
    assert after.status is RunStatus.NEEDS_ATTENTION
    assert after.error == parked.error
    assert [letter.run_id for letter in app.client.dead_letters()] == [run_id]


# -- poison pills ---------------------------------------------------------------------------


def poison(
    app: durably.App, store: Store, clock: FakeClock, *, takeovers: int, alone: bool = True
) -> str:
    """A run whose step kills every worker that runs it: one worker claims it (among others)
    and dies mid-step, then `takeovers - 1` more take it over and die the same way, running it
    alone as a worker does with a run taken over (or not, with alone=False: the deaths were
    another run's doing); the app's own claim is takeover number `takeovers`. Returns the
    run id."""
    calls: list[int] = []

    @app.step
    async def explode(x: int) -> int:
        calls.append(x)
        return x

    @app.workflow
    async def fragile(x: int) -> int:
        result: int = await explode(x)
        return result

    run_id = "fragile-1"
    app.start(fragile, 1, id=run_id)
    started = json.dumps(
        {"key": step_key(run_id, 0, "explode"), "input": {"args": [1], "kwargs": {}}}
    )
    for n in range(takeovers):
        record: list[tuple[EventKind, int, str, int, str | None]] = []
        if alone and n > 0:
            record.append((EventKind.RUNNING_ALONE, 0, "explode", n + 1, None))
        record.append((EventKind.STEP_STARTED, 0, "explode", n + 1, started))
        dying_worker(store, clock, ["fragile"], owner=f"dying-{n}", record=record)
        clock.advance(DEAD_LEASE + timedelta(seconds=1))
    app.run_until_idle()
    return run_id


def test_a_run_that_keeps_killing_workers_is_parked_as_a_poison_pill(
    app: durably.App, store: Store, clock: FakeClock
) -> None:
    run_id = poison(app, store, clock, takeovers=app.max_recoveries + 1)

    run = app.client.get(run_id)
    assert run.status is RunStatus.NEEDS_ATTENTION
    assert run.error is not None
    assert run.error.error_class == "durably.errors.PoisonPill"
    assert f"{app.max_recoveries + 1} workers died" in run.error.message
    history = app.client.history(run_id)
    takeovers = [
        e for e in history if e.kind is EventKind.CLAIMED and "took_over_from" in (e.data or "")
    ]
    assert len(takeovers) == app.max_recoveries + 1
    assert history[-1].kind is EventKind.RUN_PARKED
    assert [e for e in history if e.kind is EventKind.STEP_COMPLETED] == []  # nothing ran
    assert [letter.run_id for letter in app.client.dead_letters()] == [run_id]

    app.client.retry(run_id, by="dave")  # a person looked; the recovery count starts again
    settle(app, clock)
    assert app.handle(run_id).result(timeout=0) == 1


def test_a_run_that_only_shared_dying_workers_is_never_a_poison_pill(
    app: durably.App, store: Store, clock: FakeClock
) -> None:
    run_id = poison(app, store, clock, takeovers=app.max_recoveries + 3, alone=False)

    assert app.handle(run_id).result(timeout=0) == 1
    history = app.client.history(run_id)
    last_claim = max(i for i, e in enumerate(history) if e.kind is EventKind.CLAIMED)
    # taken over, the attempt the dead worker left is lost, and the run ran alone first: a
    # death then would have been its own
    assert history[last_claim + 1].kind is EventKind.ATTEMPT_LOST
    assert history[last_claim + 2].kind is EventKind.RUNNING_ALONE


def test_max_recoveries_can_be_set_per_workflow(
    app: durably.App, store: Store, clock: FakeClock
) -> None:
    app.max_recoveries = 50
    run_id = "fragile-1"

    @app.step
    async def explode(x: int) -> int:
        return x

    @app.workflow(max_recoveries=1)
    async def fragile(x: int) -> int:
        result: int = await explode(x)
        return result

    app.start(fragile, 1, id=run_id)
    for n in range(2):  # the second death happened while it ran alone
        kinds = [EventKind.RUNNING_ALONE] if n else []
        record = [(kind, 0, "explode", n + 1, None) for kind in kinds]
        dying_worker(store, clock, ["fragile"], owner=f"dying-{n}", record=record)
        clock.advance(DEAD_LEASE + timedelta(seconds=1))
    app.run_until_idle()

    run = app.client.get(run_id)
    assert run.status is RunStatus.NEEDS_ATTENTION
    assert run.error is not None
    assert "(limit 1)" in run.error.message


def test_max_recoveries_must_be_a_whole_number() -> None:
    with pytest.raises(durably.ConfigError, match="max_recoveries"):
        durably.App(max_recoveries=-1)
    app = durably.App()
    with pytest.raises(durably.ConfigError, match="max_recoveries"):
        app.workflow(max_recoveries=1.5)  # type: ignore[arg-type]


def test_a_run_within_the_recovery_limit_is_not_a_poison_pill(
    app: durably.App, store: Store, clock: FakeClock
) -> None:
    run_id = poison(app, store, clock, takeovers=app.max_recoveries)
    assert app.handle(run_id).result(timeout=0) == 1


# -- the CLI ----------------------------------------------------------------------------------


def test_the_dlq_commands_act_on_parked_runs(
    app: durably.App, clock: FakeClock, store_url: str
) -> None:
    shop = Shop()
    shop_app(app, shop)
    to_retry, to_skip, to_fail = (park(app, clock, item) for item in ("lamp", "desk", "sofa"))
    shop.down = 0

    listed = durably_cli("dlq", "list", "--store", store_url, cwd=REPO)
    assert listed.returncode == 0, listed.stderr
    rows = [line for line in listed.stdout.splitlines() if line.startswith("order-")]
    assert len(rows) == 3
    for run_id in (to_retry, to_skip, to_fail):
        [row] = [line for line in rows if line.startswith(run_id + " ")]
        assert row.split()[1:4] == ["needs_attention", "charge", "3"]
        assert "ConnectionError: payment service unreachable" in row  # the root cause

    retried = durably_cli("dlq", "retry", to_retry, "--store", store_url, "--by", "erin", cwd=REPO)
    assert retried.returncode == 0, retried.stderr
    assert f"run {to_retry} is pending again" in retried.stdout
    skipped = durably_cli(
        "dlq", "skip", to_skip, "--result", '"cash"', "--store", store_url, cwd=REPO
    )
    assert skipped.returncode == 0, skipped.stderr
    failed = durably_cli(
        "dlq", "fail", to_fail, "--reason", "out of stock", "--store", store_url, cwd=REPO
    )
    assert failed.returncode == 0, failed.stderr

    settle(app, clock)  # the CLI acted on the real clock: the fake one catches up
    assert app.handle(to_retry).result(timeout=0) == "shipped lamp (ch-lamp)"
    assert app.handle(to_skip).result(timeout=0) == "shipped desk (cash)"
    assert app.client.get(to_fail).status is RunStatus.FAILED
    assert shop.undone == ["res-sofa"]
    [retried_event] = events(app, to_retry, EventKind.RUN_RETRIED)
    assert data(retried_event)["by"] == "erin"

    refused = durably_cli("dlq", "retry", to_retry, "--store", store_url, cwd=REPO)
    assert refused.returncode == 1
    assert f"cannot retry run '{to_retry}': it is completed" in refused.stderr
    empty = durably_cli("dlq", "list", "--store", store_url, cwd=REPO)
    assert empty.returncode == 0, empty.stderr
    assert "(no dead letters)" in empty.stdout

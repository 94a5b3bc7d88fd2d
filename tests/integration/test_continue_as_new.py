"""durably.continue_as_new on both stores: a long-lived run begins again under the same id with
a new input and a fresh history; nothing sent to it and not yet used is lost; its deadline and
parent stay; a crash on either side of the commit that begins the new generation leaves the
old generation or the new one, never a mix."""

from __future__ import annotations

from datetime import timedelta

import durably
from durably import RunStatus
from durably.core.history import EventKind
from durably.runtime.generations import generation
from durably.testing import FakeClock
from durably.views.timeline import describe_run


def looping_app(app: durably.App, done: list[int]) -> None:
    @app.step
    async def tick(n: int) -> int:
        done.append(n)
        return n

    @app.workflow
    async def counter(n: int, total: int) -> int:
        await tick(n)
        await durably.sleep("1h")
        if n == 4:
            return total + n
        durably.continue_as_new(n + 1, total + n)

    @app.workflow
    async def listener(heard: list[str]) -> list[str]:
        word = await durably.wait_for_signal("word")
        heard = [*heard, word]
        if word == "stop":
            return heard
        durably.continue_as_new(heard)


def test_a_run_continues_as_new_with_a_fresh_short_history_under_the_same_id(
    app: durably.App, clock: FakeClock
) -> None:
    done: list[int] = []
    looping_app(app, done)
    handle = app.start("counter", 0, 0, id="loop-1")
    lengths = []
    for _ in range(5):
        app.run_until_idle()
        lengths.append(len(app.client.history("loop-1")))
        clock.advance(timedelta(hours=2))
    app.run_until_idle()

    assert handle.result(timeout=0) == 0 + 1 + 2 + 3 + 4
    assert done == [0, 1, 2, 3, 4]  # each step ran once: no generation replayed another's
    history = app.client.history("loop-1")
    assert generation(history) == 5
    assert history[0].kind is EventKind.RUN_STARTED
    assert max(lengths) == min(lengths[1:])  # the history does not grow with the loop
    assert app.client.get("loop-1").input == '{"args":[4,6],"kwargs":{}}'
    assert dict(describe_run(app.client.get("loop-1"), history))["generation"].startswith("5:")


def test_signals_not_used_yet_go_along_to_the_next_generation(app: durably.App) -> None:
    looping_app(app, [])
    handle = app.start("listener", [], id="ear-1")
    for word in ("one", "two", "stop"):  # sent before the run ever ran: all in one claim
        app.client.signal("ear-1", "word", word)
    app.run_until_idle()
    assert handle.result(timeout=0) == ["one", "two", "stop"]
    assert generation(app.client.history("ear-1")) == 3


def test_a_deadline_does_not_start_over(app: durably.App, clock: FakeClock) -> None:
    @app.workflow(deadline="3h")
    async def patient(n: int) -> int:
        await durably.sleep("1h")
        durably.continue_as_new(n + 1)

    app.start("patient", 0, id="dl-1")
    for _ in range(4):
        app.run_until_idle()
        clock.advance(timedelta(minutes=61))
    app.run_until_idle()
    run = app.client.get("dl-1")
    assert run.status is RunStatus.TIMED_OUT
    assert (
        generation(app.client.history("dl-1")) == 3
    )  # the third generation met the first's deadline


def test_a_child_that_continues_as_new_ends_once_for_its_parent(
    app: durably.App, clock: FakeClock
) -> None:
    looping_app(app, [])
    counter = app.registry.workflows["counter"]

    @app.workflow
    async def owner() -> int:
        return await counter(2, 0)  # type: ignore[no-any-return]

    handle = app.start("owner", id="own-1")
    for _ in range(4):
        app.run_until_idle()
        clock.advance(timedelta(hours=2))
    assert handle.result(timeout=0) == 2 + 3 + 4
    assert app.client.get("own-1.0.counter").parent == "own-1"


def test_an_input_that_would_not_round_trip_is_refused_in_the_workflow(app: durably.App) -> None:
    @app.workflow
    async def odd(n: int) -> str:
        try:
            durably.continue_as_new(object())
        except durably.DurablyError as exc:
            return str(exc)
        return "continued"

    handle = app.start("odd", 1, id="odd-1")
    app.run_until_idle()
    assert str(handle.result(timeout=0)).startswith("durably.continue_as_new(): ")
    assert generation(app.client.history("odd-1")) == 1


def test_each_generation_gets_its_own_step_keys_and_child_ids(app: durably.App) -> None:
    """A monthly loop charges each month: each generation's step must not carry the last
    one's idempotency key (a payment API would answer with last month's charge), nor its
    child the last one's id (it would find last month's child, ended)."""
    keys: list[str] = []

    @app.step
    async def charge(month: int) -> str:
        keys.append(durably.idempotency_key())
        return f"charged {month}"

    @app.workflow
    async def invoice(month: int) -> str:
        return f"invoice {month}"

    @app.workflow
    async def billing(month: int) -> list[str]:
        charged = await charge(month)
        invoiced = await invoice(month)
        if month < 3:
            durably.continue_as_new(month + 1)
        return [charged, invoiced]

    handle = app.start(billing, 1, id="bill")
    app.run_until_idle()
    assert handle.result(timeout=0) == ["charged 3", "invoice 3"]
    assert keys == ["bill:0:charge", "bill@2:0:charge", "bill@3:0:charge"]
    children = sorted(run.id for run in app.client.runs(workflow="invoice").runs)
    assert children == ["bill.1.invoice", "bill@2.1.invoice", "bill@3.1.invoice"]
    assert [app.handle(c).result(timeout=0) for c in children] == [
        "invoice 1",
        "invoice 2",
        "invoice 3",
    ]

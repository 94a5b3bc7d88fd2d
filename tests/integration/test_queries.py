"""Queries on both stores (durably.query): a run's state, asked from outside, is rebuilt by
replaying its history against the app's code, with no step body run and nothing written to
the store; and each way a query can go wrong says what to do."""

from __future__ import annotations

import asyncio
import threading

import pytest

import durably
from durably import (
    ConfigError,
    NonDeterminismError,
    NotInWorkflow,
    PayloadError,
    QueryFailed,
    QueryRefused,
    RunHandle,
    RunNotFound,
    UnknownQuery,
    UnknownWorkflow,
    WorkflowFailed,
)
from durably.client.client import Client
from durably.testing import FakeClock

from .query_app import define

ITEMS = [{"sku": 1, "price": 3}, {"sku": 2, "price": 4}]


def snapshot(app: durably.App, run_id: str) -> tuple[object, object]:
    """The run's record and its whole history, as the store holds them."""
    return app.client.get(run_id), app.client.history(run_id)


def test_a_waiting_run_answers_from_its_completed_steps_and_later_from_more(
    app: durably.App,
) -> None:
    ran: list[str] = []
    define(app, ran)
    handle = app.start("order", ITEMS, id="o-1")
    app.run_until_idle()
    assert ran == ["price 1", "price 2"]
    assert handle.query("total") == 7
    assert handle.query("lines") == [3, 4]
    assert ran == ["price 1", "price 2"]  # the queries ran no step body

    app.client.signal("o-1", "add", {"sku": 3, "price": 10})
    app.run_until_idle()
    assert ran == ["price 1", "price 2", "price 3"]
    assert handle.query("total") == 17
    assert handle.query("lines", 2) == [10]
    assert ran == ["price 1", "price 2", "price 3"]


def test_a_finished_run_answers_from_its_end(app: durably.App) -> None:
    ran: list[str] = []
    define(app, ran)
    handle = app.start("order", ITEMS, id="o-1")
    app.run_until_idle()
    app.client.signal("o-1", "add", {"sku": 3, "price": 10})
    app.client.signal("o-1", "add", None)
    app.run_until_idle()
    assert handle.result() == {"total": 17}
    before = snapshot(app, "o-1")
    assert handle.query("total") == 17
    assert handle.query("lines", 1) == [4, 10]
    assert snapshot(app, "o-1") == before
    assert ran == ["price 1", "price 2", "price 3"]


def test_a_query_never_changes_the_run(app: durably.App) -> None:
    define(app, [])
    app.start("order", ITEMS, id="o-1")
    app.run_until_idle()
    before = snapshot(app, "o-1")
    for _ in range(3):
        assert app.client.ask("o-1", "total").text == "7"
    with pytest.raises(UnknownQuery):
        app.client.ask("o-1", "missing")
    assert snapshot(app, "o-1") == before


def test_the_async_form_answers_too(app: durably.App) -> None:
    define(app, [])
    handle = app.start("order", ITEMS, id="o-1")
    app.run_until_idle()
    assert asyncio.run(handle.query_async("lines", 1, timeout="10s")) == [4]


def test_a_handler_added_later_answers_for_a_run_started_without_it(
    app: durably.App, other_app: durably.App
) -> None:
    """Registering a handler records nothing: the run in flight follows the new code, which
    answers its queries and then finishes it."""
    define(app, [], queries=False)
    app.start("order", ITEMS, id="o-1")
    app.run_until_idle()
    with pytest.raises(UnknownQuery, match="registered by then: none"):
        app.client.ask("o-1", "total")
    ran: list[str] = []
    define(other_app, ran)
    assert RunHandle(other_app.client, "o-1").query("total") == 7
    other_app.client.signal("o-1", "add", None)
    other_app.run_until_idle()
    assert other_app.client.get("o-1").status is durably.RunStatus.COMPLETED
    assert ran == []  # its steps were done: replayed, not run again


def test_a_sync_workflow_answers(app: durably.App) -> None:
    @app.step
    def count(n: int) -> int:
        return n

    @app.workflow
    def counting(limit: int) -> int:
        done: list[int] = []

        @durably.query
        def progress() -> dict[str, int]:
            return {"done": len(done), "of": limit}

        for n in range(limit):
            done.append(count(n))
        durably.wait_for_signal("go")
        return len(done)

    handle = app.start(counting, 3)
    app.run_until_idle()
    assert handle.query("progress") == {"done": 3, "of": 3}


# -- what goes wrong, said clearly --------------------------------------------------------


@pytest.fixture
def odd(app: durably.App) -> list[str]:
    """A run of "odd", waiting for the signal "go", whose handlers misbehave in every way;
    the handler "late" is registered only after that signal."""
    ran: list[str] = []

    @app.step
    async def work(n: int) -> int:
        ran.append(f"work {n}")
        return n

    @app.workflow(name="odd", version="1")
    async def odd() -> None:
        @durably.query
        def broken() -> int:
            raise ValueError("no total yet")

        @durably.query
        def acting() -> object:
            return work(5)

        @durably.query
        def sleeping() -> None:
            durably.sleep("1s")

        @durably.query
        def unstorable():  # type: ignore[no-untyped-def]
            return {1, 2}  # a set comes back from JSON as a list

        await work(1)
        await durably.wait_for_signal("go")

        @durably.query
        def late() -> str:
            return "here"

        await durably.wait_for_signal("end")

    app.start("odd", id="odd-1")
    app.run_until_idle()
    return ran


def test_an_unknown_run_is_refused(app: durably.App) -> None:
    define(app, [])
    with pytest.raises(RunNotFound, match="no run has the id 'nope'"):
        RunHandle(app.client, "nope").query("total")


def test_a_run_of_a_workflow_this_app_lacks_is_refused(
    app: durably.App, other_app: durably.App
) -> None:
    define(app, [])
    app.start("order", ITEMS, id="o-1")
    with pytest.raises(UnknownWorkflow, match="no workflow named 'order'"):
        RunHandle(other_app.client, "o-1").query("total")


def test_a_query_asked_too_early_names_the_handlers_there_are(
    app: durably.App, odd: list[str]
) -> None:
    with pytest.raises(UnknownQuery) as caught:
        app.client.ask("odd-1", "late")
    assert "no query handler named 'late'" in str(caught.value)
    assert "acting, broken, sleeping, unstorable" in str(caught.value)
    app.client.signal("odd-1", "go", None)
    app.run_until_idle()
    assert RunHandle(app.client, "odd-1").query("late") == "here"


def test_a_handler_that_raises_gives_its_error(app: durably.App, odd: list[str]) -> None:
    with pytest.raises(QueryFailed, match="query 'broken' raised ValueError: no total yet") as c:
        app.client.ask("odd-1", "broken")
    assert (c.value.error_class, c.value.message) == ("ValueError", "no total yet")


def test_a_handler_that_acts_is_refused(app: durably.App, odd: list[str]) -> None:
    before = snapshot(app, "odd-1")
    with pytest.raises(QueryRefused, match="called the step 'work'"):
        app.client.ask("odd-1", "acting")
    with pytest.raises(QueryRefused, match=r"called durably.sleep\(\)"):
        app.client.ask("odd-1", "sleeping")
    assert odd == ["work 1"]  # neither the step nor anything else ran
    assert snapshot(app, "odd-1") == before


def test_an_answer_that_would_not_come_back_from_json_is_refused(
    app: durably.App, odd: list[str]
) -> None:
    with pytest.raises(PayloadError, match="the answer of query 'unstorable'"):
        app.client.ask("odd-1", "unstorable")


def test_arguments_that_do_not_fit_are_refused(app: durably.App) -> None:
    define(app, [])
    handle = app.start("order", ITEMS, id="o-1")
    app.run_until_idle()
    with pytest.raises(PayloadError, match="query 'lines'"):
        handle.query("lines", "two")
    with pytest.raises(PayloadError, match="does not fit its parameters"):
        handle.query("lines", 1, 2)
    with pytest.raises(PayloadError, match="must be a JSON list"):
        app.client.ask("o-1", "lines", '{"first": 1}')
    with pytest.raises(PayloadError, match="not JSON"):
        app.client.ask("o-1", "lines", "[1")
    with pytest.raises(PayloadError, match="the arguments of query 'lines'"):
        handle.query("lines", {1, 2})


def test_code_that_differs_from_the_runs_names_both_calls(
    app: durably.App, other_app: durably.App
) -> None:
    define(app, [])
    app.start("order", ITEMS, id="o-1")
    app.run_until_idle()
    weighed: list[str] = []

    @other_app.step
    async def weigh(item: dict[str, int]) -> int:
        weighed.append("weigh")
        return 0

    @other_app.workflow(name="order", version="1")
    async def order(items: list[dict[str, int]], gate: str = "") -> int:
        @durably.query
        def total() -> int:
            return 0

        await weigh(items[0])
        return 0

    with pytest.raises(NonDeterminismError) as caught:
        RunHandle(other_app.client, "o-1").query("total")
    message = str(caught.value)
    assert "the code answering the query differs from the code of run 'o-1'" in message
    assert "'price'" in message
    assert "'weigh'" in message
    assert weighed == []


def test_a_run_on_a_version_this_code_does_not_run_is_refused(
    app: durably.App, other_app: durably.App, store_url: str, clock: FakeClock
) -> None:
    define(app, [])
    app.start("order", ITEMS, id="o-1")
    app.run_until_idle()
    define(other_app, [], version="2")
    with pytest.raises(UnknownWorkflow, match=r"pinned to version 1 .* runs versions 2"):
        RunHandle(other_app.client, "o-1").query("total")
    declared = durably.App(store_url, clock=clock)
    try:
        define(declared, [], version="2", versions=("1",))
        assert RunHandle(declared.client, "o-1").query("total") == 7
    finally:
        declared.close()


def test_a_replay_past_its_timeout_is_abandoned(app: durably.App) -> None:
    blocking, released = threading.Event(), threading.Event()

    @app.workflow(name="slow", version="1")
    async def slow() -> None:
        @durably.query
        def ready() -> bool:
            return True

        if blocking.is_set():  # only in the query's replay: the test holds it there
            released.wait(30)
        await durably.wait_for_signal("go")

    handle = app.start("slow")
    app.run_until_idle()
    blocking.set()
    try:
        with pytest.raises(TimeoutError, match=r"got no answer within 0:00:00.2.*abandoned"):
            handle.query("ready", timeout="200ms")
    finally:
        released.set()
    blocking.clear()
    assert handle.query("ready", timeout="10s") is True


def test_registering_outside_a_workflow_or_an_async_handler_is_refused(
    app: durably.App,
) -> None:
    with pytest.raises(NotInWorkflow, match=r"durably\.query"):
        durably.query(lambda: 1)

    @app.workflow
    async def awaiting() -> None:
        @durably.query
        async def total() -> int:
            return 0

    handle = app.start(awaiting)
    app.run_until_idle()
    with pytest.raises(WorkflowFailed) as caught:
        handle.result()
    assert caught.value.error_class.endswith("ConfigError")
    assert "must be a plain function" in str(caught.value)


def test_a_client_without_the_apps_code_says_how_to_get_it(app: durably.App) -> None:
    define(app, [])
    app.start("order", ITEMS, id="o-1")
    with pytest.raises(ConfigError, match="pass --app module:app"):
        Client(app.store).ask("o-1", "total")

"""Updates (durably.update), end to end on both stores, with a real worker in a thread: the
caller gets the handler's value; a validator or a handler that raises refuses the update and
the caller hears why; the same update id is applied once; updates and signals are taken in
the order sent; a worker that picks the run up later rebuilds what updates changed by replay;
a query sees it too."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

import durably
from durably import RunStatus, UpdateRefused
from durably.core.history import EventKind
from durably.core.updates import Answer, is_answer_key
from durably.errors import DurablyError, PayloadError

from .update_app import define

WAIT = 20.0


class Serving:
    """A worker of `app` in a thread of its own, until `stop()`."""

    def __init__(self, app: durably.App) -> None:
        self.worker = app.worker(poll="50ms")
        self.thread = threading.Thread(target=lambda: asyncio.run(self.worker.serve()))
        self.thread.start()

    def stop(self) -> None:
        self.worker.stop()
        self.thread.join(WAIT)


@pytest.fixture
def shop(store_url: str) -> Iterator[durably.App]:
    """The cart app on the real clock (a worker in a thread serves it), closed after."""
    app = define(durably.App(store_url))
    yield app
    app.close()


@pytest.fixture
def worker(shop: durably.App) -> Iterator[Serving]:
    serving = Serving(shop)
    yield serving
    serving.stop()


def _answers(app: durably.App, run_id: str) -> list[Answer]:
    return [
        Answer.from_json(event.data or "{}")
        for event in app.client.history(run_id)
        if event.kind is EventKind.EVENT_SET and event.name and is_answer_key(event.name)
    ]


def test_an_update_changes_the_run_and_answers_the_caller(
    shop: durably.App, worker: Serving
) -> None:
    handle = shop.start("cart", [10, 20], id="c-1")

    assert handle.update("add_item", 5, timeout=WAIT) == 35
    assert handle.update("add_item", 7, timeout=WAIT) == 42
    assert handle.query("total") == 42  # a query's replay applies the updates again

    shop.client.signal("c-1", "checkout")
    assert handle.result(timeout=WAIT) == "charged 42"
    answers = _answers(shop, "c-1")
    assert [a.value for a in answers] == ["35", "42"]
    assert len({a.at for a in answers}) == 1  # both applied at the wait for "checkout"
    assert handle.events() == {}  # answers are the callers', not the run's own events


def test_a_validator_or_a_handler_that_raises_refuses_the_update(
    shop: durably.App, worker: Serving
) -> None:
    handle = shop.start("cart", [], id="c-2")

    with pytest.raises(UpdateRefused, match="refused by its validator: ValueError: a price") as no:
        handle.update("add_item", -1, timeout=WAIT)
    assert (no.value.by, no.value.error_class) == ("validator", "ValueError")
    with pytest.raises(UpdateRefused, match="refused by its handler: IndexError") as failed:
        handle.update("remove_last", timeout=WAIT)
    assert failed.value.by == "handler"
    with pytest.raises(UpdateRefused, match=r"refused by its validator: .*PayloadError"):
        handle.update("add_item", "ten", timeout=WAIT)  # does not fit the handler's int
    assert handle.update("add_item", 3, timeout=WAIT) == 3  # the run took none of them
    with pytest.raises(PayloadError, match="the arguments of update 'add_item'"):
        handle.update("add_item", {1, 2}, timeout=WAIT)  # not JSON: refused before sending

    shop.client.signal("c-2", "checkout")
    assert handle.result(timeout=WAIT) == "charged 3"


def test_the_same_update_id_is_applied_once_and_answered_the_same(
    shop: durably.App, worker: Serving
) -> None:
    handle = shop.start("cart", [1], id="c-3")

    assert handle.update("add_item", 4, update_id="line-7", timeout=WAIT) == 5
    assert handle.update("add_item", 4, update_id="line-7", timeout=WAIT) == 5
    shop.client.signal("c-3", "checkout")
    assert handle.result(timeout=WAIT) == "charged 5"
    # after the run's end too: its answer is kept
    assert handle.update("add_item", 4, update_id="line-7") == 5
    with pytest.raises(DurablyError, match=r"has finished .* cannot reach it"):
        handle.update("add_item", 4, update_id="line-8")
    assert len(_answers(shop, "c-3")) == 1


def test_updates_and_signals_are_taken_in_the_order_sent(shop: durably.App) -> None:
    handle = shop.start("cart", [2], id="c-4")
    shop.run_until_idle()  # waits for "checkout"
    answered: list[int] = []
    caller = threading.Thread(
        target=lambda: answered.append(handle.update("add_item", 8, timeout=WAIT))
    )
    caller.start()
    _wait_for_inbox(shop, "c-4")
    shop.client.signal("c-4", "checkout")  # sent after the update
    shop.run_until_idle()
    caller.join(WAIT)

    assert answered == [10]
    assert handle.result(timeout=0) == "charged 10"


def test_a_worker_that_picks_the_run_up_later_rebuilds_what_updates_changed(
    shop: durably.App, worker: Serving, store_url: str
) -> None:
    handle = shop.start("cart", [1], id="c-5")
    assert handle.update("add_item", 2, timeout=WAIT) == 3
    worker.stop()

    later = define(durably.App(store_url))  # another process: nothing of the first in memory
    try:
        later.client.signal("c-5", "checkout")
        later.run_until_idle()  # replays: the update is applied again at its place
        assert later.client.get("c-5").status is RunStatus.COMPLETED
        assert durably.RunHandle(later.client, "c-5").result(timeout=0) == "charged 3"
    finally:
        later.close()
    assert len(_answers(shop, "c-5")) == 1


def test_an_update_that_comes_during_a_step_is_applied_when_its_handler_is_there(
    shop: durably.App, worker: Serving
) -> None:
    handle = shop.start("slow_cart", 0.3, id="c-6")  # prepares for 0.3 s, then takes items

    assert handle.update("add_item", 9, timeout=WAIT) == 9
    shop.client.signal("c-6", "checkout")
    assert handle.result(timeout=WAIT) == "charged 9"


def test_an_update_no_handler_takes_is_refused_when_the_run_ends(
    shop: durably.App, worker: Serving
) -> None:
    handle = shop.start("cart", [1], id="c-7")
    with pytest.raises(TimeoutError, match=r"not answered in time .* ask again with update_id"):
        handle.update("rename", "x", timeout=0.3, update_id="r-1")
    shop.client.signal("c-7", "checkout")
    assert handle.result(timeout=WAIT) == "charged 1"
    with pytest.raises(UpdateRefused, match="ended before it applied update 'rename'") as ended:
        handle.update("rename", "x", update_id="r-1")
    assert ended.value.by == "run"


def test_async_callers_are_answered_too(shop: durably.App, worker: Serving) -> None:
    handle = shop.start("cart", [], id="c-8")

    async def add() -> list[int]:
        return [await handle.update_async("add_item", n, timeout=WAIT) for n in (1, 2)]

    assert asyncio.run(add()) == [1, 3]


def test_an_update_answered_before_continue_as_new_is_not_applied_again(
    shop: durably.App, worker: Serving
) -> None:
    handle = shop.start("tally", 0, 2, id="t-1")
    assert handle.update("add", 5, update_id="a-1", timeout=WAIT) == 5
    shop.client.signal("t-1", "next")  # continues as new with 5
    assert handle.update("add", 1, timeout=WAIT) == 6
    assert handle.update("add", 5, update_id="a-1") == 5  # the first answer is kept
    shop.client.signal("t-1", "next")
    assert handle.result(timeout=WAIT) == 6


def test_registering_an_update_outside_a_workflow_is_refused() -> None:
    with pytest.raises(durably.NotInWorkflow, match="update"):

        @durably.update
        def add_item(price: int) -> int:
            return price


def _wait_for_inbox(app: durably.App, run_id: str) -> None:
    """Until the run has a message waiting in its inbox (the update is sent)."""
    for _ in range(1_000):
        if app.store.mail([run_id]).get(run_id):
            return
        threading.Event().wait(0.01)
    pytest.fail("the update never reached the run's inbox")

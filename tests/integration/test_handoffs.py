"""Runs handed to a worker at their start (durably.runtime.handoffs), end to end on both
stores with a real worker serving in a thread: a run started beside it is claimed in its
start's own commit and run at once; a run a claim must weigh (a limited queue, a later due
time), a start that finds its run, and a worker with no free slot or stopping take the usual
way; and however many threads start at once, the worker never holds more runs than its
concurrency."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator

import pytest

import durably
from durably.core.history import Event, EventKind
from durably.core.status import RunStatus
from durably.runtime.handoffs import Taker

WAIT = 20.0  # seconds anything here may take before the test calls it stuck


class Serving:
    """A worker of `app` in a thread of its own, serving once constructed, until `stop()`. It
    polls no more than once an hour unless told: a start that comes while a claim is under
    way goes the usual way (it does not wait for the claim), so a test that asserts a run was
    handed over must leave no poll to chance."""

    def __init__(self, app: durably.App, *, concurrency: int = 8, poll: str = "1h") -> None:
        self.worker = app.worker(concurrency=concurrency, poll=poll)
        self.thread = threading.Thread(target=lambda: asyncio.run(self.worker.serve()))
        self.thread.start()
        assert self.worker.serving.wait(WAIT), "the worker did not begin serving"

    def stop(self) -> None:
        self.worker.stop()
        self.thread.join(WAIT)
        assert not self.thread.is_alive()


class Gate:
    """Holds the runs of `hold` in their step until opened; counts how many are in it."""

    def __init__(self) -> None:
        self.opened = threading.Event()
        self.inside = 0
        self.most = 0
        self.changed = threading.Condition()

    def pass_through(self) -> None:
        with self.changed:
            self.inside += 1
            self.most = max(self.most, self.inside)
            self.changed.notify_all()
        assert self.opened.wait(WAIT)
        with self.changed:
            self.inside -= 1

    def wait_for(self, count: int) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: self.inside >= count, WAIT)


@pytest.fixture
def gate() -> Iterator[Gate]:
    held = Gate()
    yield held
    held.opened.set()  # never leave a worker's thread waiting


@pytest.fixture
def app(store_url: str, gate: Gate) -> Iterator[durably.App]:
    made = durably.App(store_url)
    made.queue("one_at_a_time", concurrency=1)

    @made.step
    def add(a: int, b: int) -> int:
        return a + b

    @made.step
    def wait_at_the_gate() -> None:
        gate.pass_through()

    @made.workflow
    def total(x: int) -> int:
        return add(x, 1) + add(x, 2)

    @made.workflow(queue="one_at_a_time")
    def queued(x: int) -> int:
        return add(x, 1)

    @made.workflow
    def hold() -> str:
        wait_at_the_gate()
        return "through"

    yield made
    made.close()


def _claim_event(app: durably.App, run_id: str) -> tuple[Event, Event]:
    started, claimed = app.client.history(run_id)[:2]
    assert (started.kind, claimed.kind) == (EventKind.RUN_STARTED, EventKind.CLAIMED)
    return started, claimed


def _handed_over(app: durably.App, run_id: str) -> bool:
    """Whether the run was claimed in its start's commit: its claim bears its start's time
    (a claim that followed a wake-up reads the clock again, later)."""
    started, claimed = _claim_event(app, run_id)
    return claimed.at == started.at


def test_a_run_started_beside_a_serving_worker_is_claimed_in_its_start_commit(
    app: durably.App,
) -> None:
    serving = Serving(app)
    try:
        handles = [app.start("total", x) for x in range(3)]
        assert [handle.result(timeout=WAIT) for handle in handles] == [3, 5, 7]
    finally:
        serving.stop()

    for handle in handles:
        assert _handed_over(app, handle.id)
        _, claimed = _claim_event(app, handle.id)
        assert claimed.data is not None
        assert f'"owner": "{serving.worker.name}"' in claimed.data
        kinds = [event.kind for event in app.client.history(handle.id)]
        assert kinds.count(EventKind.CLAIMED) == 1  # claimed once: by its start
        assert kinds[-1] == EventKind.RUN_COMPLETED


def test_runs_a_claim_must_weigh_are_claimed_the_usual_way(app: durably.App) -> None:
    serving = Serving(app, poll="50ms")  # a run due later is found by a poll
    try:
        limited = app.start("queued", 1)  # its queue's limit is counted by claims
        later = app.start("total", 1, delay="10ms")  # due later: a pending run until then
        assert limited.result(timeout=WAIT) == 2
        assert later.result(timeout=WAIT) == 5
    finally:
        serving.stop()

    assert not _handed_over(app, limited.id)
    assert not _handed_over(app, later.id)


def test_a_start_that_finds_its_run_hands_nothing_over_and_frees_its_slot(
    app: durably.App, gate: Gate
) -> None:
    serving = Serving(app, concurrency=2)
    try:
        first = app.start("hold", id="order-1")  # holds one slot until the gate opens
        gate.wait_for(1)
        again = app.client.start("hold", id="order-1")
        assert again.created is False
        later = app.start("total", 5)  # the other slot is free again: handed over
        assert later.result(timeout=WAIT) == 13
        gate.opened.set()
        assert first.result(timeout=WAIT) == "through"
    finally:
        serving.stop()

    assert _handed_over(app, first.id)
    assert _handed_over(app, later.id)
    assert [e.kind for e in app.client.history("order-1")].count(EventKind.CLAIMED) == 1


def test_starts_from_many_threads_never_give_a_worker_more_runs_than_its_concurrency(
    app: durably.App, gate: Gate
) -> None:
    serving = Serving(app, concurrency=2)
    started: list[str] = []
    try:
        barrier = threading.Barrier(8)

        def start() -> None:
            barrier.wait(WAIT)
            started.append(app.start("hold").id)

        threads = [threading.Thread(target=start) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(WAIT)
        gate.wait_for(2)

        # Every start has returned: the store holds what they wrote. Two runs are leased
        # (to the worker, handed over or claimed), six wait their turn.
        statuses = [app.client.get(run_id).status for run_id in started]
        assert statuses.count(RunStatus.RUNNING) == 2
        assert statuses.count(RunStatus.PENDING) == 6

        gate.opened.set()
        for run_id in started:
            assert app.handle(run_id).result(timeout=WAIT) == "through"
    finally:
        serving.stop()
    assert gate.most == 2


def test_a_worker_that_stopped_takes_no_start(app: durably.App) -> None:
    serving = Serving(app)
    serving.stop()

    handle = app.start("total", 1)

    run = app.client.get(handle.id)
    assert (run.status, run.lease_owner) == (RunStatus.PENDING, None)
    assert app.run_until_idle() == 1
    assert handle.result(timeout=WAIT) == 5
    assert not _handed_over(app, handle.id)


def test_a_run_on_its_way_when_the_worker_stops_is_run_not_left_under_its_lease(
    app: durably.App,
) -> None:
    """A start that asked before the stop, and whose run arrives only once the worker has
    withdrawn its offer: the worker waits for that run and finishes it within its grace,
    like the runs it held, instead of leaving it leased to a worker that is gone until the
    lease runs out."""
    withdrawn = threading.Event()
    offer = app.offer

    def offer_and_tell(taker: Taker) -> Callable[[], None]:
        withdraw = offer(taker)

        def withdraw_and_tell() -> None:
            withdraw()
            withdrawn.set()

        return withdraw_and_tell

    app.offer = offer_and_tell  # type: ignore[method-assign]
    serving = Serving(app)
    worker = serving.worker
    run = app.client._run_of(durably.Start("total", (6,)), None)  # what app.start would write
    handoffs = app.client._takers._takers[0]
    assert handoffs.reserve(run)  # the start asks, before the stop
    made = app.store.create_claimed(run, handoffs.name, now=app.clock.now(), lease=worker.lease)
    assert made is not None
    worker.stop()
    assert withdrawn.wait(WAIT)  # the worker is shutting down
    handoffs.hand(made[1])  # and only now the run arrives
    serving.thread.join(WAIT)

    assert app.client.get(run.id).status == RunStatus.COMPLETED
    assert app.handle(run.id).result(timeout=WAIT) == 15
    assert _handed_over(app, run.id)

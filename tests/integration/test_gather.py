"""durably.gather on both stores: steps run at once and take their places in the history in
call order, so a run that stops half-way (a retry's backoff) replays them where they were
whatever order they finished in; a branch that fails for good cancels the others (or not),
completed branches are undone in reverse order of completion, and a branch of several steps,
whose places would depend on timing, is refused."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from datetime import timedelta

import pytest

import durably
from durably import Retry, RunStatus
from durably.core.history import EventKind
from durably.testing import FakeClock

from .conftest import step_events


class Turns:
    """Branches in flight at once that finish in the order a test sets, not by timing: each
    body takes its turn as it starts, and goes on once every branch in `everyone` has started
    and those before it in `order` are `done`. A branch that is not in `order` waits for
    nobody."""

    def __init__(self, *order: str, everyone: Iterable[str] = ()) -> None:
        self.order = order
        self.everyone = set(order) | set(everyone)
        self.started: set[str] = set()
        self.finished: set[str] = set()
        self._moved: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None

    def arrive(self, name: str) -> None:
        """The branch `name` started (and takes no turn)."""
        self.started.add(name)
        self._move()

    async def take(self, name: str) -> None:
        self.arrive(name)
        before = set(self.order[: self.order.index(name)] if name in self.order else ())
        await self._until(lambda: self.everyone <= self.started and before <= self.finished)

    def done(self, name: str) -> None:
        self.finished.add(name)
        self._move()

    def done_when_over(self, name: str) -> None:
        """In a body about to fail: `name` is done once its branch's task is over, after the
        gather heard of the failure (its callback on the task came first)."""
        task = asyncio.current_task()
        assert task is not None
        task.add_done_callback(lambda _: self.done(name))

    def _move(self) -> None:
        if self._moved is not None:
            self._moved[1].set()
            self._moved = None

    async def _until(self, ready: Callable[[], bool]) -> None:
        loop = asyncio.get_running_loop()  # each drain runs its own loop
        while not ready():
            if self._moved is None or self._moved[0] is not loop:
                self._moved = (loop, asyncio.Event())
            await self._moved[1].wait()


def fan_app(
    app: durably.App, finished: list[str], undone: list[str], flaky: set[str], turns: Turns
) -> None:
    """Branches finish in the order `turns` sets (not the call order); "slow" never does."""

    @app.step(retry=Retry(attempts=3, initial="1s", jitter="none"))
    async def work(name: str) -> str:
        if name == "slow":
            turns.arrive(name)
            await asyncio.Event().wait()  # only a cancel ends it
        await turns.take(name)
        turns.done(name)
        if name in flaky:
            flaky.discard(name)
            raise ConnectionError(f"{name}: reset")
        finished.append(name)
        return name.upper()

    @work.compensation
    async def unwork(name: str, result: str) -> None:
        undone.append(name)

    @app.step
    async def refuse(name: str) -> str:
        await turns.take(name)
        turns.done_when_over(name)
        raise durably.Terminal(f"{name} is out of stock")

    @app.workflow
    async def fan() -> list[str]:
        return await durably.gather(work("a"), work("b"), work("c"))  # type: ignore[no-any-return]

    @app.workflow
    async def fan_fails(cancel: bool, keep: bool) -> list[str]:
        calls = (work("a"), refuse("x"), work("c"), *([work("slow")] if cancel else []))
        results = await durably.gather(*calls, cancel_on_failure=cancel, return_exceptions=keep)
        return [str(result) for result in results]


def test_results_come_in_call_order_and_replay_finds_each_branch_where_it_was(
    app: durably.App, clock: FakeClock
) -> None:
    finished: list[str] = []
    fan_app(app, finished, [], flaky={"a"}, turns=Turns("b", "c", "a"))
    handle = app.start("fan", id="g-1")
    app.run_until_idle()  # b and c complete; a fails once: the run waits for its retry
    assert finished == ["b", "c"]
    assert app.client.get("g-1").status is RunStatus.PENDING
    clock.advance(timedelta(seconds=2))
    app.run_until_idle()  # a replays at #0, b and c are replayed at #1 and #2, not run again

    assert handle.result(timeout=0) == ["A", "B", "C"]
    assert finished == ["b", "c", "a"]
    history = app.client.history("g-1")
    started = [(p, n) for k, p, n, _ in step_events(history) if k == "step_started"]
    assert started == [(0, "work"), (1, "work"), (2, "work"), (0, "work")]
    completed = [e.position for e in history if e.kind is EventKind.STEP_COMPLETED]
    assert completed == [1, 2, 0]  # the order they finished in


def test_a_branch_that_fails_cancels_the_others_and_completed_ones_are_undone_last_first(
    app: durably.App,
) -> None:
    finished: list[str] = []
    undone: list[str] = []
    fan_app(app, finished, undone, flaky=set(), turns=Turns("c", "x", "a", everyone=["slow"]))
    app.start("fan_fails", True, False, id="g-2")
    app.run_until_idle()

    run = app.client.get("g-2")
    assert run.status is RunStatus.FAILED
    assert run.error is not None
    assert "x is out of stock" in run.error.message  # the branch that failed by itself
    failed = {
        e.position: e.data or ""
        for e in app.client.history("g-2")
        if e.kind is EventKind.STEP_FAILED
    }
    assert "Terminal" in failed[1]
    assert "BranchCancelled" in failed[0]  # a
    assert "BranchCancelled" in failed[3]  # slow
    assert finished == ["c"]  # c finished before x failed; a (after x) and slow were cancelled
    # c is undone, and so are slow and a: cut off in flight, they may have taken effect
    # (latest first: c completed after the others started); x failed by itself
    assert undone == ["c", "slow", "a"]


def test_without_cancelling_the_others_finish_and_failures_can_be_returned(
    app: durably.App,
) -> None:
    finished: list[str] = []
    undone: list[str] = []
    fan_app(app, finished, undone, flaky=set(), turns=Turns("c", "x", "a"))
    kept_turns = Turns("x", "a")  # a finishes after x failed: nothing cancelled it

    @app.workflow
    async def kept() -> list[str]:
        results = await durably.gather(work_a(), refuse_x(), return_exceptions=True)
        return [
            type(result).__name__ if isinstance(result, Exception) else result for result in results
        ]

    @app.step
    async def work_a() -> str:
        await kept_turns.take("a")
        return "A"

    @app.step
    async def refuse_x() -> str:
        await kept_turns.take("x")
        kept_turns.done_when_over("x")
        raise durably.Terminal("no")

    app.start("kept", id="g-3")
    app.start("fan_fails", False, False, id="g-4")
    app.run_until_idle()

    assert app.handle("g-3").result(timeout=0) == ["A", "StepFailed"]
    run = app.client.get("g-4")
    assert run.status is RunStatus.FAILED
    assert sorted(finished) == ["a", "c"]  # nothing cancelled: a and c ran to their end
    assert sorted(undone) == ["a", "c"]
    assert undone == sorted(undone, key=lambda name: -finished.index(name))  # last first


def test_a_branch_of_several_steps_is_refused_and_the_run_parked(app: durably.App) -> None:
    @app.step
    async def part(n: int) -> int:
        return n

    @app.workflow
    async def composite() -> list[int]:
        async def two() -> int:
            return await part(1) + await part(2)  # type: ignore[no-any-return]

        return list(await asyncio.gather(two(), part(3)))

    app.start("composite", id="g-5")
    app.run_until_idle()
    run = app.client.get("g-5")
    assert run.status is RunStatus.NEEDS_ATTENTION
    assert run.error is not None
    assert run.error.error_class == "durably.errors.UnsafeConcurrency"
    assert "make the branch a workflow of its own" in run.error.message


def test_a_renamed_branch_is_caught_on_replay(
    app: durably.App, other_app: durably.App, clock: FakeClock
) -> None:
    flaky = {"b"}

    @app.step(retry=Retry(attempts=3, initial="1s", jitter="none"))
    async def pack(name: str) -> str:
        if name in flaky:
            flaky.discard(name)
            raise ConnectionError("reset")
        return name

    @app.workflow(version="1")  # the new deploy keeps the version: its runs are its to run
    async def ship() -> list[str]:
        return await durably.gather(pack("a"), pack("b"))  # type: ignore[no-any-return]

    app.start("ship", id="g-6")
    app.run_until_idle()  # a done, b waits for its retry

    @other_app.step
    async def pack(name: str) -> str:  # noqa: F811 (the new deploy's code)
        return name

    @other_app.step
    async def wrap(name: str) -> str:
        return name

    @other_app.workflow(version="1")
    async def ship() -> list[str]:  # noqa: F811
        return await durably.gather(pack("a"), wrap("b"))  # type: ignore[no-any-return]

    clock.advance(timedelta(seconds=2))
    other_app.run_until_idle()
    run = other_app.client.get("g-6")
    assert run.status is RunStatus.NEEDS_ATTENTION
    assert run.error is not None
    assert "step #1 is recorded as 'pack' but the workflow now calls 'wrap'" in run.error.message


def test_a_thousand_branches_run_within_the_limit(app: durably.App) -> None:
    running = 0
    most = 0

    @app.step
    async def square(n: int) -> int:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0)
        running -= 1
        return n * n

    @app.workflow
    async def squares(n: int) -> int:
        return sum(await durably.gather(*(square(i) for i in range(n)), limit=50))

    handle = app.start("squares", 1000, id="g-7")
    app.run_until_idle()
    assert handle.result(timeout=0) == sum(i * i for i in range(1000))
    assert 1 < most <= 50
    positions = [e.position for e in app.client.history("g-7") if e.kind is EventKind.STEP_STARTED]
    assert positions == list(range(1000))  # call order


def test_gather_is_for_async_workflows(app: durably.App) -> None:
    @app.step
    def one() -> int:
        return 1

    @app.workflow
    def plain() -> list[int]:
        return asyncio.run(durably.gather(one()))  # type: ignore[arg-type]

    app.start("plain", id="g-8")
    app.run_until_idle()
    run = app.client.get("g-8")
    assert run.error is not None
    assert "durably.gather() runs calls of an async workflow" in run.error.message


@pytest.mark.parametrize("limit", [0, -1])
def test_a_limit_below_one_is_refused(app: durably.App, limit: int) -> None:
    @app.step
    async def one() -> int:
        return 1

    @app.workflow
    async def bad() -> list[int]:
        return await durably.gather(one(), limit=limit)  # type: ignore[no-any-return]

    app.start("bad", id="g-9")
    app.run_until_idle()
    run = app.client.get("g-9")
    assert run.error is not None
    assert "limit=...) must be at least 1" in run.error.message

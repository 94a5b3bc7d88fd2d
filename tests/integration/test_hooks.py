"""Engine hooks: what a worker tells an observer as it works, on both real stores."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest

import durably
from durably import Retry, Terminal
from durably.runtime.hooks import HookChain, Hooks, chain
from durably.testing import FakeClock, Faults

from .conftest import DEAD_LEASE, dead_worker


class Recorder(Hooks):
    """Every call, in order, as plain tuples."""

    def __init__(self) -> None:
        self.calls: list[tuple[object, ...]] = []

    def claimed(self, run_id: str, workflow: str, *, takeover: bool) -> None:
        self.calls.append(("claimed", run_id, workflow, takeover))

    def attempt_started(self, run_id: str, step: str, attempt: int, dependency: str | None) -> None:
        self.calls.append(("started", run_id, step, attempt, dependency))

    def attempt_finished(
        self,
        run_id: str,
        step: str,
        attempt: int,
        dependency: str | None,
        error: BaseException | None,
    ) -> None:
        outcome = None if error is None else type(error).__name__
        self.calls.append(("finished", run_id, step, attempt, dependency, outcome))

    def before_commit(self, checkpoints: int) -> None:
        self.calls.append(("before_commit", checkpoints))

    def checkpoint_committed(self, checkpoints: int) -> None:
        self.calls.append(("committed", checkpoints))

    def run_finished(self, run_id: str, workflow: str, status: str) -> None:
        self.calls.append(("run_finished", run_id, workflow, status))

    def named(self, name: str) -> list[tuple[object, ...]]:
        return [call for call in self.calls if call[0] == name]


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def hooked(store_url: str, clock: FakeClock, recorder: Recorder) -> Iterator[durably.App]:
    app = durably.App(store_url, clock=clock, hooks=recorder, seed=1)
    yield app
    app.close()


def test_a_run_is_told_from_claim_to_end(hooked: durably.App, recorder: Recorder) -> None:
    @hooked.step(dependency="payments")
    async def charge(amount: int) -> str:
        return f"ch_{amount}"

    @hooked.workflow
    async def pay(amount: int) -> str:
        return await charge(amount)  # type: ignore[no-any-return]

    hooked.start(pay, 5, id="r1")
    hooked.run_until_idle()

    assert recorder.named("claimed") == [("claimed", "r1", "pay", False)]
    assert recorder.named("started") == [("started", "r1", "charge", 1, "payments")]
    assert recorder.named("finished") == [("finished", "r1", "charge", 1, "payments", None)]
    assert recorder.named("run_finished") == [("run_finished", "r1", "pay", "completed")]
    committed = sum(int(str(call[1])) for call in recorder.named("committed"))
    assert committed == 2  # the step's start; its outcome together with the run's end
    assert len(recorder.named("before_commit")) == len(recorder.named("committed"))
    # the order a metrics exporter relies on
    order = [call[0] for call in recorder.calls if call[0] != "before_commit"]
    assert order.index("claimed") < order.index("started") < order.index("finished")
    assert order.index("finished") < order.index("run_finished")


def test_failed_attempts_and_parked_runs_are_told(
    hooked: durably.App, recorder: Recorder, clock: FakeClock
) -> None:
    calls = 0

    @hooked.step(retry=Retry(attempts=2, initial="1s"))
    async def flaky() -> None:
        nonlocal calls
        calls += 1
        raise ConnectionError("reset")

    @hooked.step
    async def refuse() -> None:
        raise Terminal("card declined")

    @hooked.workflow
    async def retried() -> None:
        await flaky()

    @hooked.workflow
    async def declined() -> None:
        await refuse()

    hooked.start(retried, id="retried")
    hooked.start(declined, id="declined")
    hooked.run_until_idle()
    clock.advance("10s")
    hooked.run_until_idle()

    finished = {(call[1], call[3], call[5]) for call in recorder.named("finished")}
    assert finished == {
        ("retried", 1, "ConnectionError"),
        ("retried", 2, "ConnectionError"),
        ("declined", 1, "Terminal"),
    }
    ends = {call[1]: call[3] for call in recorder.named("run_finished")}
    assert ends == {"retried": "needs_attention", "declined": "failed"}


def test_a_takeover_is_told(
    store_url: str, clock: FakeClock, recorder: Recorder, hooked: durably.App
) -> None:
    @hooked.step
    async def work() -> int:
        return 1

    @hooked.workflow
    async def job() -> int:
        return await work()  # type: ignore[no-any-return]

    hooked.start(job, id="orphan")
    dead_worker(hooked.store, clock, "job", [])
    clock.advance(DEAD_LEASE + timedelta(seconds=1))
    hooked.run_until_idle()

    assert recorder.named("claimed") == [("claimed", "orphan", "job", True)]
    assert hooked.handle("orphan").result(timeout=0) == 1


def test_faults_are_hooks_and_several_hooks_are_called_in_order(
    store_url: str, clock: FakeClock, recorder: Recorder
) -> None:
    faults = Faults().fail("work", times=1, error=ConnectionError("injected"))
    app = durably.App(store_url, clock=clock, hooks=[recorder, faults])

    @app.step(retry=Retry(attempts=3, initial="1s"))
    async def work() -> int:
        return 7

    @app.workflow
    async def job() -> int:
        return await work()  # type: ignore[no-any-return]

    app.start(job, id="j")
    app.run_until_idle()
    clock.advance("10s")
    app.run_until_idle()
    assert app.handle("j").result(timeout=0) == 7
    assert faults.injected == {"fail": 1}
    outcomes = [call[5] for call in recorder.named("finished")]
    assert outcomes == ["ConnectionError", None]  # the recorder saw the injected failure
    app.close()


def test_no_hooks_means_no_observer_at_all() -> None:
    assert chain([]) is None
    assert chain([None]) is None
    single = Recorder()
    assert chain([single, None]) is single
    both = chain([single, Recorder()])
    assert isinstance(both, HookChain)
    assert durably.App("sqlite:///unused.db").settings().hooks is None

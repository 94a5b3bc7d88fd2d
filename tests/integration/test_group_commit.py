"""Group commit: a batch that fails fails every caller waiting on it, a pass of the loop that
goes on for more than a few milliseconds hands over what it gathered before it ends,
checkpoints queued while a commit is under way go together in the one after it, and with two
lanes the next batch leaves while one is in flight, store work besides checkpoints waiting its
turn. On both real stores. (A worker killed in the middle
of a commit: tests/chaos/test_group_commit_crash.py.)"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from datetime import datetime, timedelta

from durably.core.history import Event, EventKind
from durably.runtime.committer import Committer
from durably.stores import Checkpoint, Claim, NewRun, Store
from durably.testing import FakeClock


class _FailingCommits:
    """The real store, except that commits of two or more checkpoints fail: a disk that
    fills up under load."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.failed_batches: list[int] = []

    def commit(self, checkpoints: Sequence[Checkpoint], *, now: datetime) -> list[bool]:
        if len(checkpoints) >= 2:
            self.failed_batches.append(len(checkpoints))
            raise OSError("no space left on device")
        return self._store.commit(checkpoints, now=now)

    def __getattr__(self, name: str) -> object:
        return getattr(self._store, name)


def test_a_failed_batch_fails_every_waiting_caller(store: Store, clock: FakeClock) -> None:
    ids = [f"r{i}" for i in range(6)]
    for run_id in ids:
        store.create_run(NewRun(run_id, "w", "[]"), now=clock.now())
    claims = store.claim("me", ["w"], now=clock.now(), lease=timedelta(seconds=30), limit=10)
    failing = _FailingCommits(store)

    async def commit_all() -> list[bool | BaseException]:
        committer = Committer(failing, clock)  # type: ignore[arg-type]
        committer.start(asyncio.get_running_loop())
        try:
            # Hold the thread on a call so that all six checkpoints land in one batch.
            gate = threading.Event()
            held = asyncio.ensure_future(committer.call(lambda: gate.wait(10)))
            commits = [
                asyncio.ensure_future(committer.commit(_step_checkpoint(claim, clock)))
                for claim in claims
            ]
            await asyncio.sleep(0)  # every commit is queued behind the held call
            gate.set()
            await held
            return await asyncio.gather(*commits, return_exceptions=True)
        finally:
            committer.stop()

    outcomes = asyncio.run(commit_all())

    assert failing.failed_batches == [6]
    assert len(outcomes) == 6
    assert all(isinstance(outcome, OSError) for outcome in outcomes), outcomes
    for run_id in ids:  # nothing of the failed batch was written
        assert [event.kind for event in store.history(run_id)] == [
            EventKind.RUN_STARTED,
            EventKind.CLAIMED,
        ]


def _step_checkpoint(claim: Claim, clock: FakeClock, *, after: int = 0) -> Checkpoint:
    """A step's start, `after` events after the claim's history."""
    seq = claim.events[-1].seq + 1 + after
    event = Event(seq, EventKind.STEP_STARTED, clock.now(), after, "s", 1, None)
    return Checkpoint(claim.run_id, claim.epoch, (event,))


class _RecordingCommits:
    """The real store, recording the size of each commit; the first commit says when it
    began, and waits for `go`."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.batches: list[int] = []
        self.began = threading.Event()
        self.go = threading.Event()

    def commit(self, checkpoints: Sequence[Checkpoint], *, now: datetime) -> list[bool]:
        self.batches.append(len(checkpoints))
        if len(self.batches) == 1:
            self.began.set()
            self.go.wait(10)
        return self._store.commit(checkpoints, now=now)

    def __getattr__(self, name: str) -> object:
        return getattr(self._store, name)


def test_a_long_pass_hands_over_what_it_gathered_before_it_ends(
    store: Store, clock: FakeClock
) -> None:
    """Checkpoints gathered in a pass of the loop that goes on past a few milliseconds leave
    as soon as the thread is idle, instead of waiting for the pass to end (their steps'
    effects are not left waiting behind every other run's); those that come while that
    commit is under way gather, and go together in the one after it."""
    ids = [f"r{i}" for i in range(8)]
    for run_id in ids:
        store.create_run(NewRun(run_id, "w", "[]"), now=clock.now())
    claims = store.claim("me", ["w"], now=clock.now(), lease=timedelta(seconds=30), limit=10)
    recording = _RecordingCommits(store)

    async def commit_all() -> list[bool]:
        committer = Committer(recording, clock)  # type: ignore[arg-type]
        committer.start(asyncio.get_running_loop())

        async def step(n: int, claim: Claim) -> bool:
            if n == 1:
                time.sleep(0.006)  # noqa: ASYNC251 (an effect that takes the pass past 5 ms)
            if n == 2:  # the pass goes on until the first two are being committed
                assert recording.began.wait(5), "the long pass kept its checkpoints to its end"
            return await committer.commit(_step_checkpoint(claim, clock))

        async def release() -> None:
            for _ in range(3):  # the pass of the steps, and the hand-over after it
                await asyncio.sleep(0)
            recording.go.set()  # the first commit may end now

        try:  # the runs resume in the same pass, as after a shared commit
            steps = [step(n, claim) for n, claim in enumerate(claims)]
            *done, _ = await asyncio.gather(*steps, release())
            return done
        finally:
            committer.stop()

    assert asyncio.run(commit_all()) == [True] * len(ids)
    assert recording.batches == [2, len(ids) - 2]


class _HeldCommits:
    """The real store, recording what each commit held (its runs) as it began and ended; a
    commit of a run in `hold` waits for `go` before it reaches the store."""

    def __init__(self, store: Store, hold: str) -> None:
        self._store = store
        self._hold = hold
        self.log: list[tuple[str, tuple[str, ...]]] = []
        self.held = threading.Event()
        self.go = threading.Event()
        self._lock = threading.Lock()

    def note(self, what: str) -> None:
        """Log other store work (a call), in its place among the commits."""
        with self._lock:
            self.log.append((what, ()))

    def commit(self, checkpoints: Sequence[Checkpoint], *, now: datetime) -> list[bool]:
        runs = tuple(checkpoint.run_id for checkpoint in checkpoints)
        with self._lock:
            self.log.append(("began", runs))
        if self._hold in runs and not self.go.is_set():
            self.held.set()
            assert self.go.wait(10)
        results = self._store.commit(checkpoints, now=now)
        with self._lock:
            self.log.append(("ended", runs))
        return results

    def __getattr__(self, name: str) -> object:
        return getattr(self._store, name)


def _taken(committer: Committer, count: int) -> None:
    """Until `count` batches are taken off the committer's queue and not done."""
    with committer._state:
        assert committer._state.wait_for(lambda: len(committer._flying) >= count, 10)


def _claimed(store: Store, clock: FakeClock, count: int) -> list[Claim]:
    for n in range(count):
        store.create_run(NewRun(f"r{n}", "w", "[]"), now=clock.now())
    return store.claim("me", ["w"], now=clock.now(), lease=timedelta(seconds=30), limit=count)


def test_with_two_lanes_a_batch_leaves_while_the_one_before_it_is_in_flight(
    store: Store, clock: FakeClock
) -> None:
    """A store that commits two transactions at once (PostgreSQL) gets two lanes: the next
    batch is committed while the one before it still waits for its answer, not after it."""
    first, second = _claimed(store, clock, 2)
    held = _HeldCommits(store, hold=first.run_id)

    async def commit_both() -> list[bool]:
        committer = Committer(held, clock, lanes=2)  # type: ignore[arg-type]
        committer.start(asyncio.get_running_loop())
        try:
            one = asyncio.ensure_future(committer.commit(_step_checkpoint(first, clock)))
            await asyncio.to_thread(held.held.wait, 10)  # the first batch is in flight
            two = await committer.commit(_step_checkpoint(second, clock))  # not held up
            assert not one.done()
            held.go.set()
            return [await one, two]
        finally:
            committer.stop()

    assert asyncio.run(commit_both()) == [True, True]
    assert held.log == [
        ("began", (first.run_id,)),
        ("began", (second.run_id,)),
        ("ended", (second.run_id,)),
        ("ended", (first.run_id,)),
    ]


def test_with_two_lanes_other_store_work_waits_for_every_batch_before_it(
    store: Store, clock: FakeClock
) -> None:
    """A claim (any call) sees what was committed before it was asked: it waits for the
    batches in flight, and a run's second checkpoint waits for its first."""
    first, second = _claimed(store, clock, 2)
    held = _HeldCommits(store, hold=first.run_id)
    order: list[str] = []

    async def in_order() -> None:
        committer = Committer(held, clock, lanes=2)  # type: ignore[arg-type]
        committer.start(asyncio.get_running_loop())
        try:
            one = asyncio.ensure_future(committer.commit(_step_checkpoint(first, clock)))
            await asyncio.to_thread(held.held.wait, 10)

            def claim() -> None:
                order.append("call")
                held.note("call")

            call = asyncio.ensure_future(committer.call(claim))
            await asyncio.to_thread(_taken, committer, 2)  # the second lane holds the call
            later = _step_checkpoint(first, clock, after=1)  # the same run, after its first
            again = asyncio.ensure_future(committer.commit(later))
            await asyncio.sleep(0)  # queued, behind both lanes
            assert not call.done()
            assert not again.done()
            order.append("go")
            held.go.set()
            assert await one
            await call
            assert await again
            assert await committer.commit(_step_checkpoint(second, clock))
        finally:
            committer.stop()

    asyncio.run(in_order())
    assert order == ["go", "call"]
    first_ended = held.log.index(("ended", (first.run_id,)))
    assert held.log.index(("call", ())) > first_ended
    assert held.log.index(("began", (first.run_id,)), 1) > first_ended
    assert [runs for when, runs in held.log if when == "began"] == [
        (first.run_id,),
        (first.run_id,),
        (second.run_id,),
    ]
    assert [event.kind for event in store.history(first.run_id)][2:] == [EventKind.STEP_STARTED] * 2

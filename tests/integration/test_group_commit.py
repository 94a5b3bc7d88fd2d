"""Group commit: a batch that fails fails every caller waiting on it, a checkpoint leaves
with the next commit, and those queued while a commit is under way go together in the one
after it. On both real stores. (A worker killed in the middle
of a commit: tests/chaos/test_group_commit_crash.py.)"""

from __future__ import annotations

import asyncio
import threading
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


def _step_checkpoint(claim: Claim, clock: FakeClock) -> Checkpoint:
    seq = claim.events[-1].seq + 1
    event = Event(seq, EventKind.STEP_STARTED, clock.now(), 0, "s", 1, None)
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


def test_a_checkpoint_leaves_with_the_next_commit_and_the_rest_gather_behind_it(
    store: Store, clock: FakeClock
) -> None:
    """A checkpoint that finds the thread idle leaves at once, alone: its step's effect does
    not wait for other runs' steps. Those that come while it commits gather, and go
    together in one commit next."""
    ids = [f"r{i}" for i in range(8)]
    for run_id in ids:
        store.create_run(NewRun(run_id, "w", "[]"), now=clock.now())
    claims = store.claim("me", ["w"], now=clock.now(), lease=timedelta(seconds=30), limit=10)
    recording = _RecordingCommits(store)

    async def commit_all() -> list[bool]:
        committer = Committer(recording, clock)  # type: ignore[arg-type]
        committer.start(asyncio.get_running_loop())
        try:
            first = asyncio.ensure_future(committer.commit(_step_checkpoint(claims[0], clock)))
            await asyncio.sleep(0)  # it is queued, in the pass this task resumes in
            # Its commit begins while this pass goes on (the loop is held here): it was not
            # kept back for the end of the pass.
            assert recording.began.wait(5), "the checkpoint waited for the end of the pass"
            # the runs resume in the same pass, while the first commit is under way
            rest = [
                asyncio.ensure_future(committer.commit(_step_checkpoint(claim, clock)))
                for claim in claims[1:]
            ]
            for _ in range(3):  # the pass that queues them, and the hand-over after it
                await asyncio.sleep(0)
            recording.go.set()  # the first commit may end now
            return await asyncio.gather(first, *rest)
        finally:
            committer.stop()

    assert asyncio.run(commit_all()) == [True] * len(ids)
    assert recording.batches == [1, len(ids) - 1]

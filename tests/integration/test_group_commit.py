"""Group commit: a batch that fails fails every caller waiting on it, and checkpoints queued
in one pass of the loop commit together. On both real stores. (A worker killed in the middle
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


def _step_checkpoint(claim: Claim, clock: FakeClock) -> Checkpoint:
    seq = claim.events[-1].seq + 1
    event = Event(seq, EventKind.STEP_STARTED, clock.now(), 0, "s", 1, None)
    return Checkpoint(claim.run_id, claim.epoch, (event,))


class _RecordingCommits:
    """The real store, recording the size of each commit."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.batches: list[int] = []

    def commit(self, checkpoints: Sequence[Checkpoint], *, now: datetime) -> list[bool]:
        self.batches.append(len(checkpoints))
        return self._store.commit(checkpoints, now=now)

    def __getattr__(self, name: str) -> object:
        return getattr(self._store, name)


def test_checkpoints_queued_in_one_pass_of_the_loop_commit_together(
    store: Store, clock: FakeClock
) -> None:
    """Where a batch ends is the loop's decision, not a race with the writer thread: runs
    that checkpoint in the same pass share one commit even when the loop is slow between
    them (here it sleeps, which lets the thread run)."""
    ids = [f"r{i}" for i in range(8)]
    for run_id in ids:
        store.create_run(NewRun(run_id, "w", "[]"), now=clock.now())
    claims = store.claim("me", ["w"], now=clock.now(), lease=timedelta(seconds=30), limit=10)
    recording = _RecordingCommits(store)

    async def commit_all() -> list[bool]:
        committer = Committer(recording, clock)  # type: ignore[arg-type]
        committer.start(asyncio.get_running_loop())

        async def step(claim: Claim) -> bool:
            time.sleep(0.006)  # noqa: ASYNC251 (a slow step, past the switch interval)
            return await committer.commit(_step_checkpoint(claim, clock))

        try:  # the runs resume in the same pass, as after a shared commit
            return await asyncio.gather(*(step(claim) for claim in claims))
        finally:
            committer.stop()

    assert asyncio.run(commit_all()) == [True] * len(ids)
    assert recording.batches == [len(ids)]

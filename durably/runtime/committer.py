"""Group commit: one thread owns the worker's store work and commits many runs' checkpoints
in one transaction, waking each caller only after its checkpoint is durable.

A store call made from the event loop would block every run on it; one thread per call
would pay a thread hop and a commit per checkpoint. One writer thread turns N concurrent
checkpoints into one transaction and one fsync.

The loop, not a race, decides where a batch ends: the checkpoints queued during one pass of
the event loop are handed to the thread together, at the start of the next pass. Left to the
thread, a batch would end wherever the thread happened to take the GIL from a loop still busy
queueing, and once split, the runs would stay out of step, paying a commit per half from
then on (trivial steps lost a fifth of W1's throughput to that, measured).

A pass that goes on past _LONGEST_PASS while the thread is idle hands over what it gathered
so far instead of keeping it to its end. Runs that resume together (32 steps whose sleeps
end at once) apply their effects one after another in one pass; when every checkpoint waited
for the pass to end, a worker SIGKILLed in it re-applied every effect of the pass (all 32 of
them in W3, or none if the kill fell elsewhere). Now an effect waits a few milliseconds and
a commit at most (`python -m benchmarks kills`).

A store that can commit several transactions at once (PostgreSQL: `Store.writers`) gets as
many threads (lanes), each on a connection of its own: a batch leaves while the one before it
is still in flight, instead of waiting behind its round trip and fsync. Batches are taken in
the order they were handed over; one that holds store work other than checkpoints (a claim, a
renewal), or a checkpoint of a run whose earlier checkpoint is still in flight, waits for
every batch taken before it, so that work still reaches the store in the order it was asked.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import math
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from durably.clock import Clock
from durably.errors import StoreUnavailable
from durably.runtime.hooks import Hooks
from durably.runtime.threads import Outcome, settle_all_threadsafe, settle_threadsafe
from durably.stores.protocol import Store
from durably.stores.records import Checkpoint

__all__ = ["Committer"]

log = logging.getLogger("durably.committer")
T = TypeVar("T")

# How long checkpoints gathered in one pass of the loop wait for the pass to end at most,
# while the thread is idle: a pass of trivial steps is shorter and commits as one batch; a
# pass of steps whose effects take time (32 runs resuming together, each writing somewhere)
# hands over what it gathered every few milliseconds instead of at its end.
_LONGEST_PASS = 0.005
_RETRY_FIRST = timedelta(milliseconds=50)
_RETRY_MAX = timedelta(seconds=5)


@dataclass(slots=True)
class _Commit:
    checkpoint: Checkpoint
    future: asyncio.Future[bool]


@dataclass(frozen=True, slots=True)
class _Flight:
    """A batch taken by a lane and not done: the runs it commits, and whether it holds store
    work besides checkpoints."""

    runs: set[str]
    calls: bool


@dataclass(slots=True)
class _Call:
    fn: Callable[[], Any]
    future: asyncio.Future[Any]


_STOP = object()


class Committer:
    """`solo()` tells whether only one run is in flight: then a checkpoint is committed on the
    caller's thread, saving the hand-off to this thread (about 0.1 ms a step), since there is
    no batch to wait for."""

    def __init__(
        self,
        store: Store,
        clock: Clock,
        *,
        max_batch: int = 512,
        solo: Callable[[], bool] = lambda: False,
        hooks: Hooks | None = None,
        lanes: int = 1,
    ) -> None:
        self._store = store
        self._clock = clock
        self._max_batch = max_batch
        self._solo = solo
        self._hooks = hooks
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lanes = lanes
        self._threads: list[threading.Thread] = []
        self._stopping = threading.Event()
        self._give_up_at: float | None = None  # time.monotonic(): store work fails from then
        # Who does store work: lanes (their batches taken and not done, any number at once) or
        # the loop's inline commit (alone).
        self._state = threading.Condition()
        self._inline = False  # the loop commits a checkpoint of its own
        self._taking = threading.Lock()  # held by the lane taking the next batch off the queue
        self._tickets = 0  # batches taken, in order
        self._flying: dict[int, _Flight] = {}  # batches taken and not done, by ticket
        self._queued: set[str] = set()  # runs with a checkpoint handed to the thread (loop only)
        self._gathering: list[_Commit] = []  # queued in this pass of the loop, not handed over
        self._gathered_at = 0.0  # time.monotonic() when the first of `_gathering` came
        self._handed = 0  # items put on the queue (the loop's count)
        self._done = 0  # of them, those the thread has finished (the thread's count)

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        for lane in range(self._lanes):
            name = "durably-committer" if lane == 0 else f"durably-committer-{lane + 1}"
            thread = threading.Thread(target=self._serve, name=name, daemon=True)
            self._threads.append(thread)
            thread.start()

    def stop(self) -> None:
        """Commit what is queued, then end the threads."""
        self._hand_over()
        self._stopping.set()
        for _ in self._threads:
            self._queue.put(_STOP)
        for thread in self._threads:
            thread.join()

    def give_up_after(self, seconds: float) -> None:
        """Store work still failing `seconds` from now fails instead of being retried: a
        worker that is stopping waits that long for a store that is down, not forever."""
        self._give_up_at = time.monotonic() + seconds

    async def commit(self, checkpoint: Checkpoint) -> bool:
        """True once durable; False if the run's lease epoch was stale (nothing written)."""
        run_id = checkpoint.run_id
        if run_id not in self._queued and self._solo() and self._enter_inline():
            try:  # nothing else is in flight: commit here, without the hand-off
                idle = self._queue.empty() and not self._gathering
                committed = self._commit_inline(checkpoint) if idle else None
            except StoreUnavailable:
                committed = None  # the thread retries it, with backoff, without blocking the loop
            finally:
                self._leave_inline()
            if committed is not None:
                await asyncio.sleep(0)  # let heartbeats and claims run between steps
                return committed
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._queued.add(run_id)
        future.add_done_callback(lambda _: self._queued.discard(run_id))
        if not self._gathering:
            asyncio.get_running_loop().call_soon(self._hand_over)
            self._gathered_at = time.monotonic()
        self._gathering.append(_Commit(checkpoint, future))
        if self._idle() and time.monotonic() - self._gathered_at >= _LONGEST_PASS:
            self._hand_over()  # a long pass: what it gathered leaves now, the thread being idle
        return await future

    def _idle(self) -> bool:
        """Whether the thread has done everything handed to it (each count is written by one
        thread only, so reading the other's is safe)."""
        return self._done == self._handed

    def _hand_over(self) -> None:
        """Give the thread the checkpoints gathered in the last pass of the loop, as one item."""
        if self._gathering:
            gathered, self._gathering = self._gathering, []
            self._handed += 1
            self._queue.put(gathered)

    def _commit_inline(self, checkpoint: Checkpoint) -> bool:
        if self._hooks is not None:
            self._hooks.before_commit(1)
        [ok] = self._commit_now([checkpoint])
        if self._hooks is not None:
            self._hooks.checkpoint_committed(1)
        return ok

    async def call(self, fn: Callable[[], T]) -> T:
        """Run other store work (claims, renewals) on the committer's thread."""
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._hand_over()  # checkpoints queued before this call reach the store before it
        self._handed += 1
        self._queue.put(_Call(fn, future))
        return await future

    # -- the thread ---------------------------------------------------------------------

    def _serve(self) -> None:
        while True:
            with self._taking:  # batches leave the queue in order, one lane at a time
                batch, taken, stop = self._next_batch()
                ticket = self._take(batch)
            self._enter(ticket)
            try:
                commits = [item for item in batch if isinstance(item, _Commit)]
                if commits:
                    self._commit(commits)
                for item in batch:
                    if isinstance(item, _Call):
                        self._resolve_with(item.future, item.fn)
            finally:
                self._leave(ticket, taken)
            if stop:
                return

    def _take(self, batch: list[Any]) -> int:
        """A ticket for the batch just taken: its place in line."""
        flight = _Flight(
            {item.checkpoint.run_id for item in batch if isinstance(item, _Commit)},
            calls=any(isinstance(item, _Call) for item in batch),
        )
        with self._state:
            ticket = self._tickets
            self._tickets += 1
            self._flying[ticket] = flight
            self._state.notify_all()  # the line changed: for whoever watches it
        return ticket

    def _enter(self, ticket: int) -> None:
        """Wait until the batch may go: the loop is not committing inline, and if it holds
        other store work or a run an earlier batch still commits, every earlier batch is done."""
        flight = self._flying[ticket]

        def may_go() -> bool:
            if self._inline:
                return False
            earlier = [other for number, other in self._flying.items() if number < ticket]
            if not earlier:
                return True
            return not flight.calls and not any(flight.runs & other.runs for other in earlier)

        with self._state:
            self._state.wait_for(may_go)

    def _leave(self, ticket: int, taken: int) -> None:
        with self._state:
            del self._flying[ticket]
            self._done += taken
            self._state.notify_all()

    def _enter_inline(self) -> bool:
        """Whether the loop may commit a checkpoint itself (then it must `_leave_inline`): no
        batch is taken and not done."""
        with self._state:
            if self._inline or self._flying:
                return False
            self._inline = True
            return True

    def _leave_inline(self) -> None:
        with self._state:
            self._inline = False
            self._state.notify_all()

    def _next_batch(self) -> tuple[list[Any], int, bool]:
        """The next batch, how many queue items it took, and whether to stop after it."""
        first = self._queue.get()
        if first is _STOP:
            return [], 0, True
        batch, taken = (first if isinstance(first, list) else [first]), 1
        while len(batch) < self._max_batch:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is _STOP:
                return batch, taken, True
            batch.extend(item if isinstance(item, list) else [item])
            taken += 1
        return batch, taken, False

    def _commit(self, commits: list[_Commit]) -> None:
        for group in _without_repeats(_merged(commits)):
            checkpoints = [item.checkpoint for item in group]
            try:
                if self._hooks is not None:
                    self._hooks.before_commit(len(checkpoints))
                results = self._with_store_retries(functools.partial(self._commit_now, checkpoints))
            except BaseException as exc:  # a failed batch fails each waiting caller
                self._settle_all([(future, None, exc) for item in group for future in item.futures])
                continue
            if self._hooks is not None:
                self._hooks.checkpoint_committed(len(group))
            outcomes = [
                (future, ok, None)
                for item, ok in zip(group, results, strict=True)
                for future in item.futures
            ]
            self._settle_all(outcomes)

    def _commit_now(self, checkpoints: list[Checkpoint]) -> list[bool]:
        return self._store.commit(checkpoints, now=self._clock.now())

    def _resolve_with(self, future: asyncio.Future[Any], fn: Callable[[], Any]) -> None:
        try:
            value = self._with_store_retries(fn)
        except BaseException as exc:
            self._settle(future, error=exc)
        else:
            self._settle(future, value=value)

    def _with_store_retries(self, fn: Callable[[], T]) -> T:
        """Call fn, retrying while the store is unreachable (down, its disk full, its file
        read-only): a store outage loses nothing. The hooks hear when one begins and ends."""
        delay = _RETRY_FIRST
        outage = False
        while True:
            try:
                value = fn()
            except StoreUnavailable as exc:
                left = math.inf if self._give_up_at is None else self._give_up_at - time.monotonic()
                if self._stopping.is_set() or left <= 0:
                    raise
                if not outage and self._hooks is not None:
                    self._hooks.store_outage(str(exc))
                outage = True
                log.warning("store unavailable, retrying in %.2fs: %s", delay.total_seconds(), exc)
                self._stopping.wait(min(delay.total_seconds(), left))
                delay = min(delay * 2, _RETRY_MAX)
                continue
            if outage:
                log.warning("store available again")
                if self._hooks is not None:
                    self._hooks.store_outage(None)
            return value

    def _settle(
        self, future: asyncio.Future[Any], *, value: Any = None, error: BaseException | None = None
    ) -> None:
        assert self._loop is not None
        settle_threadsafe(self._loop, future, value, error)

    def _settle_all(self, outcomes: Sequence[Outcome]) -> None:
        assert self._loop is not None
        settle_all_threadsafe(self._loop, outcomes)


@dataclass(slots=True)
class _Merged:
    """Checkpoints of one run that follow each other in a batch, as one, and their callers."""

    checkpoint: Checkpoint
    futures: list[asyncio.Future[bool]]


def _merged(commits: list[_Commit]) -> list[_Merged]:
    """Join a run's checkpoints that follow each other under the same epoch into one (their
    events in order; the last one's status): branches of a durably.gather flush at once, and
    one store call per branch would commit them one by one."""
    merged: list[_Merged] = []
    last: dict[str, _Merged] = {}
    for item in commits:
        checkpoint = item.checkpoint
        before = last.get(checkpoint.run_id)
        if (
            before is not None
            and before.checkpoint.epoch == checkpoint.epoch
            and (before.checkpoint.status is None)
            and checkpoint.input is None  # a new generation's first commit goes on its own
        ):
            first = before.checkpoint
            before.checkpoint = dataclasses.replace(
                checkpoint,
                events=first.events + checkpoint.events,
                consumed=first.consumed + checkpoint.consumed,
                starts=first.starts + checkpoint.starts,
                messages=first.messages + checkpoint.messages,
                publishes=first.publishes or checkpoint.publishes,
            )
            before.futures.append(item.future)
            continue
        entry = _Merged(checkpoint, [item.future])
        merged.append(entry)
        last[checkpoint.run_id] = entry
    return merged


def _without_repeats(items: list[_Merged]) -> list[list[_Merged]]:
    """Split a batch so no run appears twice in one store call (order kept per run)."""
    groups: list[list[_Merged]] = []
    last_group: dict[str, int] = {}
    for item in items:
        index = last_group.get(item.checkpoint.run_id, -1) + 1
        if index == len(groups):
            groups.append([])
        groups[index].append(item)
        last_group[item.checkpoint.run_id] = index
    return groups

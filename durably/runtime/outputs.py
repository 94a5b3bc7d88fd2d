"""What a run publishes as it runs (durably.core.outputs), on the worker's side: events set by
its workflow code or its steps, and items written to its streams.

Events are history events (`event_set`): committed with the run's next checkpoint, whose
transaction also keeps each key's latest value where callers read it. Workflow code sets an
event at no position (adding a `durably.set_event` or `durably.progress` to a workflow shifts
no step, so it never strands a run in flight), and a replay sets nothing again: the n-th set
of a key in the workflow's code is recorded once, by the first execution that gets there. A
step's set is recorded with its position and attempt and committed soon after, like the first
heartbeat of an attempt, so a long step's progress shows while it runs.

Stream items do not go into the history (a stream of 10,000 LLM tokens must not be replayed):
they are appended to the store apart, fenced by the run's lease, by a task that takes every
item written since its last append in one call. Before any checkpoint of the run commits, the
items written so far are in the store (HistoryWriter.before_commit): a step's items are
durable before its result is, and a run's before its end. Each item has a place (durably.core
.outputs) that a replay or a retried step writes again: the store keeps the first, so a reader
never sees an item twice.
"""

from __future__ import annotations

import asyncio
import functools
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import datetime

from durably.clock import Clock
from durably.core.history import EventKind
from durably.core.outputs import StreamWrite, close_place, step_place, workflow_place
from durably.errors import DurablyError, LeaseLost
from durably.runtime.checkpoints import HistoryWriter
from durably.runtime.committer import Committer
from durably.runtime.flow import CheckpointFailed

__all__ = ["RunOutputs", "StepOutputs"]

# the store's append (durably.stores.outputs), for this run and lease epoch, at a time
Append = Callable[[Sequence[StreamWrite], datetime], bool]


class RunOutputs:
    """What one run publishes, under one lease epoch."""

    def __init__(
        self,
        writer: HistoryWriter,
        committer: Committer,
        append: Append,
        clock: Clock,
        loop: asyncio.AbstractEventLoop,
        *,
        generation: int,
    ) -> None:
        self._writer = writer
        self._committer = committer
        self._append = append
        self._clock = clock
        self._loop = loop
        self._generation = generation
        # sets of each key by the workflow's code that the history holds: a replay skips them
        self._recorded = Counter(
            event.name
            for event in writer.events
            if event.kind is EventKind.EVENT_SET and event.position is None
        )
        self._sets: Counter[str] = Counter()  # sets of each key by the workflow's code so far
        self._writes = 0  # stream writes by the workflow's code so far
        self._step_writes: Counter[tuple[int, int]] = Counter()  # by (position, attempt)
        self._ended: set[str] = set()  # streams this execution closed
        self._pending: list[StreamWrite] = []
        self._appending = asyncio.Lock()  # one append at a time, in the order written
        self._task: asyncio.Task[None] | None = None
        writer.before_commit = self.drain

    # -- from the workflow's code (on the loop) -----------------------------------------

    def set_event(self, key: str, value: str) -> None:
        self._sets[key] += 1
        if self._sets[key] <= self._recorded[key]:
            return  # replayed: this set is in the history already
        self._writer.append(EventKind.EVENT_SET, None, key, None, value)
        self._soon()

    def write(self, key: str, value: str | None) -> None:
        """An item (None: the stream's end) written by the workflow's code."""
        if value is None:
            self._end(key, None)
            return
        self._check_open(key)
        self._writes += 1
        self._pending.append(
            StreamWrite(key, workflow_place(self._generation, self._writes), value)
        )
        self._soon()

    # -- from a step's body (on the loop) -----------------------------------------------

    def step_event(self, position: int, attempt: int, key: str, value: str) -> None:
        """An event set by the step at `position`: the event's name is its key."""
        self._writer.append(EventKind.EVENT_SET, position, key, attempt, value)
        self._soon()

    def step_write(self, position: int, attempt: int, key: str, value: str | None) -> None:
        if value is None:
            self._end(key, attempt)
            return
        self._check_open(key)
        self._step_writes[position, attempt] += 1
        n = self._step_writes[position, attempt]
        place = step_place(self._generation, position, n)
        self._pending.append(StreamWrite(key, place, value, attempt))
        self._soon()

    # -- to the store -------------------------------------------------------------------

    async def drain(self) -> None:
        """Append what was written so far (before a checkpoint commits)."""
        if self._pending or self._appending.locked():
            await self._append_pending()

    def _end(self, key: str, attempt: int | None) -> None:
        self._ended.add(key)
        self._pending.append(StreamWrite(key, close_place(), None, attempt))
        self._soon()

    def _check_open(self, key: str) -> None:
        if key in self._ended:
            raise DurablyError(
                f"stream {key!r} of run {self._writer.run_id!r} was closed; write to another "
                "key, or close it only after its last item"
            )

    def _soon(self) -> None:
        if self._task is None and not self._writer.lost:
            self._task = self._loop.create_task(self._publish(), name="durably-publish")

    async def _publish(self) -> None:
        try:
            await asyncio.sleep(0)  # the writes of this turn of the loop go together
            await self._append_pending()
            if self._writer.publishes and not self._writer.lost:
                await self._writer.flush()  # a step's event shows while the step runs
        except (LeaseLost, CheckpointFailed):
            pass  # the writer knows it lost the run; the run's own next commit says so
        finally:
            self._task = None
            if self._pending and not self._writer.lost:
                self._soon()

    async def _append_pending(self) -> None:
        async with self._appending:
            while self._pending and not self._writer.lost:
                writes, self._pending = self._pending, []
                now = self._clock.now()
                try:
                    held = await self._committer.call(functools.partial(self._append, writes, now))
                except Exception as exc:  # the store failed: as a failed commit
                    self._writer.lose()
                    raise CheckpointFailed(exc) from exc
                if not held:
                    self._writer.lose()
                    raise LeaseLost(
                        f"run {self._writer.run_id!r}: lease epoch {self._writer.epoch} was "
                        "taken over by another worker; this worker's stream writes are refused"
                    )


class StepOutputs:
    """A step attempt's way to publish: from its body, on the loop or in its thread."""

    def __init__(
        self,
        outputs: RunOutputs,
        loop: asyncio.AbstractEventLoop,
        position: int,
        attempt: int,
    ) -> None:
        self._outputs = outputs
        self._loop = loop
        self._where = (position, attempt)

    def set_event(self, key: str, value: str) -> None:
        position, attempt = self._where
        self._on_loop(lambda: self._outputs.step_event(position, attempt, key, value))

    def write(self, key: str, value: str | None) -> None:
        position, attempt = self._where
        self._on_loop(lambda: self._outputs.step_write(position, attempt, key, value))

    def _on_loop(self, call: Callable[[], None]) -> None:
        try:
            on_loop = asyncio.get_running_loop() is self._loop
        except RuntimeError:
            on_loop = False
        if on_loop:
            call()
            return
        # A sync step's thread: the write happens on the loop, and this thread waits for it,
        # so that a write after the stream's end raises here, in the step.
        done = asyncio.run_coroutine_threadsafe(_call(call), self._loop)
        done.result()


async def _call(call: Callable[[], None]) -> None:
    call()

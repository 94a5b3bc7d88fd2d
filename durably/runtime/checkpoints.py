"""Writing a leased run's history, and the lease fence every such write passes.

The fence, in one place:
- A claim (Store.claim, or Store.take for a person's action) gives the run a new lease epoch
  and records a `claimed` event. Only the holder of the current epoch may write the run.
- Every write of a leased run carries its epoch: checkpoints (Store.commit, through this
  module) and lease renewals (Store.renew, from the worker's heartbeat). The store applies
  it only while the epoch is still the run's and the run is `running` (in both stores' SQL:
  `WHERE lease_epoch = :epoch AND status = 'running'`), in the same transaction as the
  events it appends.
- A refused write means another worker took the run over (this one stalled or was cut off
  past its lease): LeaseLost, and this execution writes nothing more. The heartbeat, renewing
  every third of the lease, finds the same and cancels the execution.
Clocks only decide when a lease looks expired (liveness); the epoch decides who may write
(safety), so clocks that disagree cost replays, never a lost or doubled write.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime

from durably.clock import Clock
from durably.core.approvals import AWAITING_APPROVAL
from durably.core.control import Request
from durably.core.event_data import encode_payload
from durably.core.history import ErrorInfo, Event, EventKind
from durably.core.payloads import Command, RunFailed, RunParked
from durably.core.status import RunStatus, check_transition
from durably.errors import LeaseLost
from durably.runtime.committer import Committer
from durably.runtime.flow import CheckpointFailed
from durably.runtime.hooks import Hooks
from durably.runtime.lineage import parent_notice
from durably.stores.records import Checkpoint, Claim, Delivery, Message, NewRun

__all__ = ["HistoryWriter"]

log = logging.getLogger("durably.execution")


class HistoryWriter:
    """The events of one run under one lease epoch: appended in memory, committed together
    (one commit per step: a step's outcome goes with the next step's start or the run's end)."""

    def __init__(
        self,
        claim: Claim,
        committer: Committer,
        clock: Clock,
        hooks: Hooks | None,
        on_lost: Callable[[], None] | None = None,
    ) -> None:
        self.run_id = claim.run_id
        self.workflow = claim.workflow
        self.epoch = claim.epoch
        self.events: list[Event] = list(claim.events)  # the whole history, as far as known
        self.pending: list[Event] = []  # appended, not committed yet
        self.lost = False  # the lease is gone (or a commit failed): write nothing more
        self.consumed: tuple[int, ...] = ()  # inbox messages appended, for the next commit
        self.starts: tuple[NewRun, ...] = ()  # child runs started, made by the next commit
        self.outbox: tuple[Message, ...] = ()  # messages to other runs, sent by the next commit
        self.input: str | None = None  # the run continues as new with it, at the next commit
        self.version: str | None = None  # and with this version of its workflow
        self.publishes = False  # an event was set (EVENT_SET), for the next commit
        # what the run's streams hold back, to be in the store before the next commit
        self.before_commit: Callable[[], Awaitable[None]] | None = None
        self._received: set[int] = set()  # every inbox message this writer appended
        self._next_seq = max((event.seq for event in claim.events), default=0) + 1
        self._committer = committer
        self._clock = clock
        self._hooks = hooks
        # called once a commit is refused or fails: what runs for the run must stop, since
        # nothing it does can be recorded any more
        self._on_lost = on_lost

    def append(
        self,
        kind: EventKind,
        position: int | None = None,
        name: str | None = None,
        attempt: int | None = None,
        data: str | None = None,
    ) -> Event:
        event = Event(self._next_seq, kind, self._clock.now(), position, name, attempt, data)
        if kind is EventKind.EVENT_SET:
            self.publishes = True
        self.pending.append(event)
        self.events.append(event)
        self._next_seq += 1
        return event

    def receive(self, inbox: Sequence[Delivery]) -> int:
        """Append a `message_received` event per message not appended yet, in the inbox's
        order; return how many. The commit that appends them takes them out of the inbox
        (behind the same fence): if this lease ends before that, they stay there, and the
        next claim folds them again."""
        new = [message for message in inbox if message.id not in self._received]
        for message in new:
            self.append(EventKind.MESSAGE_RECEIVED, data=encode_payload(message.received()))
            self._received.add(message.id)
        self.consumed += tuple(message.id for message in new)
        return len(new)

    async def flush(
        self,
        status: RunStatus | None = None,
        *,
        result: str | None = None,
        error: ErrorInfo | None = None,
        available_at: datetime | None = None,
    ) -> None:
        """Commit what is pending (and the run's new status, if any), behind the fence."""
        if status is not None:  # a leased run is running: it may move only as the table says
            check_transition(RunStatus.RUNNING, status)
        if self.before_commit is not None:  # stream items written so far go in first
            await self.before_commit()
        checkpoint = self.draft(status, result=result, error=error, available_at=available_at)
        try:
            committed = await self._committer.commit(checkpoint)
        except Exception as exc:  # the engine failed, not the workflow: stop, keep nothing
            self.lose()
            raise CheckpointFailed(exc) from exc
        if not committed:
            self.lose()
            raise LeaseLost(
                f"run {self.run_id!r}: lease epoch {self.epoch} was taken over by another worker; "
                "this worker's writes are refused"
            )

    def lose(self) -> None:
        """The lease is gone (or a write failed): write nothing more, stop what runs."""
        self.lost = True
        if self._on_lost is not None:
            self._on_lost()

    @property
    def has_pending(self) -> bool:
        """Whether anything waits for the next commit."""
        return bool(self.pending or self.consumed or self.starts or self.outbox) or (
            self.input is not None
        )

    def draft(
        self,
        status: RunStatus | None = None,
        *,
        result: str | None = None,
        error: ErrorInfo | None = None,
        available_at: datetime | None = None,
    ) -> Checkpoint:
        """What is pending, taken out as a checkpoint (with the run's new state, if any): for
        `flush`, or for a transactional step's transaction (Store.transact), which gives it
        back with `restore` if it does not commit."""
        events, self.pending = tuple(self.pending), []
        consumed, self.consumed = self.consumed, ()
        starts, self.starts = self.starts, ()
        outbox, self.outbox = self.outbox, ()
        new_input, self.input = self.input, None
        version, self.version = self.version, None
        publishes, self.publishes = self.publishes, False
        return Checkpoint(
            self.run_id,
            self.epoch,
            events,
            status,
            result,
            error,
            available_at,
            consumed,
            starts,
            outbox,
            new_input,
            version,
            publishes=publishes,
        )

    def restore(self, draft: Checkpoint) -> None:
        """A draft that was not committed: pending again, ahead of what came since."""
        self.pending[:0] = draft.events
        self.consumed = draft.consumed + self.consumed
        self.starts = draft.starts + self.starts
        self.outbox = draft.messages + self.outbox
        self.input = draft.input if self.input is None else self.input
        self.version = draft.version if self.version is None else self.version
        self.publishes = self.publishes or draft.publishes

    def reserve(self) -> int:
        """The next seq, kept for an event that is made elsewhere (a transaction's outcome,
        in its thread): it goes into the history with `committed`, or back with `unreserve`."""
        seq, self._next_seq = self._next_seq, self._next_seq + 1
        return seq

    def unreserve(self, seq: int) -> None:
        """The event for `seq` will not be written: its seq is taken by the next event, unless
        others were numbered after it meanwhile (then the history skips it)."""
        if self._next_seq == seq + 1:
            self._next_seq = seq

    def committed(self, event: Event) -> None:
        """An event a transaction made durable (with a reserved seq): in the history, in order."""
        bisect.insort(self.events, event, key=lambda known: known.seq)

    async def finish(
        self,
        status: RunStatus,
        kind: EventKind,
        *,
        result: str | None = None,
        error: ErrorInfo | None = None,
    ) -> None:
        """End the run in `status`, with the event `kind` (run_completed, run_failed); a child
        run's parent hears of it in the same commit."""
        self.append(kind, data=None if error is None else encode_payload(RunFailed(error)))
        self.outbox += parent_notice(self.run_id, self.events, status, result=result, error=error)
        await self.flush(status, result=result, error=error)
        if error is not None:
            log.info(
                "run %s ended %s: %s: %s", self.run_id, status, error.error_class, error.message
            )
        if self._hooks is not None:
            self._hooks.run_finished(self.run_id, self.workflow, str(status))
            self._hooks.run_ended(self.run_id, self.workflow, str(status), self.events)

    async def park(
        self, status: RunStatus, error: ErrorInfo, *, reason: str, wake_at: datetime | None = None
    ) -> None:
        """Stop and wait for a person: the run joins the dead-letter list. `wake_at`: unless
        nobody acts by then (its deadline), when a worker takes it up again by itself."""
        self.append(EventKind.RUN_PARKED, data=encode_payload(RunParked(error, reason)))
        await self.flush(status, error=error, available_at=wake_at)
        log.warning(
            "run %s parked (%s): %s: %s", self.run_id, reason, error.error_class, error.message
        )
        if self._hooks is not None:
            self._hooks.run_finished(self.run_id, self.workflow, str(status))
            self._hooks.run_ended(self.run_id, self.workflow, str(status), self.events)

    async def wait_for_person(self, why: ErrorInfo, *, wake_at: datetime | None) -> None:
        """Park the run for a person's decision (an approval) until `wake_at` at the latest:
        like `park`, but a wait the workflow asked for, not a failure."""
        self.append(EventKind.RUN_PARKED, data=encode_payload(RunParked(why, AWAITING_APPROVAL)))
        await self.flush(RunStatus.NEEDS_ATTENTION, error=why, available_at=wake_at)

    async def pause(self, request: Request) -> None:
        """Stop for a person's pause: the run waits, `paused`, until they resume it."""
        data = encode_payload(Command(request.by, request.reason))
        self.append(EventKind.RUN_PAUSED, data=data)
        await self.flush(RunStatus.PAUSED)
        log.info("run %s paused by %s", self.run_id, request.by)

    async def release(self) -> None:
        """Hand the run back (a stopping worker): keep what is pending, due again at once."""
        self.append(EventKind.RELEASED)
        with contextlib.suppress(LeaseLost):
            await self.flush(RunStatus.PENDING, available_at=self._clock.now())

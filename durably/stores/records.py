"""What the store protocol (durably.stores.protocol) speaks of: runs to create and as stored,
claims and leases, checkpoints, messages and their deliveries, workers' beats, counts. Plain
values, with no I/O."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

from durably.core.audit import Audit
from durably.core.history import ErrorInfo, Event
from durably.core.payloads import MessageReceived
from durably.core.status import RunStatus

__all__ = [
    "Checkpoint",
    "Claim",
    "Delivery",
    "Ended",
    "Happened",
    "Lease",
    "Message",
    "NewRun",
    "RunRecord",
    "RunStats",
    "Sent",
    "SentOutcome",
    "Serves",
    "WorkerBeat",
]


class Happened(StrEnum):
    """What happened to a run, to find it by (Store.runs)."""

    TAKEN_OVER = "taken_over"  # a worker took it over from one presumed dead
    RETRIED = "retried"  # an attempt failed and was tried again, or a person retried it
    COMPENSATED = "compensated"  # an undo ran to completion


@dataclass(frozen=True, slots=True)
class NewRun:
    id: str
    workflow: str
    input: str  # JSON
    parent: str | None = None  # the run that starts it as its child
    started: str | None = None  # the data of its run_started event (a child's: its lineage)
    priority: int = 0  # claimed ahead of lower runs due up to this many minutes before it
    version: str | None = None  # of its workflow: only workers that serve it claim the run
    correlation_id: str | None = None  # the caller's, to find the run by (children inherit)
    queue: str | None = None  # durably.core.queues: None is the default queue
    key: str | None = None  # whose run it is, for its queue's per-key limits and fairness
    due: datetime | None = None  # when it may first be claimed (None: at once)
    # durably.core.attributes: strings to find it by, written with it (in the clear)
    attributes: Mapping[str, str] = field(default_factory=dict)
    # A debounced start (durably.core.debounce): the key it gathers on, and the latest due time
    # of the run it makes (None: no cap). create_run joins the gathering run of its workflow
    # and key, if there is one, instead of making another.
    debounce: str | None = None
    due_by: datetime | None = None
    # A person's start: recorded in the audit trail if create_run or create_runs creates it.
    audit: Audit | None = None


@dataclass(frozen=True, slots=True)
class RunRecord:
    id: str
    workflow: str
    status: RunStatus
    input: str
    result: str | None
    error: ErrorInfo | None
    created_at: datetime
    updated_at: datetime
    # pending: due time (None: it waits for a signal only); running: lease expiry;
    # needs_attention: its workflow's deadline, when it wakes to time out (else None)
    available_at: datetime | None
    lease_owner: str | None
    lease_epoch: int
    event_count: int
    parent: str | None = None  # the run that started it as its child
    priority: int = 0  # durably.core.priority
    version: str | None = None  # of its workflow, at its start (None: before versions existed)
    correlation_id: str | None = None  # given to start(), or the caller's trace id
    queue: str | None = None  # durably.core.queues: None is the default queue
    key: str | None = None  # given to start(): its queue's per-key limits and fairness
    debounce: str | None = None  # the debounce key its starts gathered on (durably.core.debounce)
    due_by: datetime | None = None  # debounced: the latest it may become due (first + max_wait)
    gathered: int | None = None  # debounced: how many starts it gathered

    @property
    def gathering(self) -> bool:
        """Whether it gathers debounced starts still: no worker has claimed it yet."""
        return self.debounce is not None and self.lease_epoch == 0


@dataclass(frozen=True, slots=True)
class WorkerBeat:
    """A worker as it says it is alive: since when, when last, how often it says so, the
    versions of each workflow it serves, and the queues it serves."""

    name: str
    started_at: datetime
    seen_at: datetime
    every: timedelta
    serves: Mapping[str, tuple[str, ...]]
    queues: tuple[str, ...] | None = None  # the queues it serves (None: a worker of before)

    def alive(self, now: datetime) -> bool:
        """Whether it beat lately: three beats missed, it is presumed dead."""
        return now - self.seen_at <= 3 * self.every


@dataclass(frozen=True, slots=True)
class RunStats:
    """What a metrics scrape shows of a store's runs (Store.stats)."""

    by_status: dict[str, int]
    oldest_in_flight: datetime | None  # created_at of the oldest run that has not ended
    due: int  # pending runs due by now: the queue's depth
    oldest_due: datetime | None  # when the longest-waiting due run became due
    lease_expired: int = 0  # running runs whose lease expired: their worker is presumed dead
    # By named queue (durably.core.queues; the default queue's are the rest): due runs, and
    # runs that hold one of its slots (leased, the lease not expired).
    queue_due: Mapping[str, int] = field(default_factory=dict)
    queue_running: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, order=True)
class Ended:
    """How many runs ended in `status` in the minute that begins at `minute` (Store.activity)."""

    minute: datetime
    status: str
    count: int


# What a worker runs: workflow name -> the versions of its runs it serves. A plain collection
# of names serves every version (what a tool or a test that is no worker asks for).
Serves = Collection[str] | Mapping[str, Collection[str]]


@dataclass(frozen=True, slots=True)
class Lease:
    run_id: str
    epoch: int


@dataclass(frozen=True, slots=True)
class Message:
    """A command from outside a run, for its inbox: what it is (`kind`, e.g. "signal"), an
    optional `name` and JSON `data`, who sent it. A second message with the same
    `dedupe_key` to the same run is not stored again."""

    run_id: str
    kind: str
    sender: str
    name: str | None = None
    data: str | None = None  # JSON
    dedupe_key: str | None = None
    # Sent by the run's parent (a cancel when the parent ends): stored only if the run is a
    # child of that run; a paused or parked child is made pending, due now, to fold it.
    from_parent: str | None = None
    audit: Audit | None = None  # a person's action: recorded in the trail if it is stored


@dataclass(frozen=True, slots=True)
class Delivery:
    """A message in a run's inbox, handed to the run's lease holder with its claim."""

    id: int  # the inbox's order: messages are folded into the history by it
    kind: str
    name: str | None
    data: str | None
    sender: str
    sent_at: datetime

    def received(self) -> MessageReceived:
        """The payload of the `message_received` event that folds it into the history."""
        return MessageReceived(self.id, self.kind, self.name, self.data, self.sender, self.sent_at)


class SentOutcome(StrEnum):
    STORED = "stored"
    DUPLICATE = "duplicate"  # a message with this dedupe_key was stored already
    NO_RUN = "no_run"
    ENDED = "ended"  # the run has a final status: nothing more can reach it


@dataclass(frozen=True, slots=True)
class Sent:
    """What `Store.send` did. `message_id`: the stored message's (or the duplicate's
    original); `status`: the run's status (the final one, when ENDED)."""

    outcome: SentOutcome
    message_id: int | None = None
    status: RunStatus | None = None


@dataclass(frozen=True, slots=True)
class Claim:
    """A run this worker now leases, with its history so far and its undelivered messages
    (in the order they were stored)."""

    run_id: str
    workflow: str
    input: str
    epoch: int
    events: tuple[Event, ...]
    inbox: tuple[Delivery, ...] = ()
    priority: int = 0  # the run's: the children it starts inherit it

    @property
    def lease(self) -> Lease:
        return Lease(self.run_id, self.epoch)


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """Events to append to a leased run, and optionally the run's new state.

    Committed only while `epoch` is still the run's lease epoch. `status=None` keeps
    the run running under its lease; PENDING releases it, due at `available_at`.
    `consumed`: ids of inbox messages folded into `events`; they leave the inbox in the
    same fenced transaction, so a message is in the history exactly once.
    `starts`: child runs to create and `messages` to send to other runs, in the same
    transaction, only if the checkpoint is fenced in (and not when a retried commit finds it
    applied already): a child exists exactly when its parent's history says it was started,
    and a parent hears of its child's end exactly when the child's history says it ended. A
    start whose id is taken by another run is not made; the parent is told at once, with a
    `child` message saying so (durably.errors.ChildIdTaken).
    `input`: the run continues as new with this input; its earlier events are deleted.
    """

    run_id: str
    epoch: int
    events: tuple[Event, ...]
    status: RunStatus | None = None
    result: str | None = None
    error: ErrorInfo | None = None
    available_at: datetime | None = None
    consumed: tuple[int, ...] = ()
    starts: tuple[NewRun, ...] = ()
    messages: tuple[Message, ...] = ()
    # The run continues as new (durably.continue_as_new): this is its input from now on,
    # and its events before this checkpoint's first are deleted.
    input: str | None = None
    version: str | None = None  # with `input`: the new generation's workflow version
    # A person's action (a leased parked run's retry, skip, fail, decision): recorded in the
    # audit trail if the checkpoint is fenced in (not again when a retried commit finds it in).
    audit: Audit | None = None
    # Its events set durably events (EVENT_SET): their latest values are kept for callers
    # (durably.stores.outputs), and callers waiting on the run are woken after the commit.
    publishes: bool = False

"""The Store protocol: what the engine asks of a database, in the engine's words.

Every time-dependent call takes `now`; no store reads the clock. Every write of a leased
run carries the lease epoch and is refused when the epoch is stale (fencing).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Protocol, TypeVar

from durably.core.audit import Audit, AuditEntry
from durably.core.history import ErrorInfo, Event
from durably.core.payloads import MessageReceived
from durably.core.queues import Queue
from durably.core.status import RunStatus
from durably.stores.bulk import BulkStore
from durably.stores.outputs import OutputStore
from durably.stores.webhooks import WebhookStore

__all__ = [
    "Checkpoint",
    "Claim",
    "Delivery",
    "Ended",
    "EngineStore",
    "Happened",
    "Lease",
    "Message",
    "NewRun",
    "OperatorStore",
    "RunRecord",
    "RunStats",
    "Sent",
    "SentOutcome",
    "Serves",
    "Store",
    "WorkerBeat",
]

T = TypeVar("T")


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


class EngineStore(Protocol):
    """What a worker asks of a database as it runs workflows: create and claim runs, keep
    their leases, read their inboxes, commit their checkpoints, run transactional steps,
    wake workers, and keep the state of gates and schedules. A new dialect starts here."""

    url: str  # safe to print: the password is redacted

    def create_run(self, run: NewRun, *, now: datetime) -> tuple[RunRecord, bool]:
        """Create a pending run due now (or at `run.due`), with its attributes, in one
        transaction; if the id exists, return that run and False, writing nothing. A
        debounced run (`run.debounce`) joins the gathering run of its workflow and key if
        there is one (False): that run takes its input and its due time (never past the
        run's own `due_by`; not moved while the run has mail), and counts one more start."""
        ...

    def create_runs(self, runs: Sequence[NewRun], *, now: datetime) -> list[tuple[RunRecord, bool]]:
        """`create_run` for each run, in one transaction; the answers in order. An id given
        twice is created once, by its first occurrence; the later ones answer False."""
        ...

    def create_claimed(
        self, run: NewRun, owner: str, *, now: datetime, lease: timedelta
    ) -> tuple[RunRecord, Claim] | None:
        """Create `run` and claim it for `owner` in one transaction, as `create_run` then
        `claim` would (its claim in its history, its lease `lease` long), waking no worker:
        a start in the process of a worker with a free slot, which runs it at once. None if
        the id is taken: nothing written (`create_run` tells what is there). Not for a
        debounced run or one due later (ValueError)."""
        ...

    def claim(
        self,
        owner: str,
        workflows: Serves,
        *,
        now: datetime,
        lease: timedelta,
        limit: int,
        queues: Sequence[Queue] | None = None,
    ) -> list[Claim]:
        """Lease up to `limit` due runs of these workflows (pending, or with an expired lease)
        whose version is served (or was never recorded), lowest rank first
        (durably.core.priority: the due time less a minute per level of priority); each claim
        carries the run's undelivered messages. `queues`: only runs on these, within each
        one's limits, handed out between keys as durably.core.queues says (None: runs of
        every queue, limits aside: a tool's claim, not a worker's)."""
        ...

    def renew(self, leases: Sequence[Lease], *, now: datetime, lease: timedelta) -> set[str]:
        """Extend these leases; return the run ids whose lease is still held."""
        ...

    def mail(self, run_ids: Collection[str]) -> dict[str, tuple[Delivery, ...]]:
        """The undelivered messages of those of these runs that have any, each run's in the
        order they were stored: what a worker's running runs are sent while it holds them
        (a cancel, a pause). A read; the holder folds them and empties the inbox by its
        checkpoints, as it does its claim's."""
        ...

    def commit(self, checkpoints: Sequence[Checkpoint], *, now: datetime) -> list[bool]:
        """Apply checkpoints in one transaction; False where the epoch was stale.

        Idempotent, so that a commit whose outcome is unknown (its connection died before
        the answer came) can be tried again: a checkpoint is identified by its run and its
        first event (every checkpoint the engine writes has one). A checkpoint whose first
        event is in the history already was applied: it is reported True and nothing of it
        is written again."""
        ...

    def transact(
        self,
        lease: Lease,
        work: Callable[[Any], Checkpoint],
        *,
        now: datetime,
        committing: Callable[[], None] | None = None,
    ) -> bool:
        """One write transaction for a transactional step. If `lease` still holds the run,
        call `work(connection)`, whose writes go through that connection, then apply the
        checkpoint it returns (fenced, like `commit`), call `committing()`, and commit: the
        writes and the checkpoint are durable together or not at all.

        False when the lease is stale: before the work (which then never runs), or at the
        checkpoint's fence (the work is rolled back). What `work` or `committing` raises rolls
        everything back and is raised as it is. StoreUnavailable when the connection was lost
        once the work had begun: whether it committed is unknown (the history will say)."""
        ...

    def send(self, message: Message, *, now: datetime) -> Sent:
        """Put a message in its run's inbox, in one transaction, unless the run does not
        exist or has ended (NO_RUN, ENDED) or a message with its dedupe_key is there already
        (DUPLICATE). A pending run is made due now and workers are woken; a running run's
        holder gets the message at its next claim; a parked run keeps it."""
        ...

    def wake(self, run_ids: Collection[str], *, now: datetime) -> None:
        """Make these runs due now if they are pending and wait for later (due after `now`,
        or only for a message), and wake workers if that made any due. A run that is not
        pending (running, parked, ended) or not there is left as it is. What a gate does
        for the runs waiting in its line when an attempt's end opens it."""
        ...

    def watch(self, wake: Callable[[], None]) -> Callable[[], None]:
        """Call `wake`, from a thread of the store's, when another process may have made a
        run due (started one, or handed one back); returns the call that stops watching.

        Best effort: a wake-up that is missed is covered by the worker's poll."""
        ...

    def update_gate(self, name: str, change: Callable[[str | None], tuple[str, T]]) -> T:
        """Under the gate's lock: pass its state (None if new) to `change`, store the new
        state it returns, and return its answer."""
        ...

    def update_schedule(self, name: str, change: Callable[[str | None], tuple[str, T]]) -> T:
        """Under the schedule's lock: pass its state (None if new) to `change`, store the new
        state it returns, and return its answer (durably.core.schedules)."""
        ...

    def schedules(self) -> dict[str, str]:
        """Every schedule's state, by name."""
        ...

    def beat(self, worker: WorkerBeat) -> None:
        """Record that `worker` is alive (create or update it by name)."""
        ...

    def prune(self, before: datetime, *, limit: int) -> int:
        """Delete up to `limit` runs that ended (completed, failed, timed out, cancelled)
        before `before`, oldest first, with their histories, in one transaction; how many.
        Parked, paused and unfinished runs are never deleted."""
        ...


class OperatorStore(Protocol):
    """What people and programs read and do outside a worker's hot path: a run and its
    history, pages of runs, the counts a scrape or the dashboard shows, the workers, and a
    person's actions (take a parked run, fork an ended one, import an exported one)."""

    url: str

    def fork(
        self,
        run: NewRun,
        events: Sequence[Event],
        *,
        source: str,
        note: Event,
        now: datetime,
        audit: Audit | None = None,
    ) -> bool:
        """Restart the ended run `source` as `run`: create it, pending and due now, with
        `events` as its whole history (seq from 1, its run_started first), and append `note`
        to `source`'s history after its last event (`note.seq` is not used), and `audit` to
        the audit trail as an action on `source`, in one transaction. False, writing nothing,
        if `source` has not ended or `run.id` is taken."""
        ...

    def record_audit(self, entry: Audit, *, now: datetime, run_id: str | None = None) -> None:
        """Append `entry` to the audit trail, on its own: an action that is no single write of
        the store (a dashboard login or logout, the release of a dead worker's leases). With
        `run_id`, the entry names that run and its workflow."""
        ...

    def audit_trail(
        self,
        *,
        limit: int,
        before: tuple[datetime, int] | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        by: str | None = None,
        run_id: str | None = None,
    ) -> list[AuditEntry]:
        """Up to `limit` entries of the audit trail, newest first (ties by id, descending):
        recorded at or after `since` and before `until`, by `by`, on `run_id`. `before`: the
        (at, id) of the last entry of the previous page; only those after it in that order."""
        ...

    def import_run(self, run: NewRun, events: Sequence[Event], *, now: datetime) -> bool:
        """Create `run`, pending and due now, with `events` as its whole history (their seqs
        as given): a run exported from another store (durably.client.exports). False, writing
        nothing, if its id is taken."""
        ...

    def move_version(
        self,
        run_id: str,
        *,
        from_version: str,
        to_version: str,
        seen: int,
        note: Event,
        now: datetime,
        audit: Audit | None = None,
    ) -> bool:
        """Move the run to `to_version` (durably upgrade: its code replays the run's history),
        append `note` after its last event (`note.seq` is not used) and `audit` to the audit
        trail (a person asked for it), in one transaction, if it is still on `from_version`
        with `seen` events, has not ended, and no lease holds it (none, or an expired one).
        False, writing nothing, otherwise. A run made due by it wakes the workers."""
        ...

    def take(
        self,
        run_id: str,
        owner: str,
        statuses: Collection[RunStatus],
        *,
        now: datetime,
        lease: timedelta,
    ) -> Claim | None:
        """Lease one run if its status is one of `statuses` (a person acting on a parked run).
        A running run is taken only once its lease has expired (its worker presumed dead)."""
        ...

    def expire_leases(self, owner: str, *, now: datetime) -> int:
        """End the leases `owner` holds, so its runs can be claimed now; return how many.

        A worker restarted under the same name calls this: its previous incarnation is dead,
        and its runs need not wait for their leases to run out."""
        ...

    def watch_finished(self, wake: Callable[[str | None], None]) -> Callable[[], None]:
        """Call `wake(run_id)`, from a thread of the store's, after a commit of any process
        ends a run (a final or parked status); `wake(None)` when any run may have ended
        unheard (the listener was cut off). Returns once listening, so that a run that
        ends afterwards is heard; returns the call that stops watching.

        Best effort: a waiter re-reads the run now and then (durably.client.outcomes)."""
        ...

    def gates(self) -> dict[str, str]:
        """Every gate's state, by name."""
        ...

    def get_run(self, run_id: str) -> RunRecord | None: ...

    def history(self, run_id: str) -> list[Event]: ...

    def histories(self, run_ids: Sequence[str]) -> dict[str, list[Event]]:
        """The history of each of these runs, in one read (a page of runs and what each is
        doing); an unknown id is left out."""
        ...

    def runs(
        self,
        *,
        status: RunStatus | None = None,
        workflow: str | None = None,
        limit: int = 100,
        after: tuple[datetime, str] | None = None,
        patch: str | None = None,
        correlation_id: str | None = None,
        happened: Collection[Happened] = (),
        slower_than: timedelta | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        key: str | None = None,
        queue: str | None = None,
        attributes: Mapping[str, str] | None = None,
    ) -> list[RunRecord]:
        """Up to `limit` runs, most recently updated first, ties by id (descending): a stable
        order. `after` is the (updated_at, id) of the last run of the previous page: only the
        runs that come after it in that order are listed (keyset pagination). `patch`: only
        runs that have not ended and may be on the old side of that patch (durably.patched):
        of the workflows whose runs met it, those that did not take its new side (the old
        side, or not met yet). `correlation_id`: only the runs started with it. `happened`:
        only the runs to which each of these happened. `slower_than`: only the runs whose
        last change came longer than this after their start. `since`, `until`: only the runs
        started at or after, before, these times. `key`: only the runs started with this key.
        `queue`: only the runs on this queue (durably.core.queues: "default" is the default
        queue). `attributes`: only the runs started with each of these (name, value)."""
        ...

    def attributes(self, run_ids: Sequence[str]) -> dict[str, dict[str, str]]:
        """The attributes each of these runs was started with (durably.core.attributes), in
        one read (a page of runs); a run without any, or an unknown id, is left out."""
        ...

    def parked(
        self, *, decisions: bool, limit: int, after: tuple[datetime, str] | None = None
    ) -> list[RunRecord]:
        """Up to `limit` parked runs, found by their rows alone: with `decisions`, those that
        wait for a person's decision (an approval, an escalation), oldest first; else the
        others (the dead letters, escalations too), newest first. `after`: the
        (updated_at, id) of the last run of the previous page."""
        ...

    def unclaimable(self, known: Collection[str], *, now: datetime) -> dict[str, int]:
        """Due runs whose workflow is not in `known`: name -> count."""
        ...

    def unserved(
        self, serves: Mapping[str, Collection[str]], *, now: datetime
    ) -> dict[tuple[str, str], int]:
        """Due runs of these workflows pinned to a version not served: (name, version) ->
        count."""
        ...

    def prunable(self, before: datetime) -> int:
        """How many runs ended before `before` (what `prune` deletes, batch after batch)."""
        ...

    def stats(self, *, now: datetime) -> RunStats:
        """Runs by status, the oldest not ended, and the due ones waiting: what a metrics
        scrape shows, in one query."""
        ...

    def activity(self, *, since: datetime) -> list[Ended]:
        """How many runs ended (or were parked) in each minute since `since`, by status,
        oldest first: the dashboard's chart of the last hour, in one query."""
        ...

    def forget_worker(self, name: str) -> None:
        """The worker stopped: take it off the list."""
        ...

    def workers(self) -> list[WorkerBeat]:
        """Every worker that beat and was not forgotten, by name (dead ones too: see
        WorkerBeat.alive; those silent for a day are dropped by the next beat)."""
        ...


class Store(EngineStore, OperatorStore, BulkStore, OutputStore, WebhookStore, Protocol):
    """Every store (SQLite, PostgreSQL) is all three; one contract suite (tests/contract) runs
    against each."""

    def close(self) -> None: ...

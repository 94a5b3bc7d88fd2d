"""The Store protocol: what the engine asks of a database, in the engine's words.

Every time-dependent call takes `now`; no store reads the clock. Every write of a leased
run carries the lease epoch and is refused when the epoch is stale (fencing).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol, TypeVar

from durably.core.audit import Audit, AuditEntry
from durably.core.history import Event
from durably.core.queues import Queue
from durably.core.status import RunStatus
from durably.stores.bulk import BulkStore
from durably.stores.outputs import OutputStore
from durably.stores.records import (
    Checkpoint,
    Claim,
    Delivery,
    Ended,
    Happened,
    Lease,
    Message,
    NewRun,
    RunRecord,
    RunStats,
    Sent,
    Serves,
    WorkerBeat,
)
from durably.stores.webhooks import WebhookStore

__all__ = [
    "EngineStore",
    "OperatorStore",
    "Store",
]

T = TypeVar("T")


class EngineStore(Protocol):
    """What a worker asks of a database as it runs workflows: create and claim runs, keep
    their leases, read their inboxes, commit their checkpoints, run transactional steps,
    wake workers, and keep the state of gates and schedules. A new dialect starts here."""

    url: str  # safe to print: the password is redacted
    # How many of a worker's commits may usefully be in flight at once: it commits on as many
    # threads (durably.runtime.committer). 1 where one transaction writes at a time.
    writers: int

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

"""What both SQL stores do the same way: the reads people and programs make (a run, its
history, pages of runs, the stats a scrape asks for, the workers), and the small writes of
the operator's side (pruning, worker beats), and the writes from outside a worker that may
make runs due (a message in a run's inbox, a fork, an import, a wake), each one call of a
query module in one transaction.

A dialect (stores/sqlite/, stores/postgres/) says how it runs a piece of work on a connection
(`_reading`, `_writing`) and which SQL it speaks (`dialect`); the hot paths whose shape
differs between the two databases (creating and claiming runs, committing checkpoints,
wake-ups) are its own.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

from durably.core.audit import Audit, AuditEntry
from durably.core.bulk import BulkJob, BulkRun, Matching, NewBulkJob, Outcome, RunFilter
from durably.core.history import Event
from durably.core.outputs import PublishedEvent, StreamItem, StreamWrite
from durably.core.status import RunStatus
from durably.core.webhooks import NewWebhook, Outgoing, Settlement, Webhook, WebhookDelivery
from durably.stores.records import (
    Ended,
    Happened,
    Message,
    NewRun,
    RunRecord,
    RunStats,
    Sent,
    SentOutcome,
    WorkerBeat,
)
from durably.stores.sql import (
    attributes,
    audit,
    bulk,
    effects,
    forking,
    inbox,
    outputs,
    pruning,
    reads,
    rekeying,
    versions,
    waking,
    webhooks,
    workers,
)
from durably.stores.sql.reads import Dialect
from durably.stores.sql.stats import activity, run_stats
from durably.stores.sql.tally import Tally
from durably.stores.webhooks import Retried

__all__ = ["SqlStore"]

R = TypeVar("R")
T = TypeVar("T")


class SqlStore(ABC):
    """The part of a Store that is the same SQL on every dialect."""

    url: str
    dialect: Dialect
    schema_found: int  # the schema version opening found: 0 if it created it, less if it migrated
    _skip_locked = ""  # how a take keeps concurrent takers apart (SQLite: its write lock)
    _notices_trigger: str | None = None  # made with the first webhook (durably.stores.sql.schema)
    _tally: Tally | None = None  # the ended runs a scrape counted (Store.stats)

    @abstractmethod
    def _reading(self, read: Callable[[Any], R]) -> R:
        """`read(connection)`: a read that is safe to run again on a fresh connection."""

    @abstractmethod
    def _writing(self, write: Callable[[Any], R]) -> R:
        """`write(connection)` in one transaction."""

    @abstractmethod
    def _writing_waking(self, write: Callable[[Any], R], woke: Callable[[R], bool]) -> R:
        """`write(connection)` in one transaction; if `woke(its answer)`, runs are due now:
        the workers listening are woken once it has committed."""

    @abstractmethod
    def _writing_outputs(self, write: Callable[[Any], R], told: Callable[[R], list[str]]) -> R:
        """`write(connection)` in one transaction; callers waiting on the runs `told(its
        answer)` names are woken once it has committed (durably.stores.outputs)."""

    @abstractmethod
    def _update_state(
        self, table: str, name: str, change: Callable[[str | None], tuple[str, T]]
    ) -> T:
        """Read `name`'s state in `table`, write what `change` makes of it, and answer what
        `change` answered, in one transaction that holds the row."""

    # -- the state of gates and schedules, one read-modify-write each -------------------

    def update_gate(self, name: str, change: Callable[[str | None], tuple[str, T]]) -> T:
        # Run again on PostgreSQL after a lost connection. If it died before the transaction
        # began, that is plainly safe. If it died during COMMIT, the first change may have
        # been applied, and it is applied twice: at worst a rate-limit token is spent twice,
        # or a concurrency slot is held until its hold ends. Conservative, never unsafe.
        return self._update_state("durably_gates", name, change)

    def update_schedule(self, name: str, change: Callable[[str | None], tuple[str, T]]) -> T:
        # Twice, on a lost connection: a tick planned twice starts once (its run's id).
        return self._update_state("durably_schedules", name, change)

    # -- writes from outside a worker that may make runs due ------------------------------
    # Each is safe to repeat on PostgreSQL after a lost connection: a send with a dedupe_key
    # (the client always gives one) is found as a DUPLICATE, a fork or an import whose answer
    # was lost answers False (its id is taken; the caller reads the run to tell that from a
    # refusal), and a run due now stays due now.

    def send(self, message: Message, *, now: datetime) -> Sent:
        def woke(sent: Sent) -> bool:
            return sent.outcome is SentOutcome.STORED and sent.status is RunStatus.PENDING

        return self._writing_waking(lambda db: inbox.send(db, self.dialect, message, now=now), woke)

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
        def fork(db: Any) -> bool:
            return forking.fork(
                db, self.dialect, run, events, source=source, note=note, now=now, audit=audit
            )

        return self._writing_waking(fork, bool)

    def import_run(self, run: NewRun, events: Sequence[Event], *, now: datetime) -> bool:
        def insert(db: Any) -> bool:
            return effects.insert_run(db, self.dialect, run, events, now=now)

        return self._writing_waking(insert, bool)

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
        def move(db: Any) -> bool:
            return versions.move(
                db,
                self.dialect,
                run_id,
                from_version=from_version,
                to_version=to_version,
                seen=seen,
                note=note,
                now=now,
                audit=audit,
            )

        return self._writing_waking(move, bool)

    def wake(self, run_ids: Collection[str], *, now: datetime) -> None:
        if run_ids:
            self._writing_waking(lambda db: waking.wake(db, self.dialect, run_ids, now=now), bool)

    # -- reading ------------------------------------------------------------------------

    # -- what runs publish (durably.stores.outputs) ---------------------------------------

    def append_stream(
        self, run_id: str, epoch: int, writes: Sequence[StreamWrite], *, now: datetime
    ) -> bool:
        def append(db: Any) -> bool | None:
            return outputs.append(db, self.dialect, run_id, epoch, writes, now=now)

        return self._writing_outputs(append, lambda new: [run_id] if new else []) is not None

    def published_events(
        self, run_id: str, keys: Sequence[str] | None = None
    ) -> list[PublishedEvent]:
        return self._reading(lambda db: outputs.events(db, self.dialect, run_id, keys))

    def read_stream(
        self, run_id: str, key: str, *, offset: int = 0, limit: int = 1_000
    ) -> list[StreamItem]:
        return self._reading(
            lambda db: outputs.stream(db, self.dialect, run_id, key, offset=offset, limit=limit)
        )

    def get_run(self, run_id: str) -> RunRecord | None:
        return self._reading(lambda db: reads.get_run(db, self.dialect, run_id))

    def history(self, run_id: str) -> list[Event]:
        return self.histories([run_id]).get(run_id, [])

    def histories(self, run_ids: Sequence[str]) -> dict[str, list[Event]]:
        return self._reading(lambda db: reads.histories(db, self.dialect, run_ids))

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
        def page(db: Any) -> list[RunRecord]:
            return reads.runs(
                db,
                self.dialect,
                status=status,
                workflow=workflow,
                limit=limit,
                after=after,
                patch=patch,
                correlation_id=correlation_id,
                happened=happened,
                slower_than=slower_than,
                since=since,
                until=until,
                key=key,
                queue=queue,
                attributes=attributes,
            )

        return self._reading(page)

    def attributes(self, run_ids: Sequence[str]) -> dict[str, dict[str, str]]:
        return self._reading(lambda db: attributes.read(db, self.dialect, run_ids))

    def parked(
        self, *, decisions: bool, limit: int, after: tuple[datetime, str] | None = None
    ) -> list[RunRecord]:
        return self._reading(
            lambda db: reads.parked(db, self.dialect, decisions=decisions, limit=limit, after=after)
        )

    def unclaimable(self, known: Collection[str], *, now: datetime) -> dict[str, int]:
        return self._reading(lambda db: reads.unclaimable(db, self.dialect, known, now=now))

    def unserved(
        self, serves: Mapping[str, Collection[str]], *, now: datetime
    ) -> dict[tuple[str, str], int]:
        return self._reading(lambda db: workers.unserved(db, self.dialect, serves, now=now))

    def gates(self) -> dict[str, str]:
        return self._reading(lambda db: reads.states(db, "durably_gates"))

    def schedules(self) -> dict[str, str]:
        return self._reading(lambda db: reads.states(db, "durably_schedules"))

    def prunable(self, before: datetime) -> int:
        return self._reading(lambda db: pruning.prunable(db, self.dialect, before))

    def stats(self, *, now: datetime) -> RunStats:
        if self._tally is None:  # made on first use: a store that no scrape reads needs none
            self._tally = Tally()
        tally = self._tally
        return self._reading(lambda db: run_stats(db, self.dialect, tally, now=now))

    def activity(self, *, since: datetime) -> list[Ended]:
        return self._reading(lambda db: activity(db, self.dialect, since=since))

    def workers(self) -> list[WorkerBeat]:
        return self._reading(workers.listed)

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
        def page(db: Any) -> list[AuditEntry]:
            return audit.trail(
                db,
                self.dialect,
                limit=limit,
                before=before,
                since=since,
                until=until,
                by=by,
                run_id=run_id,
            )

        return self._reading(page)

    # -- the operator's writes (each safe to repeat) ------------------------------------

    def prune(self, before: datetime, *, limit: int) -> int:
        # A second try deletes what is left.
        return self._writing(lambda db: pruning.prune(db, self.dialect, before, limit=limit))

    def beat(self, worker: WorkerBeat) -> None:
        self._writing(lambda db: workers.beat(db, self.dialect, worker))

    # -- payloads rewritten in place (durably keys rotate) ---------------------------------

    def payload_rows(self, kinds: Collection[str]) -> int:
        """How many rows hold payloads (runs, events of `kinds`, inbox messages)."""
        return self._reading(lambda db: rekeying.count(db, self.dialect, kinds))

    def rewrite_payloads(
        self,
        change: rekeying.TextChange,
        change_event: rekeying.EventChange,
        kinds: Collection[str],
        *,
        batch: int,
    ) -> Iterator[int]:
        """Rewrite every payload through `change` (events of `kinds` through
        `change_event`), `batch` rows a transaction; yields the rows each batch read."""
        return rekeying.rewrite(
            self._writing, self.dialect, change, change_event, kinds, batch=batch
        )

    def forget_worker(self, name: str) -> None:
        self._writing(lambda db: workers.forget(db, self.dialect, name))

    def record_audit(self, entry: Audit, *, now: datetime, run_id: str | None = None) -> None:
        # Repeated on PostgreSQL after a lost connection, like the other writes here: an entry
        # of an action that is no store write (a login) may then show twice, never none.
        self._writing(lambda db: audit.record(db, self.dialect, entry, now=now, run_id=run_id))

    # -- bulk jobs (durably.core.bulk) ------------------------------------------------------

    def create_bulk_job(self, job: NewBulkJob, *, now: datetime) -> tuple[BulkJob, bool]:
        # Repeated on PostgreSQL after a lost connection: a job made by the first try is
        # found by its fingerprint, unfinished, and answered as it is (False).
        return self._writing(lambda db: bulk.create(db, self.dialect, job, now=now))

    def matching(self, run_filter: RunFilter, *, limit: int) -> Matching:
        return self._reading(lambda db: bulk.matching(db, self.dialect, run_filter, limit=limit))

    def bulk_job(self, job_id: str) -> BulkJob | None:
        return self._reading(lambda db: bulk.job(db, self.dialect, job_id))

    def bulk_jobs(self, *, limit: int, unfinished: bool = False) -> list[BulkJob]:
        return self._reading(
            lambda db: bulk.jobs(db, self.dialect, limit=limit, unfinished=unfinished)
        )

    def bulk_runs(self, job_id: str, *, outcome: Outcome | None, limit: int) -> list[BulkRun]:
        return self._reading(
            lambda db: bulk.runs(db, self.dialect, job_id, outcome=outcome, limit=limit)
        )

    def settle_bulk_runs(
        self, job_id: str, skipped: Mapping[str, str], *, now: datetime
    ) -> BulkJob | None:
        # Twice, on a lost connection: a run settled by the first try is left as it is.
        return self._writing(lambda db: bulk.settle(db, self.dialect, job_id, skipped, now=now))

    # -- webhooks (durably.core.webhooks); their deliveries are made by a trigger ----------

    def add_webhook(self, webhook: NewWebhook, *, now: datetime) -> Webhook:
        # Repeated on PostgreSQL after a lost connection: the second try's insert of the same
        # id fails, and the caller's add is reported as failed though it was made; rare, and
        # `webhooks list` shows it.
        trigger = self._notices_trigger

        def add(db: Any) -> Webhook:
            return webhooks.add(db, self.dialect, webhook, now=now, trigger=trigger)

        return self._writing(add)

    def webhooks(self) -> list[Webhook]:
        return self._reading(webhooks.listed)

    def remove_webhook(self, webhook_id: str) -> bool:
        trigger = self._notices_trigger is not None
        return self._writing(
            lambda db: webhooks.remove(db, self.dialect, webhook_id, trigger=trigger)
        )

    def take_deliveries(self, *, now: datetime, lease: timedelta, limit: int) -> list[Outgoing]:
        # Repeated after a lost connection: deliveries the first try leased stay leased until
        # their lease ends, and are sent then (at least once, never lost).
        def take(db: Any) -> list[Outgoing]:
            return webhooks.take(
                db, self.dialect, now=now, lease=lease, limit=limit, lock=self._skip_locked
            )

        return self._writing(take)

    def settle_deliveries(self, settled: Sequence[Settlement], *, now: datetime) -> list[bool]:
        # Repeated on PostgreSQL after a lost connection: what the first try wrote is fenced
        # out (False), as it was recorded.
        return self._writing(lambda db: webhooks.settle(db, self.dialect, settled, now=now))

    def deliveries(
        self, *, webhook: str | None = None, dead: bool = False, limit: int = 100
    ) -> list[WebhookDelivery]:
        return self._reading(
            lambda db: webhooks.deliveries(
                db, self.dialect, webhook=webhook, dead=dead, limit=limit
            )
        )

    def retry_delivery(self, delivery_id: int, *, now: datetime) -> Retried:
        return self._writing(lambda db: webhooks.retry(db, self.dialect, delivery_id, now=now))

    def due_deliveries(self, *, now: datetime) -> int:
        return self._reading(lambda db: webhooks.due(db, self.dialect, now=now))

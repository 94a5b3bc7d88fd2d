"""The PostgreSQL store: many workers on many machines share one database.

Claims lock candidate rows with FOR UPDATE SKIP LOCKED, so concurrent workers never wait
for each other's picks. A batch of checkpoints, like starting a run, is one statement: one
round trip and one transaction. Workers hear of new runs by LISTEN/NOTIFY. A connection that
died with the server is replaced, and the call tried again on a fresh one (pg_connections);
commits are idempotent, and a claim whose answer was lost is found again by re-reading.
Nothing lives on a session but LISTEN, psycopg's prepared statements and the SET of a
synchronous_commit option: behind a transaction pooler (pgbouncer=transaction in the URL,
durably.stores.postgres.options) LISTEN goes to a listen_url or is off, prepared statements
are off, and the SET is refused.
"""

from __future__ import annotations

import functools
import itertools
import logging
import random
import threading
import time
from collections.abc import Callable, Collection, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

import psycopg
from psycopg import sql

from durably.core.queues import Queue
from durably.core.status import RunStatus
from durably.core.webhooks import StatusChange
from durably.errors import StoreUnavailable
from durably.stores.postgres import claims, partitions, starts
from durably.stores.postgres.commit import OUTPUTS_CHANNEL, WAKE_CHANNEL, Batch, run_lines
from durably.stores.postgres.connections import Connections, redact
from durably.stores.postgres.listen import CHANGES_CHANNEL, Wakeups, switch_changes
from durably.stores.postgres.options import store_options
from durably.stores.records import (
    Checkpoint,
    Claim,
    Delivery,
    Lease,
    NewRun,
    RunRecord,
    Serves,
    WorkerBeat,
)
from durably.stores.sql import (
    debounce,
    inbox,
    reads,
    transactions,
)
from durably.stores.sql.due import due_statements
from durably.stores.sql.migrating import check_schema, migrate, not_current, schema_version
from durably.stores.sql.queues import limited_of, plain_condition
from durably.stores.sql.rows import claimed_start, created_record, ts
from durably.stores.sql.schema import LATEST_VERSION
from durably.stores.sql.store import SqlStore

__all__ = ["PostgresStore", "redact"]

T = TypeVar("T")
R = TypeVar("R")
log = logging.getLogger("durably.store")

_WAKE_CHANNEL = WAKE_CHANNEL
_DONE_CHANNEL = "durably_done"  # payload: the ids of the runs a commit ended, a line each
_DEADLOCK_TRIES = 5
_PARTITIONS_EVERY = 3_600.0  # seconds between a store's making of partitions ahead
_MIGRATION_LOCK = 0x6475726162  # any fixed number; serialises concurrent migrations


class PostgresStore(SqlStore):
    """A PostgreSQL database reached through a psycopg connection pool.

    `create=False` opens only a durably store that exists, at this durably's schema version:
    its tables are not created, nor migrated."""

    _skip_locked = " FOR UPDATE SKIP LOCKED"  # concurrent takers of deliveries pass each other

    def __init__(
        self,
        url: str,
        *,
        pool_size: int = 4,
        connect_timeout: timedelta = timedelta(seconds=10),
        synchronous_commit: str | None = None,
        pgbouncer: str | None = None,
        listen_url: str | None = None,
        create: bool = True,
    ) -> None:
        options = store_options(
            url, synchronous_commit=synchronous_commit, pgbouncer=pgbouncer, listen_url=listen_url
        )
        self._url = url = options.url
        self.url = redact(url)
        self.dialect = reads.POSTGRES
        # Two commits in flight: the next batch leaves while one waits for its fsync, on a
        # connection of its own (the pool keeps the others for claims and the app's calls).
        self.writers = 2 if pool_size >= 3 else 1
        self.synchronous_commit = options.synchronous_commit
        self.transaction_pooling = options.transaction_pooling
        self._wakeups = Wakeups(options.listen_url, self.url, self._notify)
        self._pool_size, self._connect_timeout = pool_size, connect_timeout
        self._transaction_pool: Connections | None = None
        self._transactions_lock = threading.Lock()
        self._turns: dict[str, str] = {}  # per limited queue: the key its claims stopped at
        self._width = options.history_partition
        self._partitions_made: float | None = None  # when it last made partitions ahead
        self._told: set[str] = set()  # said once: partitions refused ("ahead"), JIT left on
        self._db = Connections(
            url,
            self.url,
            size=pool_size,
            connect_timeout=connect_timeout,
            configure=self._configure,
            prepare=not self.transaction_pooling,
        )
        try:
            self.schema_found = self._open_schema(create=create)
        except BaseException:
            self._db.close()  # nobody else can: the caller gets no store to close
            raise

    def beat(self, worker: WorkerBeat) -> None:
        super().beat(worker)
        self.keep_partitions(ts(worker.seen_at))

    def keep_partitions(self, now: float) -> None:
        """Make the history's partitions ahead of `now` (an hour apart at most): never fails,
        but says why it could not (its rows go to the DEFAULT partition meanwhile)."""
        last = self._partitions_made
        if last is not None and abs(now - last) < _PARTITIONS_EVERY:  # (clocks may disagree)
            return
        self._partitions_made = now
        try:
            self._db.run(lambda db: partitions.make_ahead(db, now, self._width, told=self._told))
        except (psycopg.Error, StoreUnavailable) as exc:
            if "ahead" not in self._told:  # e.g. a role that may not create tables
                self._told.add("ahead")
                log.warning("the history's partitions were not made ahead: %s", exc)

    def prune(self, before: datetime, *, limit: int) -> int:
        # Partitions born before `before` first, each dropped once its runs are gone; then
        # the rest row by row (the DEFAULT partition, and runs of partitions not yet past).
        deleted = 0
        for partition in self._db.run(partitions.listed):
            if partition.high is None or partition.high > ts(before) or deleted >= limit:
                continue
            deleted += self._db.run(
                functools.partial(
                    partitions.prune_partition,
                    partition=partition,
                    before=ts(before),
                    limit=limit - deleted,
                ),
                transaction=True,
            )
        return deleted + (super().prune(before, limit=limit - deleted) if deleted < limit else 0)

    def _configure(self, db: psycopg.Connection[Any]) -> None:
        # No JIT compilation: PostgreSQL compiles a statement whose estimated cost passes
        # jit_above_cost, and the estimates of a claim's pick grow with the table. Beside
        # 10,000,000 runs a claim of one took 20 ms, nearly all of it compiling (its plan ran
        # in under 1 ms; with JIT off the claim took 1.2-1.7 ms, measured). None of durably's
        # statements runs long enough to gain from it. A transaction pooler keeps no SET: there
        # the role's setting is checked once and, if on, the log says how to turn it off.
        if not self.transaction_pooling:
            db.execute("SET jit = off")
        elif "jit" not in self._told:
            self._told.add("jit")
            found = db.execute("SELECT current_setting('jit'), current_user").fetchone()
            if found is not None and found[0] == "on":
                log.warning(
                    "JIT compilation is on for the role %s at %s, and durably cannot turn it "
                    "off through a transaction pooler: beside millions of runs PostgreSQL would "
                    "compile a claim's statement at every claim (20 ms a claim where it takes "
                    "1.5). Turn it off for durably's role: ALTER ROLE %s SET jit = off",
                    found[1],
                    self.url,
                    found[1],
                )
        if self.synchronous_commit is not None:
            db.execute(
                sql.SQL("SET synchronous_commit = {}").format(sql.Literal(self.synchronous_commit))
            )

    # -- runs ---------------------------------------------------------------------------

    def create_run(self, run: NewRun, *, now: datetime) -> tuple[RunRecord, bool]:
        if run.debounce is not None:
            # One statement (with an audit entry: two, in a transaction). Repeated after a
            # lost connection: the same input and due time again; the repeat joins the run
            # the first try made, and counts its start twice.
            return self._db.run(
                lambda db: debounce.gather(db, reads.POSTGRES, run, now=now),
                transaction=run.audit is not None,
            )
        # Safe to repeat (ON CONFLICT DO NOTHING). A create whose answer was lost with its
        # connection is found on the second try as an existing run: (run, False).
        if self._db.run(lambda db: starts.create(db, run, now), transaction=run.audit is not None):
            return created_record(run, now), True
        existing = self.get_run(run.id)
        assert existing is not None
        return existing, False

    def create_runs(self, runs: Sequence[NewRun], *, now: datetime) -> list[tuple[RunRecord, bool]]:
        if not runs:
            return []
        if any(run.debounce is not None for run in runs):
            return self._db.run(lambda db: starts.create_each(db, runs, now), transaction=True)
        # Safe to repeat, like create_run: a second try finds the first's runs as existing.
        made = self._db.run(
            functools.partial(starts.create_many, runs=runs, now=now),
            transaction=any(run.audit is not None for run in runs),
        )
        others = list(dict.fromkeys(run.id for run in runs if run.id not in made))
        existing: dict[str, RunRecord] = {}
        if others:  # read after the insert: a run another transaction created is visible now
            existing = self._db.run(lambda db: starts.runs_by_id(db, others))
        outcomes: list[tuple[RunRecord, bool]] = []
        for run in runs:
            if run.id in made:
                made.discard(run.id)  # its first occurrence created it; a repeat found it
                existing[run.id] = created_record(run, now)
                outcomes.append((existing[run.id], True))
            else:
                outcomes.append((existing[run.id], False))
        return outcomes

    def create_claimed(
        self, run: NewRun, owner: str, *, now: datetime, lease: timedelta
    ) -> tuple[RunRecord, Claim] | None:
        made = claimed_start(run, owner, now, lease)  # ValueError before anything is written
        # Not safe to repeat as it is: a try whose answer was lost may have made the run, which
        # a second try would find taken. The second try looks for this owner's lease on it.
        created = self._db.run(
            lambda db: starts.create_claimed(db, run, owner, now, lease),
            transaction=run.audit is not None,
            after_loss=lambda db: starts.claimed_before(db, run, owner, now, lease),
        )
        return made if created else None

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
        if not workflows or limit <= 0:
            return []
        params = {
            "now": ts(now),
            "expires": ts(now + lease),
            "workflows": list(workflows),
            "limit": limit,
            "owner": owner,
        }
        if queues is not None and limited_of(queues):
            return claims.lease_limited(self._db, workflows, queues, params, self._turns)
        on_queues = plain_condition(reads.POSTGRES, queues)
        [picked] = due_statements(
            reads.POSTGRES, workflows, on_queues, now=ts(now), limit=limit, lock=claims.SKIP_LOCKED
        )
        return claims.lease_once(self._db, picked, "r.workflow = ANY(%(workflows)s)", params)

    def take(
        self,
        run_id: str,
        owner: str,
        statuses: Collection[RunStatus],
        *,
        now: datetime,
        lease: timedelta,
    ) -> Claim | None:
        params = {"now": ts(now), "expires": ts(now + lease), "run_id": run_id, "owner": owner}
        wanted = [str(status) for status in statuses]
        picked = claims.pick_one(run_id, wanted, ts(now))
        taken = claims.lease_once(self._db, picked, "r.id = %(run_id)s", params)
        return taken[0] if taken else None

    def renew(self, leases: Sequence[Lease], *, now: datetime, lease: timedelta) -> set[str]:
        if not leases:
            return set()
        params = (
            ts(now + lease),
            [item.run_id for item in leases],
            [item.epoch for item in leases],
        )
        rows = self._db.run(  # safe to repeat: the same expiry for the same epochs
            lambda db: db.execute(
                "UPDATE durably_runs AS r SET available_at = %s"
                " FROM unnest(%s::text[], %s::bigint[]) AS v(id, epoch)"
                " WHERE r.id = v.id AND r.lease_epoch = v.epoch AND r.status = 'running'"
                " RETURNING r.id",
                params,
            ).fetchall()
        )
        return {row[0] for row in rows}

    def mail(self, run_ids: Collection[str]) -> dict[str, tuple[Delivery, ...]]:
        ids = list(run_ids)
        return self._db.run(lambda db: inbox.mail(db, reads.POSTGRES, ids))

    def commit(self, checkpoints: Sequence[Checkpoint], *, now: datetime) -> list[bool]:
        if not checkpoints:
            return []
        batch = Batch(checkpoints, now)
        first, many = batch.apply, batch.many
        # safe to repeat: a checkpoint already applied is reported, not written again
        again = functools.partial(batch.apply, again=True)

        def commit_all() -> set[str]:
            try:
                return self._db.run(first, after_loss=again, transaction=many)
            except psycopg.errors.UniqueViolation:  # a try whose answer was lost did commit
                return self._db.run(again, transaction=many)

        fenced_in = _despite_deadlocks(commit_all) if many else commit_all()
        if len(fenced_in) < len({checkpoint.run_id for checkpoint in checkpoints}):
            # Refused: a stale epoch, or (when this is a retry) a run an earlier try already
            # moved on, to its end or a wait. Rare; ask again, telling the two apart.
            fenced_in = self._db.run(again, transaction=many)
        return [checkpoint.run_id in fenced_in for checkpoint in checkpoints]

    def transact(
        self,
        lease: Lease,
        work: Callable[[Any], Checkpoint],
        *,
        now: datetime,
        committing: Callable[[], None] | None = None,
    ) -> bool:
        began = False

        def transact(db: psycopg.Connection[Any]) -> bool:
            nonlocal began
            if not transactions.holds(db, reads.POSTGRES, lease):
                return False
            began = True
            checkpoint = transactions.work_in(work, db, lambda: _left(db))
            if lease.run_id not in Batch([checkpoint], now).apply(db):
                raise transactions.Refused
            if committing is not None:
                committing()
            return True

        def after_loss(db: psycopg.Connection[Any]) -> bool:
            if not began:  # a dead pooled connection, found out before any work: try again
                return transact(db)
            raise StoreUnavailable(
                f"the connection to {self.url} was lost while a transactional step of run "
                f"{lease.run_id!r} committed: whether it did is in the run's history"
            )

        try:
            with transactions.user_errors():
                return self._transactions().run(transact, transaction=True, after_loss=after_loss)
        except transactions.Refused:
            return False

    def expire_leases(self, owner: str, *, now: datetime) -> int:
        # Safe to repeat; only the count (which is for a log line) may read 0 the second time.
        return self._db.run(
            lambda db: (
                db.execute(
                    "UPDATE durably_runs SET available_at = %s"
                    " WHERE lease_owner = %s AND status = 'running' AND available_at > %s",
                    (ts(now), owner, ts(now)),
                ).rowcount
            )
        )

    def watch(self, wake: Callable[[], None]) -> Callable[[], None]:
        return self._wakeups.listen(_WAKE_CHANNEL, lambda _: wake())

    def watch_finished(self, wake: Callable[[str | None], None]) -> Callable[[], None]:
        # one notification a batch: the ids of the runs it ended, a line each
        return self._listen(_DONE_CHANNEL, wake)

    def watch_outputs(self, wake: Callable[[str | None], None]) -> Callable[[], None]:
        return self._listen(OUTPUTS_CHANNEL, wake)

    def _listen(self, channel: str, wake: Callable[[str | None], None]) -> Callable[[], None]:
        def heard(payload: str | None) -> None:
            # the ids of runs, a line each ("": a poke, or too many to name: any run)
            for run_id in payload.split("\n") if payload else [None]:
                wake(run_id)

        return self._wakeups.listen(channel, heard)

    def watch_status_changes(self, heard: Callable[[StatusChange], None]) -> Callable[[], None]:
        def received(payload: str | None) -> None:
            if payload:  # "" is a poke; None, a lost connection: changes may have gone unheard
                heard(StatusChange.from_json(payload))

        return self._wakeups.listen(CHANGES_CHANNEL, received, needed_by="the change stream")

    def set_status_changes(self, on: bool | None = None) -> bool:
        return self._db.run(lambda db: switch_changes(db, on), transaction=True)

    def _notify(self, channel: str) -> None:
        self._db.run(lambda db: db.execute(f"NOTIFY {channel}"))

    def _update_state(
        self, table: str, name: str, change: Callable[[str | None], tuple[str, T]]
    ) -> T:
        def read_modify_write(db: psycopg.Connection[Any]) -> T:
            db.execute(
                f"INSERT INTO {table} (name, state) VALUES (%s, '') ON CONFLICT DO NOTHING",
                (name,),
            )
            row = db.execute(
                f"SELECT state FROM {table} WHERE name = %s FOR UPDATE",
                (name,),
            ).fetchone()
            state, answer = change(row[0] if row and row[0] else None)
            db.execute(f"UPDATE {table} SET state = %s WHERE name = %s", (state, name))
            return answer

        return self._db.run(read_modify_write, transaction=True)

    def _reading(self, read: Callable[[Any], R]) -> R:
        return self._db.run(read)  # each read is safe to repeat on a fresh connection

    def _writing(self, write: Callable[[Any], R]) -> R:
        return self._db.run(write, transaction=True)

    def _writing_outputs(self, write: Callable[[Any], R], told: Callable[[R], list[str]]) -> R:
        def writing(db: psycopg.Connection[Any]) -> R:
            done = write(db)
            named = told(done)
            if named:  # sent at commit
                db.execute("SELECT pg_notify(%s, %s)", (OUTPUTS_CHANNEL, run_lines(named)))
            return done

        return self._db.run(writing, transaction=True)

    def _writing_waking(self, write: Callable[[Any], R], woke: Callable[[R], bool]) -> R:
        def writing(db: psycopg.Connection[Any]) -> R:
            done = write(db)
            if woke(done):
                db.execute("SELECT pg_notify(%s, '')", (_WAKE_CHANNEL,))  # sent at commit
            return done

        return self._db.run(writing, transaction=True)

    def close(self) -> None:
        self._db.close()
        with self._transactions_lock:
            if self._transaction_pool is not None:
                self._transaction_pool.close()
                self._transaction_pool = None

    def _transactions(self) -> Connections:
        """The connections transactional steps run on: a pool of their own, made on first
        use, so that bodies holding connections never keep the worker from committing."""
        with self._transactions_lock:
            if self._transaction_pool is None:
                self._transaction_pool = Connections(
                    self._url,
                    self.url,
                    size=self._pool_size,
                    connect_timeout=self._connect_timeout,
                    configure=self._configure,
                    prepare=not self.transaction_pooling,
                )
            return self._transaction_pool

    # -- helpers ------------------------------------------------------------------------

    def _open_schema(self, *, create: bool) -> int:
        """Check the schema, and bring an older one up to date if `create`; the version found.
        A current schema costs one read, without a lock or DDL: a role that may only read and
        write rows opens it (docs/how-to/least-privilege.md)."""
        found = self._db.run(lambda db: schema_version(db, "postgres"))
        if found == LATEST_VERSION:
            return found
        if not create:  # the CLI's commands: a wrong database is an error, not a new store
            self._db.run(lambda db: check_schema(db, "postgres", self.url))
            return LATEST_VERSION  # migrated meanwhile by another process
        try:
            found = self._db.run(self._migrate, transaction=True)
        except psycopg.errors.InsufficientPrivilege as exc:
            refused = exc.diag.message_primary or str(exc).splitlines()[0]
            why = f", and this role may not change the schema ({refused})"
            raise not_current(found, self.url, why) from None
        # the history's partitions of now and ahead, before any worker beats: by the clock
        # here, the one time the store reads it (workers' beats go by theirs)
        self.keep_partitions(time.time())
        return found

    def _migrate(self, db: psycopg.Connection[Any]) -> int:
        """In one transaction, under a lock: safe to repeat, it reads the version first."""
        db.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        return migrate(db, "postgres", self.url)


def _despite_deadlocks(work: Callable[[], T]) -> T:
    """`work()`, tried again when PostgreSQL broke a deadlock by rolling it back: a parent
    and its child that end at once each lock the other's row (a cancel one way, an end the
    other), in commits of their own."""
    for tries in itertools.count(1):
        try:
            return work()
        except psycopg.errors.DeadlockDetected:
            if tries >= _DEADLOCK_TRIES:
                raise
            time.sleep(random.uniform(0, 0.01 * tries))
    raise AssertionError("unreachable")


def _left(db: psycopg.Connection[Any]) -> str:
    """How a transactional step's work left the transaction: "open", "aborted" or "ended"."""
    status = db.info.transaction_status
    if status == psycopg.pq.TransactionStatus.INTRANS:
        return "open"
    return "aborted" if status == psycopg.pq.TransactionStatus.INERROR else "ended"

"""The embedded store: one SQLite file in WAL mode, shared by worker processes on one machine
(its connections and transactions: durably.stores.sqlite.connections)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Collection, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from durably.core.history import EventKind
from durably.core.queues import Queue
from durably.core.status import RunStatus
from durably.core.webhooks import StatusChange
from durably.errors import ConfigError
from durably.stores.records import Checkpoint, Claim, Delivery, Lease, NewRun, RunRecord, Serves
from durably.stores.sql import (
    attributes,
    audit,
    debounce,
    inbox,
    reads,
    transactions,
)
from durably.stores.sql.migrating import check_schema, migrate
from durably.stores.sql.queues import pick
from durably.stores.sql.rows import (
    RUN_COLUMNS,
    claimed_data,
    claimed_start,
    run_of,
    ts,
)
from durably.stores.sql.schema import LATEST_VERSION, SQLITE_NOTICES_TRIGGER
from durably.stores.sql.store import SqlStore
from durably.stores.sqlite import commit
from durably.stores.sqlite.connections import SYNCHRONOUS, Connections
from durably.stores.sqlite.notices import Notices

__all__ = ["SQLiteStore"]

T = TypeVar("T")
R = TypeVar("R")

_IDS_PER_READ = 500  # under SQLite's limit on a statement's parameters
_INSERT_EVENT = (
    "INSERT INTO durably_events (run_id, seq, kind, at, position, name, attempt, data)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_CREATE = (
    "INSERT INTO durably_runs (id, workflow, status, input, created_at, updated_at, available_at,"
    " event_count, priority, version, correlation_id, queue, queue_key)"
    " VALUES (?, ?, 'pending', ?, ?, ?, ?, 1, ?, ?, ?, ?, ?)"
    " ON CONFLICT (id) DO NOTHING"
)


class SQLiteStore(SqlStore):
    _notices_trigger = SQLITE_NOTICES_TRIGGER
    """A SQLite file; each thread gets its own connection.

    Every status change its connections commit is sent to the processes of this machine that
    listen (durably listen), after the commit, while any does: a temporary trigger of the
    connection's own gathers them, made when a listener comes and dropped when the last goes
    (a stat of a directory a write transaction), so that with nobody listening it costs
    nothing.

    `create=False` opens only a durably store that exists, at this durably's schema version:
    the file is not created, nor the schema migrated (what the CLI's commands do, so that a
    wrong path is an error rather than a new, empty store)."""

    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: str = "FULL",
        busy_timeout: timedelta = timedelta(seconds=30),
        create: bool = True,
    ) -> None:
        if synchronous.upper() not in SYNCHRONOUS:
            raise ValueError(f"synchronous must be one of {', '.join(SYNCHRONOUS)}")
        if not create and not Path(path).is_file():
            raise ConfigError(_no_file(Path(path)))
        self.path = str(path)
        self.dialect = reads.SQLITE
        self.url = f"sqlite:///{Path(path).absolute()}"  # the same from any directory
        self.writers = 1  # one writer at a time, whatever the threads
        self._turns: dict[str, str] = {}  # per limited queue: the key its claims stopped at
        self._notices = Notices(self.path)  # what other processes hear of (wake-ups, ...)
        self._db = Connections(
            self.path,
            synchronous=synchronous.upper(),
            busy_timeout=busy_timeout,
            create=create,
            notices=self._notices,
        )
        if create:
            self.schema_found = self._migrate()
        else:
            self._check_schema()  # a durably store at this durably's version, opened as it is
            self.schema_found = LATEST_VERSION

    # -- runs ---------------------------------------------------------------------------

    def create_run(self, run: NewRun, *, now: datetime) -> tuple[RunRecord, bool]:
        if run.debounce is not None:  # due later: no worker to wake
            with self._db.write() as db:
                return debounce.gather(db, reads.SQLITE, run, now=now)
        at = ts(now)
        with self._db.write() as db:
            created = db.execute(_CREATE, _created_row(run, at)).rowcount == 1
            if created:
                _write_start(db, run, at, now)
            row = db.execute(
                f"SELECT {RUN_COLUMNS} FROM durably_runs WHERE id = ?", (run.id,)
            ).fetchone()
        if created:
            self._notices.due()
        return run_of(row), created

    def create_runs(self, runs: Sequence[NewRun], *, now: datetime) -> list[tuple[RunRecord, bool]]:
        at = ts(now)
        created: list[bool] = []
        rows: dict[str, tuple[object, ...]] = {}
        gathered: dict[int, tuple[RunRecord, bool]] = {}  # debounced starts, by position
        with self._db.write() as db:
            for index, run in enumerate(runs):
                if run.debounce is not None:
                    gathered[index] = debounce.gather(db, reads.SQLITE, run, now=now)
                    created.append(False)  # due later: no worker to wake
                    continue
                made = db.execute(_CREATE, _created_row(run, at)).rowcount == 1
                if made:
                    _write_start(db, run, at, now)
                created.append(made)
            ids = list(dict.fromkeys(run.id for run in runs if run.debounce is None))
            for first in range(0, len(ids), _IDS_PER_READ):
                chunk = ids[first : first + _IDS_PER_READ]
                found = db.execute(
                    f"SELECT {RUN_COLUMNS} FROM durably_runs WHERE id IN ({_marks(chunk)})", chunk
                )
                rows.update((row[0], row) for row in found)
        if any(created):
            self._notices.due()
        return [
            gathered[index] if index in gathered else (run_of(rows[run.id]), made)
            for index, (run, made) in enumerate(zip(runs, created, strict=True))
        ]

    def create_claimed(
        self, run: NewRun, owner: str, *, now: datetime, lease: timedelta
    ) -> tuple[RunRecord, Claim] | None:
        made = claimed_start(run, owner, now, lease)  # ValueError before anything is written
        at = ts(now)
        with self._db.write() as db:
            if db.execute(_CREATE, _created_row(run, at)).rowcount != 1:
                return None
            _write_start(db, run, at, now)
            # the claim's own statement: its status change is heard as any claim's is
            self._lease(db, run.id, RunStatus.PENDING, None, owner, at, ts(now + lease))
        return made

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
        at, expires = ts(now), ts(now + lease)
        with self._db.leasing() as db:  # the write lock: what limited queues' counts need
            picked = pick(
                db, reads.SQLITE, workflows, queues, now=at, limit=limit, lock="", turns=self._turns
            )
            taken = [
                self._lease(db, run_id, previous_status, previous_owner, owner, at, expires)
                for run_id, previous_status, previous_owner in picked
            ]
            return inbox.claims(db, reads.SQLITE, taken)

    def take(
        self,
        run_id: str,
        owner: str,
        statuses: Collection[RunStatus],
        *,
        now: datetime,
        lease: timedelta,
    ) -> Claim | None:
        at, expires = ts(now), ts(now + lease)
        wanted = [str(status) for status in statuses]
        with self._db.leasing() as db:
            row = db.execute(
                "SELECT status, lease_owner FROM durably_runs"
                f" WHERE id = ? AND status IN ({_marks(wanted)})"
                " AND (status <> 'running' OR available_at <= ?)",
                (run_id, *wanted, at),
            ).fetchone()
            if row is None:
                return None
            taken = self._lease(db, run_id, row[0], row[1], owner, at, expires)
            [claim] = inbox.claims(db, reads.SQLITE, [taken])
        return claim

    def renew(self, leases: Sequence[Lease], *, now: datetime, lease: timedelta) -> set[str]:
        expires = ts(now + lease)
        held: set[str] = set()
        with self._db.leasing() as db:
            for item in leases:
                cursor = db.execute(
                    "UPDATE durably_runs SET available_at = ? WHERE id = ? AND lease_epoch = ?"
                    " AND status = 'running'",
                    (expires, item.run_id, item.epoch),
                )
                if cursor.rowcount == 1:
                    held.add(item.run_id)
        return held

    def mail(self, run_ids: Collection[str]) -> dict[str, tuple[Delivery, ...]]:
        with self._db.read() as db:
            return inbox.mail(db, reads.SQLITE, list(run_ids))

    def commit(self, checkpoints: Sequence[Checkpoint], *, now: datetime) -> list[bool]:
        # Looking for each checkpoint's first event up front costs ~20% of a batch, so the
        # look-up runs only where the answer may be wrong: for a refused checkpoint (stale,
        # or applied by an earlier try of this commit), and for the whole batch again when
        # its events collide with ones written already (an earlier try did commit).
        at = ts(now)
        try:
            with self._db.write() as db:
                results, due_now = commit.apply(db, checkpoints, at, look_first=False)
        except sqlite3.IntegrityError:
            with self._db.write() as db:
                results, due_now = commit.apply(db, checkpoints, at, look_first=True)
        self._notices.committed(checkpoints, results, due_now)
        return results

    def transact(
        self,
        lease: Lease,
        work: Callable[[Any], Checkpoint],
        *,
        now: datetime,
        committing: Callable[[], None] | None = None,
    ) -> bool:
        at = ts(now)
        try:
            with transactions.user_errors(), self._db.write() as db:
                if not transactions.holds(db, reads.SQLITE, lease):
                    return False
                checkpoint = transactions.work_in(work, db, lambda: _left(db))
                [fenced_in], due_now = commit.apply(db, [checkpoint], at, look_first=False)
                if not fenced_in:
                    raise transactions.Refused
                if committing is not None:
                    committing()
        except transactions.Refused:
            return False
        finally:
            self._db.release()  # a transactional step's thread ends after this
        self._notices.committed([checkpoint], [True], due_now)
        return True

    def expire_leases(self, owner: str, *, now: datetime) -> int:
        at = ts(now)
        with self._db.write() as db:
            return db.execute(
                "UPDATE durably_runs SET available_at = ?"
                " WHERE lease_owner = ? AND status = 'running' AND available_at > ?",
                (at, owner, at),
            ).rowcount

    def watch(self, wake: Callable[[], None]) -> Callable[[], None]:
        return self._notices.watch(wake)

    def watch_finished(self, wake: Callable[[str | None], None]) -> Callable[[], None]:
        return self._notices.watch_finished(wake)

    def watch_outputs(self, wake: Callable[[str | None], None]) -> Callable[[], None]:
        return self._notices.watch_outputs(wake)

    def watch_status_changes(self, heard: Callable[[StatusChange], None]) -> Callable[[], None]:
        return self._notices.watch_status_changes(heard)

    def _writing_outputs(self, write: Callable[[Any], R], told: Callable[[R], list[str]]) -> R:
        with self._db.write() as db:
            done = write(db)
        self._notices.published(told(done))
        return done

    def set_status_changes(self, on: bool | None = None) -> bool:
        if on is False:
            raise ConfigError(
                "the SQLite store's change stream cannot be turned off: it costs nothing while "
                "nobody listens (a datagram to each listening process of this machine)"
            )
        return True

    def _update_state(
        self, table: str, name: str, change: Callable[[str | None], tuple[str, T]]
    ) -> T:
        with self._db.write() as db:
            row = db.execute(f"SELECT state FROM {table} WHERE name = ?", (name,)).fetchone()
            state, answer = change(None if row is None else row[0])
            db.execute(
                f"INSERT INTO {table} (name, state) VALUES (?, ?)"
                " ON CONFLICT (name) DO UPDATE SET state = excluded.state",
                (name, state),
            )
        return answer

    def close(self) -> None:
        self._db.close()
        self._notices.close()

    # -- transactions --------------------------------------------------------------------

    def _reading(self, read: Callable[[Any], R]) -> R:
        with self._db.read() as db:
            return read(db)

    def _writing(self, write: Callable[[Any], R]) -> R:
        with self._db.write() as db:
            return write(db)

    def _writing_waking(self, write: Callable[[Any], R], woke: Callable[[R], bool]) -> R:
        with self._db.write() as db:
            done = write(db)
        if woke(done):  # after the commit: a worker woken before it would find nothing
            self._notices.due()
        return done

    def _migrate(self) -> int:
        with self._db.write() as db:
            return migrate(db, "sqlite", self.url)

    def _check_schema(self) -> None:
        with self._db.read() as db:
            check_schema(db, "sqlite", self.url)

    @staticmethod
    def _lease(
        db: sqlite3.Connection,
        run_id: str,
        previous_status: str,
        previous_owner: str | None,
        owner: str,
        at: float,
        expires: float,
    ) -> tuple[str, str, str, int, int, int]:
        """Give the run a new lease epoch and record the claim in its history; the claim's row
        (run id, workflow, input, epoch, inbox count, priority)."""
        workflow, input_, epoch, count, mail, priority = db.execute(
            "UPDATE durably_runs SET status = 'running', lease_owner = ?,"
            " lease_epoch = lease_epoch + 1, available_at = ?, updated_at = ?,"
            " event_count = event_count + 1, began_at = coalesce(began_at, ?) WHERE id = ?"
            " RETURNING workflow, input, lease_epoch, event_count, inbox, priority",
            (owner, expires, at, at, run_id),
        ).fetchone()
        data = claimed_data(owner, epoch, previous_status, previous_owner)
        db.execute(_INSERT_EVENT, (run_id, count, EventKind.CLAIMED, at, None, None, None, data))
        return run_id, workflow, input_, epoch, mail, priority


def _left(db: sqlite3.Connection) -> str:
    """How a transactional step's work left the transaction: "open", or "ended"."""
    return "open" if db.in_transaction else "ended"


def _created_row(run: NewRun, at: float) -> tuple[object, ...]:
    """The parameters of _CREATE for `run`, created at `at`."""
    return (
        run.id,
        run.workflow,
        run.input,
        at,
        at,
        at if run.due is None else ts(run.due),
        run.priority,
        run.version,
        run.correlation_id,
        run.queue,
        run.key,
    )


def _write_start(db: sqlite3.Connection, run: NewRun, at: float, now: datetime) -> None:
    """What goes with a run its create just wrote, in its transaction: its run_started
    event, its attributes, and the audit entry of a person's start."""
    db.execute(_INSERT_EVENT, _started_row(run, at))
    attributes.insert(db, reads.SQLITE, run.id, run.attributes)
    if run.audit is not None:
        audit.record(db, reads.SQLITE, run.audit, now=now, run_id=run.id)


def _started_row(run: NewRun, at: float) -> tuple[object, ...]:
    """The parameters of _INSERT_EVENT for `run`'s run_started event."""
    return (run.id, 1, EventKind.RUN_STARTED, at, None, None, None, run.started)


def _no_file(path: Path) -> str:
    return (
        f"there is no durably store at {path.absolute()} (no such file). A URL "
        f"sqlite:///relative.db is relative to the current directory ({Path.cwd()}); "
        "sqlite:////abs/path.db is absolute"
    )


def _marks(values: Sequence[object]) -> str:
    return ", ".join("?" * len(values)) or "NULL"

"""The PostgreSQL store: many workers on many machines share one database.

Claims lock candidate rows with FOR UPDATE SKIP LOCKED, so concurrent workers never wait
for each other's picks. A batch of checkpoints, like starting a run, is one statement: one
round trip and one transaction. Workers hear of new runs by LISTEN/NOTIFY.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import asdict
from datetime import datetime, timedelta
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit, urlunsplit

import psycopg
from psycopg import sql
from psycopg_pool import ConnectionPool, PoolTimeout

from durably.core.history import Event, EventKind
from durably.core.status import RunStatus
from durably.errors import ConfigError, StoreUnavailable
from durably.stores.base import Checkpoint, Claim, Lease, NewRun, RunRecord
from durably.stores.rows import (
    EVENT_COLUMNS,
    RUN_COLUMNS,
    check_version,
    checkpoint_params,
    claimed_data,
    event_of,
    event_row,
    from_ts,
    run_of,
    ts,
)
from durably.stores.schema import CREATE_META, LATEST_VERSION, migrations

__all__ = ["PostgresStore", "redact"]

T = TypeVar("T")
log = logging.getLogger("durably.store")

_SYNCHRONOUS_COMMIT = ("on", "off", "local", "remote_write", "remote_apply")

_INSERT_EVENT = (
    "INSERT INTO durably_events (run_id, seq, kind, at, position, name, attempt, data)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
)
_PICK_DUE = """
    WHERE available_at <= %(now)s AND workflow = ANY(%(workflows)s)
    ORDER BY available_at LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED"""
_PICK_ONE = """
    WHERE id = %(run_id)s AND status = ANY(%(statuses)s)
    FOR UPDATE"""
_LEASE = """
WITH picked AS (
    SELECT id, status AS previous_status, lease_owner AS previous_owner FROM durably_runs
    {pick}
)
UPDATE durably_runs AS r SET
    status = 'running', lease_owner = %(owner)s, lease_epoch = r.lease_epoch + 1,
    available_at = %(expires)s, updated_at = %(now)s, event_count = r.event_count + 1
FROM picked WHERE r.id = picked.id
RETURNING r.id, r.workflow, r.input, r.lease_epoch, r.event_count,
    picked.previous_status, picked.previous_owner
"""
_COMMIT = """
WITH v AS (
    SELECT * FROM unnest(%(id)s::text[], %(epoch)s::bigint[], %(event_count)s::int[],
        %(status)s::text[], %(result)s::text[], %(error_class)s::text[],
        %(error_message)s::text[], %(available_at)s::float8[])
        AS v(id, epoch, event_count, status, result, error_class, error_message, available_at)
), fenced AS (
    UPDATE durably_runs AS r SET
        updated_at = %(now)s,
        event_count = coalesce(v.event_count, r.event_count),
        status = coalesce(v.status, r.status),
        result = CASE WHEN v.status IS NULL THEN r.result ELSE v.result END,
        error_class = CASE WHEN v.status IS NULL THEN r.error_class ELSE v.error_class END,
        error_message = CASE WHEN v.status IS NULL THEN r.error_message ELSE v.error_message END,
        available_at = CASE WHEN v.status IS NULL THEN r.available_at ELSE v.available_at END,
        lease_owner = CASE WHEN v.status IS NULL THEN r.lease_owner ELSE NULL END
    FROM v
    WHERE r.id = v.id AND r.lease_epoch = v.epoch AND r.status = 'running'
    RETURNING r.id
), appended AS (
    INSERT INTO durably_events (run_id, seq, kind, at, position, name, attempt, data)
    SELECT e.* FROM unnest(%(e_run_id)s::text[], %(e_seq)s::int[], %(e_kind)s::text[],
        %(e_at)s::float8[], %(e_position)s::int[], %(e_name)s::text[], %(e_attempt)s::int[],
        %(e_data)s::text[]) AS e(run_id, seq, kind, at, position, name, attempt, data)
    WHERE e.run_id IN (SELECT id FROM fenced)
), woken AS (
    SELECT pg_notify('durably_due', '') FROM v JOIN fenced USING (id)
    WHERE v.status = 'pending' AND v.available_at <= %(now)s
)
SELECT id FROM fenced WHERE (SELECT count(*) FROM woken) >= 0
"""
# One statement, so one round trip: the fenced update of every run in the batch, the insert
# of the events of those whose epoch held (a CTE sees the update's RETURNING), and a wake-up
# for runs handed back due now. (`woken` is referenced so that PostgreSQL evaluates it.)
_EVENT_ARRAYS = (
    "e_run_id",
    "e_seq",
    "e_kind",
    "e_at",
    "e_position",
    "e_name",
    "e_attempt",
    "e_data",
)
_CREATE = """
WITH created AS (
    INSERT INTO durably_runs (id, workflow, status, input, created_at, updated_at, available_at,
        event_count)
    VALUES (%(id)s, %(workflow)s, 'pending', %(input)s, %(at)s, %(at)s, %(at)s, 1)
    ON CONFLICT (id) DO NOTHING
    RETURNING id
), started AS (
    INSERT INTO durably_events (run_id, seq, kind, at)
    SELECT id, 1, %(kind)s, %(at)s FROM created
), woken AS (
    SELECT pg_notify('durably_due', %(workflow)s) FROM created
)
SELECT count(*) FROM created WHERE (SELECT count(*) FROM woken) >= 0
"""
_WAKE_CHANNEL = "durably_due"
_MIGRATION_LOCK = 0x6475726162  # any fixed number; serialises concurrent migrations


class PostgresStore:
    """A PostgreSQL database reached through a psycopg connection pool."""

    def __init__(
        self,
        url: str,
        *,
        pool_size: int = 4,
        connect_timeout: timedelta = timedelta(seconds=10),
        synchronous_commit: str | None = None,
    ) -> None:
        url, from_url = _without_option(url, "synchronous_commit")
        synchronous_commit = synchronous_commit or from_url
        if synchronous_commit is not None and synchronous_commit not in _SYNCHRONOUS_COMMIT:
            raise ConfigError(
                f"synchronous_commit={synchronous_commit!r} is not a PostgreSQL setting: use one "
                f"of {', '.join(_SYNCHRONOUS_COMMIT)} (on, the default, is the durable one)"
            )
        self.url = redact(url)
        self.synchronous_commit = synchronous_commit
        self._url = url
        self._pool = ConnectionPool(
            url,
            min_size=1,
            max_size=max(1, pool_size),
            open=False,
            timeout=connect_timeout.total_seconds(),
            name="durably",
            kwargs={"autocommit": True},  # one-statement writes are their own transaction
            configure=self._configure,
        )
        try:  # one plain connection first: a refused one is reported at once, with why
            psycopg.connect(
                url, connect_timeout=max(1, int(connect_timeout.total_seconds()))
            ).close()
        except psycopg.Error as exc:
            raise StoreUnavailable(
                f"cannot reach the PostgreSQL store at {self.url}: {redact(str(exc).strip())}; "
                "is the server running and the URL right?"
            ) from None
        try:
            self._pool.open(wait=True, timeout=connect_timeout.total_seconds())
        except PoolTimeout as exc:
            self._pool.close()
            raise StoreUnavailable(
                f"cannot reach the PostgreSQL store at {self.url} within "
                f"{connect_timeout.total_seconds():g}s; is the server running and the URL right?"
            ) from exc
        self._migrate()

    def _configure(self, db: psycopg.Connection[Any]) -> None:
        if self.synchronous_commit is not None:
            db.execute(
                sql.SQL("SET synchronous_commit = {}").format(sql.Literal(self.synchronous_commit))
            )

    # -- runs ---------------------------------------------------------------------------

    def create_run(self, run: NewRun, *, now: datetime) -> tuple[RunRecord, bool]:
        at = ts(now)
        params = {**asdict(run), "at": at, "kind": str(EventKind.RUN_STARTED)}
        with self._statement() as db:
            row = db.execute(_CREATE, params).fetchone()
        if row is not None and row[0] == 1:
            return _created_record(run, now), True
        existing = self.get_run(run.id)
        assert existing is not None
        return existing, False

    def claim(
        self,
        owner: str,
        workflows: Collection[str],
        *,
        now: datetime,
        lease: timedelta,
        limit: int,
    ) -> list[Claim]:
        if not workflows or limit <= 0:
            return []
        at = ts(now)
        params = {
            "now": at,
            "expires": ts(now + lease),
            "workflows": list(workflows),
            "limit": limit,
            "owner": owner,
        }
        with self._transaction() as db:
            return self._lease(db, _PICK_DUE, params)

    def take(
        self,
        run_id: str,
        owner: str,
        statuses: Collection[RunStatus],
        *,
        now: datetime,
        lease: timedelta,
    ) -> Claim | None:
        params = {
            "now": ts(now),
            "expires": ts(now + lease),
            "run_id": run_id,
            "statuses": [str(status) for status in statuses],
            "owner": owner,
        }
        with self._transaction() as db:
            taken = self._lease(db, _PICK_ONE, params)
        return taken[0] if taken else None

    def renew(self, leases: Sequence[Lease], *, now: datetime, lease: timedelta) -> set[str]:
        if not leases:
            return set()
        with self._statement() as db:
            rows = db.execute(
                "UPDATE durably_runs AS r SET available_at = %s"
                " FROM unnest(%s::text[], %s::bigint[]) AS v(id, epoch)"
                " WHERE r.id = v.id AND r.lease_epoch = v.epoch AND r.status = 'running'"
                " RETURNING r.id",
                (
                    ts(now + lease),
                    [item.run_id for item in leases],
                    [item.epoch for item in leases],
                ),
            ).fetchall()
        return {row[0] for row in rows}

    def commit(self, checkpoints: Sequence[Checkpoint], *, now: datetime) -> list[bool]:
        if not checkpoints:
            return []
        at = ts(now)
        params = [checkpoint_params(checkpoint, at) for checkpoint in checkpoints]
        columns: dict[str, Any] = {
            key: [p[key] for p in params] for key in params[0] if key != "now"
        }
        rows = [event_row(c.run_id, event) for c in checkpoints for event in c.events]
        events = {name: [row[i] for row in rows] for i, name in enumerate(_EVENT_ARRAYS)}
        with self._statement() as db:
            fenced_in = {row[0] for row in db.execute(_COMMIT, {"now": at, **columns, **events})}
        return [checkpoint.run_id in fenced_in for checkpoint in checkpoints]

    def expire_leases(self, owner: str, *, now: datetime) -> int:
        with self._statement() as db:
            return db.execute(
                "UPDATE durably_runs SET available_at = %s"
                " WHERE lease_owner = %s AND status = 'running' AND available_at > %s",
                (ts(now), owner, ts(now)),
            ).rowcount

    def watch(self, wake: Callable[[], None]) -> Callable[[], None]:
        return _Listener(self._url, self.url, wake, self._notify).stop

    def _notify(self) -> None:
        with self._statement() as db:
            db.execute(f"NOTIFY {_WAKE_CHANNEL}")

    def update_gate(self, name: str, change: Callable[[str | None], tuple[str, T]]) -> T:
        with self._transaction() as db:
            db.execute(
                "INSERT INTO durably_gates (name, state) VALUES (%s, '') ON CONFLICT DO NOTHING",
                (name,),
            )
            row = db.execute(
                "SELECT state FROM durably_gates WHERE name = %s FOR UPDATE", (name,)
            ).fetchone()
            state, answer = change(row[0] if row and row[0] else None)
            db.execute("UPDATE durably_gates SET state = %s WHERE name = %s", (state, name))
        return answer

    def gates(self) -> dict[str, str]:
        with self._statement() as db:
            return dict(db.execute("SELECT name, state FROM durably_gates").fetchall())

    # -- reading ------------------------------------------------------------------------

    def get_run(self, run_id: str) -> RunRecord | None:
        with self._statement() as db:
            row = db.execute(
                f"SELECT {RUN_COLUMNS} FROM durably_runs WHERE id = %s", (run_id,)
            ).fetchone()
        return None if row is None else run_of(row)

    def history(self, run_id: str) -> list[Event]:
        with self._statement() as db:
            return self._histories(db, [run_id]).get(run_id, [])

    def runs(
        self, *, status: RunStatus | None = None, workflow: str | None = None, limit: int = 100
    ) -> list[RunRecord]:
        with self._statement() as db:
            rows = db.execute(
                f"SELECT {RUN_COLUMNS} FROM durably_runs"
                " WHERE (%(status)s::text IS NULL OR status = %(status)s)"
                " AND (%(workflow)s::text IS NULL OR workflow = %(workflow)s)"
                " ORDER BY updated_at DESC LIMIT %(limit)s",
                {
                    "status": None if status is None else str(status),
                    "workflow": workflow,
                    "limit": limit,
                },
            ).fetchall()
        return [run_of(row) for row in rows]

    def unclaimable(self, known: Collection[str], *, now: datetime) -> dict[str, int]:
        with self._statement() as db:
            rows = db.execute(
                "SELECT workflow, count(*) FROM durably_runs WHERE available_at <= %s"
                " AND NOT (workflow = ANY(%s)) GROUP BY workflow",
                (ts(now), list(known)),
            ).fetchall()
        return {name: count for name, count in rows}

    def close(self) -> None:
        self._pool.close()

    # -- connections and transactions ---------------------------------------------------

    @contextmanager
    def _transaction(self) -> Iterator[psycopg.Connection[Any]]:
        with self._statement() as db, db.transaction():
            yield db

    @contextmanager
    def _statement(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection in autocommit: each statement is its own transaction."""
        try:
            with self._pool.connection() as db:
                yield db
        except (psycopg.OperationalError, PoolTimeout) as exc:
            raise StoreUnavailable(
                f"the PostgreSQL store at {self.url} is unavailable: {exc}"
            ) from exc

    def _migrate(self) -> None:
        with self._transaction() as db:
            db.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            db.execute(CREATE_META)
            row = db.execute(
                "SELECT value FROM durably_meta WHERE key = 'schema_version'"
            ).fetchone()
            current = int(row[0]) if row else 0
            check_version(current, LATEST_VERSION, self.url)
            for version, statements in migrations("postgres", current):
                for statement in statements:
                    db.execute(statement)
                db.execute(
                    "INSERT INTO durably_meta (key, value) VALUES ('schema_version', %s)"
                    " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    (str(version),),
                )

    def _lease(self, db: psycopg.Connection[Any], pick: str, params: dict[str, Any]) -> list[Claim]:
        """Give the picked runs a new lease epoch and record each claim in its history."""
        taken = db.execute(_LEASE.format(pick=pick), params).fetchall()
        if not taken:
            return []
        owner, at = params["owner"], params["now"]
        with db.cursor() as cursor:
            cursor.executemany(
                _INSERT_EVENT,
                [
                    _claimed_row(run_id, count, at, owner, epoch, previous_status, previous_owner)
                    for run_id, _, _, epoch, count, previous_status, previous_owner in taken
                ],
            )
        histories = self._histories(db, [row[0] for row in taken])
        return [
            Claim(run_id, workflow, input_, epoch, tuple(histories.get(run_id, ())))
            for run_id, workflow, input_, epoch, *_ in taken
        ]

    @staticmethod
    def _histories(db: psycopg.Connection[Any], run_ids: list[str]) -> dict[str, list[Event]]:
        histories: dict[str, list[Event]] = {}
        rows = db.execute(
            f"SELECT run_id, {EVENT_COLUMNS} FROM durably_events"
            " WHERE run_id = ANY(%s) ORDER BY run_id, seq",
            (run_ids,),
        )
        for run_id, *event in rows:
            histories.setdefault(run_id, []).append(event_of(event))
        return histories


def _claimed_row(
    run_id: str,
    seq: int,
    at: float,
    owner: str,
    epoch: int,
    previous_status: str,
    previous_owner: str | None,
) -> tuple[Any, ...]:
    data = claimed_data(owner, epoch, previous_status, previous_owner)
    return (run_id, seq, EventKind.CLAIMED, at, None, None, None, data)


class _Listener:
    """LISTEN on the wake-up channel on a connection of its own, in a thread of its own.

    If the connection drops, it reconnects with backoff; meanwhile (and for any NOTIFY that
    is missed) the worker's poll finds due runs.
    """

    def __init__(
        self, url: str, shown_url: str, wake: Callable[[], None], poke: Callable[[], None]
    ) -> None:
        self._url, self._shown_url, self._wake, self._poke = url, shown_url, wake, poke
        self._stopping = threading.Event()
        self._listening = threading.Event()
        self._thread = threading.Thread(target=self._listen, name="durably-listen", daemon=True)
        self._thread.start()
        # Return once LISTEN is in effect, so that whatever the caller looks at next, nothing
        # started afterwards goes unheard (unless the server is slow to answer: then polling).
        self._listening.wait(timeout=5)

    def stop(self) -> None:
        self._stopping.set()
        with suppress(StoreUnavailable, psycopg.Error):
            self._poke()  # out of its wait now, not at its timeout
        self._thread.join(timeout=5)

    def _listen(self) -> None:
        pause, interrupted = 0.1, False
        while not self._stopping.is_set():
            try:
                with psycopg.connect(self._url, autocommit=True, connect_timeout=5) as db:
                    db.execute(f"LISTEN {_WAKE_CHANNEL}")
                    self._listening.set()
                    pause = 0.1
                    if interrupted:  # anything started while not listening
                        self._wake()
                        interrupted = False
                    while not self._stopping.is_set():
                        for _ in db.notifies(timeout=0.5, stop_after=1):
                            if not self._stopping.is_set():
                                self._wake()
            except psycopg.Error as exc:
                log.warning(
                    "wake-ups from %s interrupted (%s); polling until they are back",
                    self._shown_url,
                    redact(str(exc).strip()),
                )
                interrupted = True
                self._stopping.wait(pause)
                pause = min(pause * 2, 5.0)


def _without_option(url: str, name: str) -> tuple[str, str | None]:
    """The URL without the query option `name` (which libpq would refuse), and its value.

    The other options are kept byte for byte: libpq decodes them itself."""
    parts = urlsplit(url)
    kept, value = [], None
    for pair in parts.query.split("&") if parts.query else []:
        key, _, raw = pair.partition("=")
        if unquote(key) == name:
            value = unquote(raw)
        else:
            kept.append(pair)
    return urlunsplit(parts._replace(query="&".join(kept))), value


def _created_record(run: NewRun, now: datetime) -> RunRecord:
    at = from_ts(ts(now))  # as it reads back
    return RunRecord(
        id=run.id,
        workflow=run.workflow,
        status=RunStatus.PENDING,
        input=run.input,
        result=None,
        error=None,
        created_at=at,
        updated_at=at,
        available_at=at,
        lease_owner=None,
        lease_epoch=0,
        event_count=1,
    )


def redact(url: str) -> str:
    """The URL with its password replaced by ***, safe for logs and errors."""
    url = re.sub(r"(://[^:/@]*:)[^@/]*@", r"\1***@", url)
    return re.sub(r"(password=)[^&\s]*", r"\1***", url)

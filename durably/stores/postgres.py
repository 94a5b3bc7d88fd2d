"""The PostgreSQL store: many workers on many machines share one database.

Claims lock candidate rows with FOR UPDATE SKIP LOCKED, so concurrent workers never wait
for each other's picks. A batch of checkpoints is one round trip for the fenced update of
all runs and one pipelined insert of their events.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any, TypeVar

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from durably.core.history import Event, EventKind
from durably.core.status import RunStatus
from durably.errors import StoreUnavailable
from durably.stores.base import Checkpoint, Claim, Lease, NewRun, RunRecord
from durably.stores.rows import (
    EVENT_COLUMNS,
    RUN_COLUMNS,
    check_version,
    checkpoint_params,
    claimed_data,
    event_of,
    event_row,
    run_of,
    ts,
)
from durably.stores.schema import CREATE_META, LATEST_VERSION, migrations

__all__ = ["PostgresStore", "redact"]

T = TypeVar("T")

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
UPDATE durably_runs AS r SET
    updated_at = %(now)s,
    event_count = coalesce(v.event_count, r.event_count),
    status = coalesce(v.status, r.status),
    result = CASE WHEN v.status IS NULL THEN r.result ELSE v.result END,
    error_class = CASE WHEN v.status IS NULL THEN r.error_class ELSE v.error_class END,
    error_message = CASE WHEN v.status IS NULL THEN r.error_message ELSE v.error_message END,
    available_at = CASE WHEN v.status IS NULL THEN r.available_at ELSE v.available_at END,
    lease_owner = CASE WHEN v.status IS NULL THEN r.lease_owner ELSE NULL END
FROM unnest(%(id)s::text[], %(epoch)s::bigint[], %(event_count)s::int[], %(status)s::text[],
            %(result)s::text[], %(error_class)s::text[], %(error_message)s::text[],
            %(available_at)s::float8[])
    AS v(id, epoch, event_count, status, result, error_class, error_message, available_at)
WHERE r.id = v.id AND r.lease_epoch = v.epoch AND r.status = 'running'
RETURNING r.id
"""
_MIGRATION_LOCK = 0x6475726162  # any fixed number; serialises concurrent migrations


class PostgresStore:
    """A PostgreSQL database reached through a psycopg connection pool."""

    def __init__(
        self, url: str, *, pool_size: int = 4, connect_timeout: timedelta = timedelta(seconds=10)
    ) -> None:
        self.url = redact(url)
        self._pool = ConnectionPool(
            url,
            min_size=1,
            max_size=max(1, pool_size),
            open=False,
            timeout=connect_timeout.total_seconds(),
            name="durably",
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

    # -- runs ---------------------------------------------------------------------------

    def create_run(self, run: NewRun, *, now: datetime) -> tuple[RunRecord, bool]:
        at = ts(now)
        with self._transaction() as db:
            created = (
                db.execute(
                    "INSERT INTO durably_runs (id, workflow, status, input, created_at, updated_at,"
                    " available_at, event_count) VALUES (%s, %s, 'pending', %s, %s, %s, %s, 1)"
                    " ON CONFLICT (id) DO NOTHING",
                    (run.id, run.workflow, run.input, at, at, at),
                ).rowcount
                == 1
            )
            if created:
                db.execute(
                    _INSERT_EVENT, (run.id, 1, EventKind.RUN_STARTED, at, None, None, None, None)
                )
            row = db.execute(
                f"SELECT {RUN_COLUMNS} FROM durably_runs WHERE id = %s", (run.id,)
            ).fetchone()
        assert row is not None
        return run_of(row), created

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
        with self._transaction() as db:
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
        with self._transaction() as db:
            fenced_in = {row[0] for row in db.execute(_COMMIT, {"now": at, **columns}).fetchall()}
            events = [
                event_row(checkpoint.run_id, event)
                for checkpoint in checkpoints
                if checkpoint.run_id in fenced_in
                for event in checkpoint.events
            ]
            if events:
                with db.cursor() as cursor:
                    cursor.executemany(_INSERT_EVENT, events)
        return [checkpoint.run_id in fenced_in for checkpoint in checkpoints]

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
        with self._transaction() as db:
            return dict(db.execute("SELECT name, state FROM durably_gates").fetchall())

    # -- reading ------------------------------------------------------------------------

    def get_run(self, run_id: str) -> RunRecord | None:
        with self._transaction() as db:
            row = db.execute(
                f"SELECT {RUN_COLUMNS} FROM durably_runs WHERE id = %s", (run_id,)
            ).fetchone()
        return None if row is None else run_of(row)

    def history(self, run_id: str) -> list[Event]:
        with self._transaction() as db:
            return self._histories(db, [run_id]).get(run_id, [])

    def runs(
        self, *, status: RunStatus | None = None, workflow: str | None = None, limit: int = 100
    ) -> list[RunRecord]:
        with self._transaction() as db:
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
        with self._transaction() as db:
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
        try:
            with self._pool.connection() as db, db.transaction():
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


def redact(url: str) -> str:
    """The URL with its password replaced by ***, safe for logs and errors."""
    url = re.sub(r"(://[^:/@]*:)[^@/]*@", r"\1***@", url)
    return re.sub(r"(password=)[^&\s]*", r"\1***", url)

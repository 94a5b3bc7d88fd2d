"""Helpers for the Store contract tests: runs, events and checkpoints built the way the
engine builds them, and raw SQL on the database behind a store URL."""

from __future__ import annotations

import json
import queue
import sqlite3
import threading
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

from durably.core.history import ErrorInfo, Event, EventKind
from durably.core.status import RunStatus
from durably.core.webhooks import StatusChange
from durably.stores import Checkpoint, Claim, NewRun, Store
from durably.stores.sql.schema import CREATE_META, migrations
from durably.testing import FakeClock

__all__ = [
    "LEASE",
    "WORKFLOW",
    "checkpoint",
    "claim_only",
    "claimed_data",
    "execute_sql",
    "in_threads",
    "new_run",
    "older_schema",
    "step_events",
]

T = TypeVar("T")

LEASE = timedelta(seconds=30)
WORKFLOW = "send_invoice"


def new_run(run_id: str, workflow: str = WORKFLOW, input: str = '{"amount": 12}') -> NewRun:
    return NewRun(id=run_id, workflow=workflow, input=input)


def claim_only(
    store: Store,
    clock: FakeClock,
    run_id: str,
    *,
    owner: str = "worker-a",
    workflow: str = WORKFLOW,
) -> Claim:
    """Claim, as `owner`, what is due of `workflow`; it must be exactly this run."""
    claims = store.claim(owner, [workflow], now=clock.now(), lease=LEASE, limit=10)
    assert [claim.run_id for claim in claims] == [run_id]
    return claims[0]


def claimed_data(event: Event) -> dict[str, Any]:
    assert event.kind == EventKind.CLAIMED
    assert event.data is not None
    data: dict[str, Any] = json.loads(event.data)
    return data


def step_events(after: Claim | Sequence[Event], position: int, at: datetime) -> tuple[Event, ...]:
    """A step_started and step_completed pair, numbered on from the history so far."""
    history = after.events if isinstance(after, Claim) else after
    seq = history[-1].seq + 1
    name = f"step_{position}"
    return (
        Event(seq, EventKind.STEP_STARTED, at, position, name, 1, None),
        Event(seq + 1, EventKind.STEP_COMPLETED, at, position, name, 1, json.dumps(position)),
    )


def checkpoint(
    claim: Claim,
    events: tuple[Event, ...] = (),
    *,
    status: RunStatus | None = None,
    result: str | None = None,
    error: ErrorInfo | None = None,
    available_at: datetime | None = None,
    consumed: tuple[int, ...] = (),
) -> Checkpoint:
    """A checkpoint of a claimed run, under the claim's lease epoch."""
    return Checkpoint(
        run_id=claim.run_id,
        epoch=claim.epoch,
        events=events,
        status=status,
        result=result,
        error=error,
        available_at=available_at,
        consumed=consumed,
    )


def execute_sql(url: str, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
    """Run one statement on the database behind a store URL (write `?` for parameters)."""
    if url.startswith("sqlite:///"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
            rows = db.execute(sql, tuple(params)).fetchall()
        db.close()
        return rows
    import psycopg

    with psycopg.connect(url, autocommit=True) as db:
        cursor = db.execute(sql.replace("?", "%s"), tuple(params))  # type: ignore[arg-type]
        return cursor.fetchall() if cursor.description else []


def older_schema(url: str, version: int) -> None:
    """Make, in the empty database behind `url`, the schema an older durably left: its
    migrations up to `version`, and that version recorded."""
    dialect = "sqlite" if url.startswith("sqlite") else "postgres"
    statements = [s for v, group in migrations(dialect, 0) if v <= version for s in group]
    for statement in [CREATE_META, *statements]:
        execute_sql(url, statement)
    execute_sql(url, "INSERT INTO durably_meta VALUES ('schema_version', ?)", [str(version)])


def in_threads(
    count: int, work: Callable[[int], T], *, ready: Callable[[int], object] | None = None
) -> list[T]:
    """Run work(0..count-1) in `count` threads released together; their results in order.

    Each thread first calls ready(index), if given, so that set-up such as opening a
    connection does not stagger the start. An exception in any thread is raised here
    after all have finished.
    """
    barrier = threading.Barrier(count)
    results: dict[int, T] = {}
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            if ready is not None:
                ready(index)
            barrier.wait(timeout=30)
            results[index] = work(index)
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()  # the others stop waiting for this one

    threads = [
        threading.Thread(target=run, args=(index,), name=f"contract-{index}")
        for index in range(count)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=90)
    assert not any(thread.is_alive() for thread in threads), "a thread did not finish"
    if errors:
        raise errors[0]
    return [results[index] for index in range(count)]


def status_changes(
    listener: Store, act: Callable[[], object], count: int, *, wait: float = 20
) -> list[StatusChange]:
    """The first `count` status changes `listener` (another store on the same database) hears
    after `act()` (its change stream turned on first: PostgreSQL's is off by default), each
    heard within `wait` seconds."""
    assert listener.set_status_changes(True) is True
    heard: queue.Queue[StatusChange] = queue.Queue()
    stop = listener.watch_status_changes(heard.put)
    try:
        act()
        return [heard.get(timeout=wait) for _ in range(count)]
    finally:
        stop()

"""Fixtures for the integration tests: an App on each real store, driven by a fake clock, and
helpers to move through backoffs without sleeping, read histories, and play a worker that dies."""

from __future__ import annotations

import gc
import json
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import closing
from datetime import datetime, timedelta
from typing import Any

import pytest

import durably
from durably.core.history import Event, EventKind
from durably.resilience import GateState
from durably.stores import Checkpoint, Claim, Store
from durably.testing import FakeClock
from durably.workflow.context import step_key
from tests.pgbouncer import pgbouncer  # noqa: F401  (a fixture)

from .processes import processes  # noqa: F401  (a fixture)
from .steering import calls, held, order, reserve, undone  # noqa: F401  (fixtures)

DEAD_LEASE = timedelta(seconds=5)  # the lease of a worker that is about to die


@pytest.fixture
def app(store_url: str, clock: FakeClock) -> Iterator[durably.App]:
    """Seeded: its retry jitter is the same on every run of the test."""
    opened = durably.App(store_url, clock=clock, seed=1)
    yield opened
    opened.close()


@pytest.fixture
def other_app(store_url: str, clock: FakeClock) -> Iterator[durably.App]:
    """A second App on the same store: another process, or a new deploy of the code."""
    opened = durably.App(store_url, clock=clock, seed=2)
    yield opened
    opened.close()


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """Set at the end of the test, so a hung thread a test leaves behind ends with it."""
    event = threading.Event()
    yield event
    event.set()


def settle(app: durably.App, clock: FakeClock, *, rounds: int = 100) -> int:
    """Drain, then jump the fake clock to the next due time, until no run waits any more.

    Returns how many runs were taken to an end (any final or parked state)."""
    ended = 0
    for _ in range(rounds):
        ended += app.run_until_idle()
        due = next_due(app)
        if due is None:
            return ended
        clock.set(max(clock.now(), due))
    raise AssertionError(
        f"runs still waiting after {rounds} rounds: {app.client.runs(limit=10).runs}"
    )


def next_due(app: durably.App) -> datetime | None:
    """The earliest due time of a pending run, if any."""
    pending = app.client.runs(status=durably.RunStatus.PENDING, limit=10_000).runs
    due = [run.available_at for run in pending if run.available_at is not None]
    return min(due, default=None)


def execute_sql(url: str, sql: str, params: Sequence[object] = ()) -> int:
    """Run one statement straight on the store's database (`?` placeholders); the row count."""
    if url.startswith("sqlite:///"):
        with closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as db:
            count = db.execute(sql, params).rowcount
            db.commit()
            return count
    import psycopg

    with psycopg.connect(url, autocommit=True) as db:
        return db.execute(sql.replace("?", "%s"), params).rowcount  # type: ignore[arg-type]


def sql_rows(url: str, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
    """Rows of one query run straight on the store's database (`?` placeholders)."""
    if url.startswith("sqlite:///"):
        with closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as db:
            return list(db.execute(sql, params).fetchall())
    import psycopg

    with psycopg.connect(url, autocommit=True) as db:
        return list(db.execute(sql.replace("?", "%s"), params).fetchall())


def events(app: durably.App, run_id: str, kind: EventKind | None = None) -> list[Event]:
    """The run's history, or its events of one kind."""
    history = app.client.history(run_id)
    return history if kind is None else [event for event in history if event.kind is kind]


def data(event: Event) -> dict[str, Any]:
    loaded = json.loads(event.data or "{}")
    assert isinstance(loaded, dict), event
    return loaded


def kinds(events: Sequence[Event]) -> list[str]:
    return [str(event.kind) for event in events]


def step_events(events: Sequence[Event]) -> list[tuple[str, int | None, str | None, int | None]]:
    """(kind, position, name, attempt) of every step event, in order."""
    return [(str(e.kind), e.position, e.name, e.attempt) for e in events if e.position is not None]


def keys_started(history: Sequence[Event]) -> list[str]:
    """The idempotency key of every step attempt, in order."""
    return [data(e)["key"] for e in history if e.kind is EventKind.STEP_STARTED]


def retry_delays(history: Sequence[Event]) -> list[float]:
    """Seconds between each failed attempt and the due time it set."""
    failed = [e for e in history if e.kind is EventKind.STEP_ATTEMPT_FAILED]
    return [(datetime.fromisoformat(data(e)["retry_at"]) - e.at).total_seconds() for e in failed]


def gate(app: durably.App, name: str) -> GateState:
    """The state of a dependency's gate (breaker, tokens, slots, line), as the store holds it."""
    return GateState.load(app.store.gates().get(name))


def attempts_of(app: durably.App, run_id: str) -> int:
    """How many step attempts the run started."""
    return len(events(app, run_id, EventKind.STEP_STARTED))


def started_key(event: Event) -> str:
    assert event.kind is EventKind.STEP_STARTED
    key: str = json.loads(event.data or "{}")["key"]
    return key


def dead_worker(
    store: Store,
    clock: FakeClock,
    workflow: str,
    steps: Sequence[tuple[str, Any]],
    *,
    unknown: str | None = None,
) -> Claim:
    """Claim the due run of `workflow` as a worker that then dies: it records `steps` as
    completed (name, result) and, if `unknown` is given, starts that step and never finishes
    it. Its lease is short; advance the clock past DEAD_LEASE to let another worker in."""
    [claim] = store.claim("dead-worker", [workflow], now=clock.now(), lease=DEAD_LEASE, limit=1)
    seq = max(event.seq for event in claim.events) + 1
    written: list[Event] = []
    at = clock.now()
    made: list[tuple[str, Any]] = [*steps, *([(unknown, None)] if unknown else [])]
    for position, (name, result) in enumerate(made):
        key = step_key(claim.run_id, position, name)
        started = json.dumps({"key": key, "input": {"args": [], "kwargs": {}}})
        written.append(Event(seq, EventKind.STEP_STARTED, at, position, name, 1, started))
        seq += 1
        if position < len(steps):
            written.append(
                Event(seq, EventKind.STEP_COMPLETED, at, position, name, 1, json.dumps(result))
            )
            seq += 1
    checkpoint = Checkpoint(claim.run_id, claim.epoch, tuple(written))
    assert store.commit([checkpoint], now=clock.now()) == [True]
    return claim


def dying_worker(
    store: Store,
    clock: FakeClock,
    workflows: Sequence[str],
    *,
    owner: str = "dying-worker",
    record: Sequence[tuple[EventKind, int, str, int, str | None]] = (),
) -> Claim:
    """Claim the due run of `workflows` as a worker that then dies: it commits `record`
    (kind, position, name, attempt, data) and never writes again. Its lease is DEAD_LEASE;
    advance the clock past it to let another worker take the run over."""
    [claim] = store.claim(owner, list(workflows), now=clock.now(), lease=DEAD_LEASE, limit=1)
    seq = max(event.seq for event in claim.events) + 1
    at = clock.now()
    written = tuple(
        Event(seq + n, kind, at, position, name, attempt, payload)
        for n, (kind, position, name, attempt, payload) in enumerate(record)
    )
    if written:
        assert store.commit([Checkpoint(claim.run_id, claim.epoch, written)], now=at) == [True]
    return claim


def let_abandoned_threads_end(timeout: float = 3.0) -> None:
    """Wait for the threads of sync workflows the engine gave up on (a passed deadline), and
    collect what they leave behind, so that nothing of a test still runs while pytest reports
    it (a finalizer logging a traceback inside pytest's own source parsing crashes it on
    Python 3.11)."""
    deadline = time.monotonic() + timeout
    for thread in threading.enumerate():
        if thread.name.startswith("durably-run-"):
            thread.join(max(0.0, deadline - time.monotonic()))
    gc.collect()

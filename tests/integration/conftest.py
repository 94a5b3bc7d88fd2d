"""Fixtures for the integration tests: an App on each real store, driven by a fake clock."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import closing
from datetime import timedelta
from typing import Any

import pytest

import durably
from durably.core.history import Event, EventKind
from durably.stores import Checkpoint, Claim, Store
from durably.testing import FakeClock
from durably.workflow.context import step_key

from .processes import processes  # noqa: F401  (a fixture)

DEAD_LEASE = timedelta(seconds=5)


@pytest.fixture
def app(store_url: str, clock: FakeClock) -> Iterator[durably.App]:
    opened = durably.App(store_url, clock=clock)
    yield opened
    opened.close()


@pytest.fixture
def other_app(store_url: str, clock: FakeClock) -> Iterator[durably.App]:
    """A second App on the same store: another process, or a new deploy of the code."""
    opened = durably.App(store_url, clock=clock)
    yield opened
    opened.close()


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


def kinds(events: Sequence[Event]) -> list[str]:
    return [str(event.kind) for event in events]


def step_events(events: Sequence[Event]) -> list[tuple[str, int | None, str | None, int | None]]:
    """(kind, position, name, attempt) of every step event, in order."""
    return [(str(e.kind), e.position, e.name, e.attempt) for e in events if e.position is not None]


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
    events: list[Event] = []
    at = clock.now()
    calls: list[tuple[str, Any]] = [*steps, *([(unknown, None)] if unknown else [])]
    for position, (name, result) in enumerate(calls):
        key = step_key(claim.run_id, position, name)
        data = json.dumps({"key": key, "input": {"args": [], "kwargs": {}}})
        events.append(Event(seq, EventKind.STEP_STARTED, at, position, name, 1, data))
        seq += 1
        if position < len(steps):
            events.append(
                Event(seq, EventKind.STEP_COMPLETED, at, position, name, 1, json.dumps(result))
            )
            seq += 1
    checkpoint = Checkpoint(claim.run_id, claim.epoch, tuple(events))
    assert store.commit([checkpoint], now=clock.now()) == [True]
    return claim

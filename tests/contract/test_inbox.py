"""The Store contract for the inbox: any process sends a message to a run; the run's lease
holder gets it with its claim and takes it out of the inbox in the fenced commit that folds
it into the history, so it is in the history exactly once."""

from __future__ import annotations

import json
import sqlite3
from datetime import timedelta

import pytest

from durably.core.history import Event, EventKind
from durably.core.status import RunStatus
from durably.stores import Message, SentOutcome, Store, open_store
from durably.stores.sql.schema import LATEST_VERSION, migrations
from durably.testing import FakeClock

from .support import LEASE, WORKFLOW, checkpoint, claim_only, execute_sql, new_run, step_events


def message(run_id: str = "r1", **fields: str | None) -> Message:
    values: dict[str, str | None] = {"kind": "signal", "sender": "erin", "name": "approved"}
    values.update(fields)
    return Message(run_id, **values)  # type: ignore[arg-type]


def received(after: Event, ids: tuple[int, ...]) -> tuple[Event, ...]:
    """`message_received` events for these inbox ids, numbered on from `after`."""
    return tuple(
        Event(after.seq + 1 + n, EventKind.MESSAGE_RECEIVED, after.at, data=json.dumps({"id": i}))
        for n, i in enumerate(ids)
    )


def inbox_count(store_url: str, run_id: str) -> int:
    [(count,)] = execute_sql(store_url, "SELECT inbox FROM durably_runs WHERE id = ?", [run_id])
    return int(count)


def test_a_message_is_delivered_with_the_next_claim_in_order(
    store: Store, clock: FakeClock
) -> None:
    store.create_run(new_run("r1"), now=clock.now())
    first = store.send(message(data='{"ok": true}'), now=clock.now())
    clock.advance(timedelta(seconds=1))
    second = store.send(message(kind="cancel", name=None, sender="ops"), now=clock.now())

    assert first.outcome is SentOutcome.STORED
    assert second.outcome is SentOutcome.STORED
    assert first.status is RunStatus.PENDING
    assert first.message_id is not None
    assert second.message_id is not None
    assert first.message_id < second.message_id
    claim = claim_only(store, clock, "r1")
    assert [(d.id, d.kind, d.name, d.data, d.sender) for d in claim.inbox] == [
        (first.message_id, "signal", "approved", '{"ok": true}', "erin"),
        (second.message_id, "cancel", None, None, "ops"),
    ]
    assert claim.inbox[1].sent_at == clock.now()
    assert claim.inbox[0].sent_at == clock.now() - timedelta(seconds=1)


def test_a_run_without_mail_is_claimed_with_an_empty_inbox(store: Store, clock: FakeClock) -> None:
    store.create_run(new_run("r1"), now=clock.now())
    store.create_run(new_run("r2"), now=clock.now())
    store.send(message("r2"), now=clock.now())

    claims = store.claim("worker-a", [WORKFLOW], now=clock.now(), lease=LEASE, limit=10)

    assert {claim.run_id: len(claim.inbox) for claim in claims} == {"r1": 0, "r2": 1}


def test_consumed_messages_leave_the_inbox_with_the_fenced_commit(
    store: Store, store_url: str, clock: FakeClock
) -> None:
    store.create_run(new_run("r1"), now=clock.now())
    sent = [store.send(message(), now=clock.now()).message_id for _ in range(2)]
    claim = claim_only(store, clock, "r1")
    ids = tuple(d.id for d in claim.inbox)
    assert list(ids) == sent
    events = received(claim.events[-1], ids)

    committed = store.commit(
        [
            checkpoint(
                claim, events, status=RunStatus.PENDING, available_at=clock.now(), consumed=ids
            )
        ],
        now=clock.now(),
    )

    assert committed == [True]
    assert inbox_count(store_url, "r1") == 0
    assert execute_sql(store_url, "SELECT count(*) FROM durably_inbox") == [(0,)]
    again = claim_only(store, clock, "r1")
    assert again.inbox == ()
    assert [e.kind for e in again.events].count(EventKind.MESSAGE_RECEIVED) == 2


def test_a_message_sent_while_running_waits_for_the_next_claim(
    store: Store, store_url: str, clock: FakeClock
) -> None:
    store.create_run(new_run("r1"), now=clock.now())
    claim = claim_only(store, clock, "r1")
    early = store.send(message(name="early"), now=clock.now())
    assert early.status is RunStatus.RUNNING
    # The holder consumes nothing it did not get: the message stays for the next claim.
    events = step_events(claim, 0, clock.now())
    pending = checkpoint(claim, events, status=RunStatus.PENDING, available_at=clock.now())
    assert store.commit([pending], now=clock.now()) == [True]

    assert inbox_count(store_url, "r1") == 1
    assert [d.name for d in claim_only(store, clock, "r1").inbox] == ["early"]


def test_a_stale_holder_cannot_consume_messages(
    store: Store, store_url: str, clock: FakeClock
) -> None:
    store.create_run(new_run("r1"), now=clock.now())
    store.send(message(), now=clock.now())
    stale = claim_only(store, clock, "r1")
    clock.advance(LEASE + timedelta(seconds=1))
    current = claim_only(store, clock, "r1", owner="worker-b")
    ids = tuple(d.id for d in stale.inbox)
    assert tuple(d.id for d in current.inbox) == ids  # nobody folded it yet: delivered again

    refused = store.commit(
        [checkpoint(stale, received(stale.events[-1], ids), consumed=ids)], now=clock.now()
    )
    assert refused == [False]
    assert inbox_count(store_url, "r1") == 1
    assert store.commit(
        [checkpoint(current, received(current.events[-1], ids), consumed=ids)], now=clock.now()
    ) == [True]
    assert inbox_count(store_url, "r1") == 0
    kinds = [e.kind for e in store.history("r1")]
    assert kinds.count(EventKind.MESSAGE_RECEIVED) == 1


def test_a_commit_with_consumed_messages_tried_again_applies_once(
    store: Store, store_url: str, clock: FakeClock
) -> None:
    store.create_run(new_run("r1"), now=clock.now())
    store.send(message(), now=clock.now())
    store.send(message(), now=clock.now())
    claim = claim_only(store, clock, "r1")
    first = tuple(d.id for d in claim.inbox)
    point = checkpoint(claim, received(claim.events[-1], first), consumed=first)
    assert store.commit([point], now=clock.now()) == [True]
    later = store.send(message(name="later"), now=clock.now())

    # The answer of the first try was lost; the engine tries the same commit again.
    assert store.commit([point], now=clock.now()) == [True]

    assert inbox_count(store_url, "r1") == 1  # the later message is still counted
    rows = execute_sql(store_url, "SELECT id FROM durably_inbox WHERE run_id = ?", ["r1"])
    assert rows == [(later.message_id,)]
    assert [e.kind for e in store.history("r1")].count(EventKind.MESSAGE_RECEIVED) == 2


def test_a_dedupe_key_stores_a_message_once(store: Store, store_url: str, clock: FakeClock) -> None:
    store.create_run(new_run("r1"), now=clock.now())
    store.create_run(new_run("r2"), now=clock.now())
    first = store.send(message(dedupe_key="approve-1"), now=clock.now())
    again = store.send(message(dedupe_key="approve-1", data='"other"'), now=clock.now())
    elsewhere = store.send(message("r2", dedupe_key="approve-1"), now=clock.now())

    assert first.outcome is SentOutcome.STORED
    assert again.outcome is SentOutcome.DUPLICATE
    assert again.message_id == first.message_id
    assert elsewhere.outcome is SentOutcome.STORED  # a key is per run
    assert inbox_count(store_url, "r1") == 1
    claims = store.claim("worker-a", [WORKFLOW], now=clock.now(), lease=LEASE, limit=10)
    assert {claim.run_id: [d.data for d in claim.inbox] for claim in claims} == {
        "r1": [None],
        "r2": [None],
    }


def test_a_message_wakes_a_pending_run_that_waits(store: Store, clock: FakeClock) -> None:
    store.create_run(new_run("r1"), now=clock.now())
    claim = claim_only(store, clock, "r1")
    due = clock.now() + timedelta(minutes=10)
    store.commit(
        [
            checkpoint(
                claim,
                step_events(claim, 0, clock.now()),
                status=RunStatus.PENDING,
                available_at=due,
            )
        ],
        now=clock.now(),
    )
    assert store.claim("worker-a", [WORKFLOW], now=clock.now(), lease=LEASE, limit=10) == []

    clock.advance(timedelta(seconds=5))
    store.send(message(), now=clock.now())

    record = store.get_run("r1")
    assert record is not None
    assert record.available_at == clock.now()
    assert len(claim_only(store, clock, "r1").inbox) == 1


def test_a_message_does_not_delay_a_run_due_earlier(store: Store, clock: FakeClock) -> None:
    store.create_run(new_run("r1"), now=clock.now())
    created = clock.now()
    clock.advance(timedelta(seconds=5))

    store.send(message(), now=clock.now())

    record = store.get_run("r1")
    assert record is not None
    assert record.available_at == created


def test_a_message_wakes_workers_watching_the_store(store: Store, clock: FakeClock) -> None:
    import threading

    store.create_run(new_run("r1"), now=clock.now())
    claim = claim_only(store, clock, "r1")
    store.commit(
        [
            checkpoint(
                claim, (), status=RunStatus.PENDING, available_at=clock.now() + timedelta(hours=1)
            )
        ],
        now=clock.now(),
    )
    woken = threading.Event()
    stop = store.watch(woken.set)
    try:
        woken.clear()  # a watcher may be poked once as it starts
        store.send(message(), now=clock.now())
        assert woken.wait(timeout=10)
    finally:
        stop()


def test_a_parked_run_keeps_its_message_and_is_not_woken(
    store: Store, store_url: str, clock: FakeClock
) -> None:
    store.create_run(new_run("r1"), now=clock.now())
    claim = claim_only(store, clock, "r1")
    store.commit([checkpoint(claim, (), status=RunStatus.NEEDS_ATTENTION)], now=clock.now())

    sent = store.send(message(), now=clock.now())

    assert sent.outcome is SentOutcome.STORED
    assert sent.status is RunStatus.NEEDS_ATTENTION
    record = store.get_run("r1")
    assert record is not None
    assert record.available_at is None
    assert inbox_count(store_url, "r1") == 1
    taken = store.take("r1", "erin", {RunStatus.NEEDS_ATTENTION}, now=clock.now(), lease=LEASE)
    assert taken is not None
    assert [d.id for d in taken.inbox] == [sent.message_id]


@pytest.mark.parametrize("status", [RunStatus.COMPLETED, RunStatus.FAILED])
def test_a_message_to_a_run_that_ended_is_refused(
    store: Store, store_url: str, clock: FakeClock, status: RunStatus
) -> None:
    store.create_run(new_run("r1"), now=clock.now())
    claim = claim_only(store, clock, "r1")
    store.commit([checkpoint(claim, (), status=status)], now=clock.now())

    sent = store.send(message(), now=clock.now())

    assert sent.outcome is SentOutcome.ENDED
    assert sent.status is status
    assert execute_sql(store_url, "SELECT count(*) FROM durably_inbox") == [(0,)]
    assert inbox_count(store_url, "r1") == 0


def test_a_message_to_no_run_is_refused(store: Store, store_url: str, clock: FakeClock) -> None:
    assert store.send(message("nobody"), now=clock.now()).outcome is SentOutcome.NO_RUN
    assert execute_sql(store_url, "SELECT count(*) FROM durably_inbox") == [(0,)]


def test_a_version_2_store_migrates_with_its_runs_intact(store_url: str, clock: FakeClock) -> None:
    """A database made by the migrations up to version 2 (before the inbox) is brought to the
    latest version on open; its runs and histories read as before, and they take messages."""
    dialect = "sqlite" if store_url.startswith("sqlite") else "postgres"
    statements = [s for _, group in migrations(dialect, 0)[:2] for s in group]
    statements += [
        "CREATE TABLE durably_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        "INSERT INTO durably_meta (key, value) VALUES ('schema_version', '2')",
        "INSERT INTO durably_runs (id, workflow, status, input, created_at, updated_at,"
        f" available_at, event_count) VALUES ('old', '{WORKFLOW}', 'pending', '{{}}',"
        f" {clock.now().timestamp()}, {clock.now().timestamp()}, {clock.now().timestamp()}, 1)",
        "INSERT INTO durably_events (run_id, seq, kind, at)"
        f" VALUES ('old', 1, 'run_started', {clock.now().timestamp()})",
    ]
    _run_raw(store_url, statements)

    store = open_store(store_url)
    try:
        record = store.get_run("old")
        assert record is not None
        assert record.status is RunStatus.PENDING
        assert record.created_at == clock.now()
        assert [e.kind for e in store.history("old")] == [EventKind.RUN_STARTED]
        assert store.send(message("old"), now=clock.now()).outcome is SentOutcome.STORED
        assert len(claim_only(store, clock, "old").inbox) == 1
    finally:
        store.close()
    assert execute_sql(store_url, "SELECT value FROM durably_meta") == [(str(LATEST_VERSION),)]


def _run_raw(url: str, statements: list[str]) -> None:
    if url.startswith("sqlite:///"):
        db = sqlite3.connect(url.removeprefix("sqlite:///"))
        for statement in statements:
            db.execute(statement)
        db.commit()
        db.close()
        return
    import psycopg

    with psycopg.connect(url, autocommit=True) as pg:
        for statement in statements:
            pg.execute(statement)

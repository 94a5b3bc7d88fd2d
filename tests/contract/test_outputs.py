"""The Store contract for what runs publish (durably.stores.outputs): events' latest values kept
by the commit that records them, streams appended under the lease's fence, once per place, and
the wake-up callers wait on. Both stores, plain and encrypted; a second store object on the
same URL stands for another process."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import threading
from collections.abc import Iterator

import pytest

from durably.core.history import Event, EventKind
from durably.core.outputs import StreamWrite, close_place, step_place, workflow_place
from durably.core.status import RunStatus
from durably.stores import Checkpoint, Claim, Store, open_store
from durably.testing import FakeClock

from .support import LEASE, checkpoint, claim_only, execute_sql, new_run

WAIT = 20  # seconds a wake-up may take before the test calls it missing


@pytest.fixture
def other(store_url: str) -> Iterator[Store]:
    opened = open_store(store_url)
    yield opened
    opened.close()


def _claimed(store: Store, clock: FakeClock, run_id: str = "r1") -> Claim:
    store.create_run(new_run(run_id), now=clock.now())
    return claim_only(store, clock, run_id)


def _set(claim: Claim, seq: int, key: str, value: object, clock: FakeClock) -> Event:
    return Event(seq, EventKind.EVENT_SET, clock.now(), None, key, None, json.dumps(value))


def _publishing(
    claim: Claim,
    events: tuple[Event, ...],
    *,
    status: RunStatus | None = None,
    result: str | None = None,
) -> Checkpoint:
    """A checkpoint that sets events, as the engine marks one."""
    made = checkpoint(claim, events, status=status, result=result)
    return dataclasses.replace(made, publishes=True)


def _items(store: Store, key: str, offset: int = 0) -> list[tuple[int, object]]:
    return [
        (item.offset, None if item.value is None else json.loads(item.value))
        for item in store.read_stream("r1", key, offset=offset)
    ]


# -- events -------------------------------------------------------------------------------


def test_a_commit_keeps_the_latest_value_of_each_key_it_sets(
    store: Store, clock: FakeClock
) -> None:
    claim = _claimed(store, clock)
    seq = claim.events[-1].seq
    first = (_set(claim, seq + 1, "status", "charging", clock),)
    assert store.commit([_publishing(claim, first)], now=clock.now()) == [True]
    clock.advance("1s")
    later = (
        _set(claim, seq + 2, "status", "charged", clock),
        _set(claim, seq + 3, "total", {"cents": 1200}, clock),
    )
    assert store.commit([_publishing(claim, later)], now=clock.now()) == [True]

    found = {
        event.key: (json.loads(event.value), event.at) for event in store.published_events("r1")
    }
    assert found == {"status": ("charged", clock.now()), "total": ({"cents": 1200}, clock.now())}
    [total] = store.published_events("r1", ["total"])
    assert json.loads(total.value) == {"cents": 1200}
    assert store.published_events("r1", ["nothing"]) == []
    assert store.published_events("no-such-run") == []
    kinds = [event.kind for event in store.history("r1")]
    assert kinds.count(EventKind.EVENT_SET) == 3  # the history keeps every set


def test_a_refused_commit_publishes_nothing(store: Store, clock: FakeClock) -> None:
    claim = _claimed(store, clock)
    assert store.expire_leases("worker-a", now=clock.now()) == 1
    claim_only(store, clock, "r1", owner="worker-b")  # took over: claim's epoch is stale
    stale = (_set(claim, claim.events[-1].seq + 1, "status", "zombie", clock),)

    assert store.commit([_publishing(claim, stale)], now=clock.now()) == [False]
    assert store.published_events("r1") == []


def test_an_event_value_is_sealed_at_rest_in_an_encrypted_store(
    store: Store, clock: FakeClock, store_url: str
) -> None:
    claim = _claimed(store, clock)
    events = (_set(claim, claim.events[-1].seq + 1, "card", "4242 secret", clock),)
    store.commit([_publishing(claim, events)], now=clock.now())

    [(stored,)] = execute_sql(store_url, "SELECT value FROM durably_published_events")
    encrypted = type(store).__name__ == "EncryptedStore"
    assert ("4242 secret" in stored) is not encrypted
    assert json.loads(store.published_events("r1")[0].value) == "4242 secret"


# -- streams ------------------------------------------------------------------------------


def test_items_are_kept_in_the_order_written_each_place_once(
    store: Store, clock: FakeClock
) -> None:
    claim = _claimed(store, clock)
    writes = [StreamWrite("tokens", workflow_place(1, n), json.dumps(f"t{n}")) for n in (1, 2)]
    assert store.append_stream("r1", claim.epoch, writes, now=clock.now())
    # A replay writes the same places again, then goes on: only the new item is appended.
    again = [*writes, StreamWrite("tokens", workflow_place(1, 3), json.dumps("t3"))]
    assert store.append_stream("r1", claim.epoch, again, now=clock.now())
    # A step's retried attempt: the places its first attempt wrote stay as they were.
    step = [StreamWrite("tokens", step_place(1, 0, 1), '"first try"', attempt=1)]
    assert store.append_stream("r1", claim.epoch, step, now=clock.now())
    retried = [
        StreamWrite("tokens", step_place(1, 0, 1), '"second try"', attempt=2),
        StreamWrite("tokens", step_place(1, 0, 2), '"more"', attempt=2),
    ]
    assert store.append_stream("r1", claim.epoch, retried, now=clock.now())

    assert _items(store, "tokens") == [
        (0, "t1"),
        (1, "t2"),
        (2, "t3"),
        (3, "first try"),
        (4, "more"),
    ]
    assert [item.attempt for item in store.read_stream("r1", "tokens")] == [None, None, None, 1, 2]
    assert _items(store, "tokens", offset=3) == [(3, "first try"), (4, "more")]
    assert [i.offset for i in store.read_stream("r1", "tokens", offset=1, limit=2)] == [1, 2]
    assert store.read_stream("r1", "other") == []


def test_a_batch_of_more_items_than_sqlite_takes_parameters_is_appended_whole(
    store_url: str, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A step that writes without awaiting hands its every item to one append. SQLite's
    # oldest builds take 999 parameters a statement (its default build, 32,766): held to
    # 999 here, a batch of 1,200 places must still be looked up and appended.
    connect = sqlite3.connect

    def limited(*args: object, **kwargs: object) -> sqlite3.Connection:
        connection = connect(*args, **kwargs)  # type: ignore[arg-type]
        connection.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 999)
        return connection

    monkeypatch.setattr(sqlite3, "connect", limited)
    opened = open_store(store_url)
    try:
        claim = _claimed(opened, clock)
        writes = [StreamWrite("many", workflow_place(1, n), str(n)) for n in range(1, 1_201)]
        assert opened.append_stream("r1", claim.epoch, writes, now=clock.now())
        assert opened.append_stream("r1", claim.epoch, writes, now=clock.now())  # replayed: no more
        items = opened.read_stream("r1", "many", limit=2_000)
        assert [(item.offset, item.value) for item in items] == [
            (n - 1, str(n)) for n in range(1, 1_201)
        ]
    finally:
        opened.close()


def test_a_stream_ends_once_and_takes_nothing_after_its_end(store: Store, clock: FakeClock) -> None:
    claim = _claimed(store, clock)
    writes = [
        StreamWrite("log", workflow_place(1, 1), '"a"'),
        StreamWrite("log", close_place(), None),
        StreamWrite("log", workflow_place(1, 2), '"after the end"'),
        StreamWrite("log", close_place(), None),
    ]
    assert store.append_stream("r1", claim.epoch, writes, now=clock.now())
    assert store.append_stream("r1", claim.epoch, writes, now=clock.now())  # repeated: no change

    items = store.read_stream("r1", "log")
    assert [(i.offset, i.is_end) for i in items] == [(0, False), (1, True)]


def test_streams_of_one_run_are_apart(store: Store, clock: FakeClock) -> None:
    claim = _claimed(store, clock)
    writes = [
        StreamWrite("a", workflow_place(1, 1), "1"),
        StreamWrite("b", workflow_place(1, 2), "2"),
        StreamWrite("a", workflow_place(1, 3), "3"),
    ]
    store.append_stream("r1", claim.epoch, writes, now=clock.now())
    assert _items(store, "a") == [(0, 1), (1, 3)]
    assert _items(store, "b") == [(0, 2)]


def test_an_append_under_a_lost_lease_is_refused_and_writes_nothing(
    store: Store, clock: FakeClock
) -> None:
    claim = _claimed(store, clock)
    store.expire_leases("worker-a", now=clock.now())
    taken = claim_only(store, clock, "r1", owner="worker-b")
    write = [StreamWrite("tokens", workflow_place(1, 1), '"zombie"')]

    assert not store.append_stream("r1", claim.epoch, write, now=clock.now())
    assert store.read_stream("r1", "tokens") == []
    assert store.append_stream("r1", taken.epoch, write, now=clock.now())
    finished = checkpoint(
        taken,
        (Event(taken.events[-1].seq + 1, EventKind.RUN_COMPLETED, clock.now()),),
        status=RunStatus.COMPLETED,
        result="1",
    )
    store.commit([finished], now=clock.now())
    late = [StreamWrite("tokens", workflow_place(1, 2), '"late"')]
    assert not store.append_stream("r1", taken.epoch, late, now=clock.now())  # ended: no lease
    assert _items(store, "tokens") == [(0, "zombie")]


def test_concurrent_appends_of_one_run_give_each_item_its_own_offset(
    store: Store, clock: FakeClock, store_url: str
) -> None:
    claim = _claimed(store, clock)
    writers = [open_store(store_url) for _ in range(4)]
    try:

        def write(n: int) -> None:
            for k in range(25):
                place = step_place(1, n, k + 1)
                one = [StreamWrite("tokens", place, json.dumps([n, k]), attempt=1)]
                assert writers[n].append_stream("r1", claim.epoch, one, now=clock.now())

        threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    finally:
        for writer in writers:
            writer.close()

    items = store.read_stream("r1", "tokens", limit=1_000)
    assert [item.offset for item in items] == list(range(100))
    values = [json.loads(item.value or "null") for item in items]
    assert sorted(map(tuple, values)) == [(n, k) for n in range(4) for k in range(25)]
    for n in range(4):  # each writer's items in its own order
        assert [k for m, k in values if m == n] == list(range(25))


def test_a_stream_value_is_sealed_at_rest_in_an_encrypted_store(
    store: Store, clock: FakeClock, store_url: str
) -> None:
    claim = _claimed(store, clock)
    write = [StreamWrite("tokens", workflow_place(1, 1), '"the secret token"')]
    store.append_stream("r1", claim.epoch, write, now=clock.now())

    [(stored,)] = execute_sql(store_url, "SELECT value FROM durably_stream_items")
    encrypted = type(store).__name__ == "EncryptedStore"
    assert ("the secret token" in stored) is not encrypted
    assert _items(store, "tokens") == [(0, "the secret token")]


def test_pruning_a_run_deletes_what_it_published(store: Store, clock: FakeClock) -> None:
    claim = _claimed(store, clock)
    store.append_stream(
        "r1", claim.epoch, [StreamWrite("s", workflow_place(1, 1), "1")], now=clock.now()
    )
    seq = claim.events[-1].seq
    ended = (
        _set(claim, seq + 1, "status", "done", clock),
        Event(seq + 2, EventKind.RUN_COMPLETED, clock.now()),
    )
    store.commit(
        [_publishing(claim, ended, status=RunStatus.COMPLETED, result="1")], now=clock.now()
    )
    clock.advance("2d")

    assert store.prune(clock.now() - LEASE, limit=10) == 1
    assert store.published_events("r1") == []
    assert store.read_stream("r1", "s") == []


# -- wake-ups -----------------------------------------------------------------------------


def test_a_set_and_an_append_wake_watchers_of_the_run(
    store: Store, clock: FakeClock, other: Store
) -> None:
    heard: list[str | None] = []
    woken = threading.Event()

    def wake(run_id: str | None) -> None:
        heard.append(run_id)
        woken.set()

    stop = other.watch_outputs(wake)
    try:
        claim = _claimed(store, clock)
        events = (_set(claim, claim.events[-1].seq + 1, "status", "on", clock),)
        store.commit([_publishing(claim, events)], now=clock.now())
        assert woken.wait(WAIT), "a set woke nobody"
        assert "r1" in heard or None in heard
        woken.clear()
        heard.clear()
        write = [StreamWrite("s", workflow_place(1, 1), "1")]
        store.append_stream("r1", claim.epoch, write, now=clock.now())
        assert woken.wait(WAIT), "an append woke nobody"
        assert "r1" in heard or None in heard
    finally:
        stop()

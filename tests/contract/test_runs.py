"""The Store contract for creating and reading runs: create_run, get_run, history, runs,
unclaimable. Every test runs against both real stores."""

from __future__ import annotations

from durably.core.history import Event, EventKind
from durably.core.status import RunStatus
from durably.stores import RunRecord, Store, open_store
from durably.testing import FakeClock

from .support import LEASE, WORKFLOW, checkpoint, claim_only, in_threads, new_run


def test_create_run_makes_a_pending_run_due_now_with_a_run_started_event(
    store: Store, clock: FakeClock
) -> None:
    now = clock.now()

    record, created = store.create_run(new_run("r1", input='{"amount": 12}'), now=now)

    assert created is True
    assert record.id == "r1"
    assert record.workflow == WORKFLOW
    assert record.status == RunStatus.PENDING
    assert record.input == '{"amount": 12}'
    assert (record.result, record.error) == (None, None)
    assert record.created_at == record.updated_at == now
    assert record.available_at == now
    assert (record.lease_owner, record.lease_epoch) == (None, 0)
    assert record.event_count == 1
    assert store.get_run("r1") == record
    assert store.history("r1") == [Event(1, EventKind.RUN_STARTED, now)]


def test_creating_an_existing_id_returns_that_run_and_writes_nothing(
    store: Store, clock: FakeClock
) -> None:
    first, _ = store.create_run(new_run("r1", input='{"amount": 12}'), now=clock.now())
    clock.advance("5s")

    again, created = store.create_run(new_run("r1", input='{"amount": 99}'), now=clock.now())

    assert created is False
    assert again == first
    assert store.get_run("r1") == first
    assert [run.id for run in store.runs()] == ["r1"]
    assert len(store.history("r1")) == 1


def test_concurrent_creates_of_one_id_on_one_store_make_one_run(
    store: Store, clock: FakeClock
) -> None:
    outcomes = in_threads(8, lambda _: store.create_run(new_run("r1"), now=clock.now()))

    assert sorted(created for _, created in outcomes) == [False] * 7 + [True]
    assert {record.id for record, _ in outcomes} == {"r1"}
    assert [run.id for run in store.runs()] == ["r1"]
    assert [event.kind for event in store.history("r1")] == [EventKind.RUN_STARTED]


def test_concurrent_creates_from_two_store_objects_make_one_run_each(
    store: Store, store_url: str, clock: FakeClock
) -> None:
    other = open_store(store_url)
    ids = [f"r{n}" for n in range(25)]
    try:
        outcomes = in_threads(
            2,
            lambda index: [
                (run_id, (store, other)[index].create_run(new_run(run_id), now=clock.now())[1])
                for run_id in ids
            ],
        )
    finally:
        other.close()

    created = [run_id for per_thread in outcomes for run_id, was_new in per_thread if was_new]
    assert sorted(created) == sorted(ids)
    assert len(store.runs(limit=1000)) == len(ids)
    for run_id in ids:
        assert [event.kind for event in store.history(run_id)] == [EventKind.RUN_STARTED]


def test_an_unknown_run_has_no_record_and_no_history(store: Store) -> None:
    assert store.get_run("nope") is None
    assert store.history("nope") == []


def test_runs_lists_the_most_recently_updated_first_filtered_and_limited(
    store: Store, clock: FakeClock
) -> None:
    store.create_run(new_run("r1", workflow="a"), now=clock.now())
    clock.advance("1s")
    store.create_run(new_run("r2", workflow="b"), now=clock.now())
    clock.advance("1s")
    store.create_run(new_run("r3", workflow="a"), now=clock.now())
    clock.advance("1s")
    claim_only(store, clock, "r2", workflow="b")  # r2 is updated last

    def ids(runs: list[RunRecord]) -> list[str]:
        return [run.id for run in runs]

    assert ids(store.runs()) == ["r2", "r3", "r1"]
    assert ids(store.runs(limit=2)) == ["r2", "r3"]
    assert ids(store.runs(status=RunStatus.PENDING)) == ["r3", "r1"]
    assert ids(store.runs(status=RunStatus.RUNNING)) == ["r2"]
    assert ids(store.runs(status=RunStatus.COMPLETED)) == []
    assert ids(store.runs(workflow="a")) == ["r3", "r1"]
    assert ids(store.runs(workflow="a", limit=1)) == ["r3"]
    assert ids(store.runs(workflow="b", status=RunStatus.RUNNING)) == ["r2"]
    assert ids(store.runs(workflow="b", status=RunStatus.PENDING)) == []
    assert ids(store.runs(workflow="nobody")) == []


def test_unclaimable_counts_due_runs_of_unknown_workflows_by_name(
    store: Store, clock: FakeClock
) -> None:
    store.create_run(new_run("k1", workflow="known"), now=clock.now())
    store.create_run(new_run("l1", workflow="lost"), now=clock.now())
    store.create_run(new_run("l2", workflow="lost"), now=clock.now())
    store.create_run(new_run("o1", workflow="orphan"), now=clock.now())

    assert store.unclaimable({"known"}, now=clock.now()) == {"lost": 2, "orphan": 1}
    assert store.unclaimable({"known", "lost", "orphan"}, now=clock.now()) == {}
    assert store.unclaimable([], now=clock.now()) == {"known": 1, "lost": 2, "orphan": 1}


def test_unclaimable_skips_leased_and_finished_runs(store: Store, clock: FakeClock) -> None:
    store.create_run(new_run("l1", workflow="lost"), now=clock.now())
    store.create_run(new_run("l2", workflow="lost"), now=clock.now())
    store.create_run(new_run("o1", workflow="orphan"), now=clock.now())
    store.create_run(new_run("g1", workflow="gone"), now=clock.now())
    claim_only(store, clock, "o1", workflow="orphan")  # leased: not due until the lease ends
    done = claim_only(store, clock, "g1", owner="w2", workflow="gone")
    finished = checkpoint(done, status=RunStatus.COMPLETED, result="1")
    assert store.commit([finished], now=clock.now()) == [True]

    assert store.unclaimable({"known"}, now=clock.now()) == {"lost": 2}

    clock.advance(LEASE + LEASE)  # o1's lease has expired: it is due again
    assert store.unclaimable({"known"}, now=clock.now()) == {"lost": 2, "orphan": 1}

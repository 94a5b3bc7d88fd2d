"""The Store contract for creating and reading runs: create_run, get_run, history, runs,
unclaimable. Every test runs against both real stores."""

from __future__ import annotations

from datetime import timedelta

from durably.core.history import ErrorInfo, Event, EventKind
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


def test_pages_after_a_run_cover_every_run_exactly_once_in_order_with_ties(
    store: Store, clock: FakeClock
) -> None:
    # Runs created at one instant share updated_at (as every run of one batch commit does):
    # the id breaks the tie, so no run is skipped or listed twice at a page boundary.
    for n in range(7):
        if n % 3 == 0:
            clock.advance("1s")
        store.create_run(new_run(f"r{n:02d}", workflow="a" if n % 2 else "b"), now=clock.now())
    expected = sorted(store.runs(limit=100), key=lambda r: (r.updated_at, r.id), reverse=True)

    def pages(
        size: int, status: RunStatus | None = None, workflow: str | None = None
    ) -> list[list[str]]:
        listed: list[list[str]] = []
        after = None
        while True:
            page = store.runs(limit=size, after=after, status=status, workflow=workflow)
            if not page:
                return listed
            listed.append([run.id for run in page])
            after = (page[-1].updated_at, page[-1].id)

    assert [run.id for run in store.runs(limit=100)] == [run.id for run in expected]
    assert [run.id for run in expected][:3] == ["r06", "r05", "r04"]
    for size in (1, 2, 3, 7, 8):
        listed = pages(size)
        assert [run_id for page in listed for run_id in page] == [run.id for run in expected]
        assert all(len(page) == size for page in listed[:-1])
    in_a = [run.id for run in expected if run.workflow == "a"]
    assert [run_id for page in pages(2, workflow="a") for run_id in page] == in_a
    pending = [run_id for page in pages(2, status=RunStatus.PENDING) for run_id in page]
    assert pending == [run.id for run in expected]


def test_pages_of_every_run_follow_time_across_statuses_with_ties(
    store: Store, clock: FakeClock
) -> None:
    # The unfiltered list reads each status's newest runs apart (durably.stores.sql.reads):
    # pages of any size list every run once, newest first, ties by id, whatever status each
    # run is in, however many of one status come before the others and tie with them.
    for n in range(12):
        if n % 3 == 0:
            clock.advance("1s")
        store.create_run(new_run(f"r{n:02d}"), now=clock.now())
    clock.advance("1s")
    claims = store.claim("w", [WORKFLOW], now=clock.now(), lease=LEASE, limit=7)
    clock.advance("1s")
    failed = ErrorInfo("ValueError", "no")
    ended = [checkpoint(c, status=RunStatus.COMPLETED, result="1") for c in claims[:3]]
    ended += [checkpoint(c, status=RunStatus.FAILED, error=failed) for c in claims[3:5]]
    assert store.commit(ended, now=clock.now()) == [True] * 5  # five runs, two statuses, one time
    store.create_run(new_run("r12"), now=clock.now())  # and a pending one at that time too
    runs = [store.get_run(f"r{n:02d}") for n in range(13)]
    expected = [r.id for r in sorted(runs, key=lambda r: (r.updated_at, r.id), reverse=True) if r]
    assert {r.status for r in runs if r} == {
        RunStatus.PENDING,
        RunStatus.RUNNING,
        RunStatus.COMPLETED,
        RunStatus.FAILED,
    }

    assert [run.id for run in store.runs(limit=100)] == expected
    for size in range(1, 15):
        pages, after = [], None
        while page := store.runs(limit=size, after=after):
            pages.append([run.id for run in page])
            after = (page[-1].updated_at, page[-1].id)
        assert [run_id for page in pages for run_id in page] == expected, size
        assert [len(page) for page in pages[:-1]] == [size] * (len(pages) - 1)  # full pages


def test_a_page_after_a_run_lists_only_older_runs_or_older_ids_at_the_same_time(
    store: Store, clock: FakeClock
) -> None:
    store.create_run(new_run("old"), now=clock.now())
    clock.advance("1s")
    for run_id in ("b", "c", "a"):
        store.create_run(new_run(run_id), now=clock.now())
    clock.advance("1s")
    store.create_run(new_run("new"), now=clock.now())
    at = store.get_run("b")
    assert at is not None

    after_b = store.runs(after=(at.updated_at, "b"))

    assert [run.id for run in after_b] == ["a", "old"]
    assert [run.id for run in store.runs(after=(at.updated_at, "zz"))] == ["c", "b", "a", "old"]
    assert [run.id for run in store.runs(after=(at.updated_at, "a"))] == ["old"]
    assert store.runs(after=(at.updated_at - timedelta(days=1), "")) == []


def test_histories_reads_the_history_of_each_run_at_once(store: Store, clock: FakeClock) -> None:
    now = clock.now()
    for run_id in ("r1", "r2"):
        store.create_run(new_run(run_id), now=now)

    found = store.histories(["r1", "r2", "nobody"])

    assert found == {run_id: store.history(run_id) for run_id in ("r1", "r2")}
    assert found["r1"] == [Event(1, EventKind.RUN_STARTED, now)]
    assert store.histories([]) == {}

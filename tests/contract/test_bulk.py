"""The Store contract for bulk jobs (durably.core.bulk): a job selects its runs once, when it
is made; the same person's unfinished job of the same action and filter is found, not made
twice; a run is settled as acted on by the write that acts on it (a message, a person's
checkpoint, a fork), once: a second write of the job on the run is refused whole; skipped
runs are settled with why; a job is finished when no run is left."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from durably.core.audit import Action, Via, audit_of, of_job
from durably.core.bulk import AlreadySettled, BulkAction, NewBulkJob, Outcome, RunFilter
from durably.core.history import Event, EventKind
from durably.core.status import RunStatus
from durably.stores import Message, SentOutcome, Store
from durably.testing import FakeClock

from .support import checkpoint, claim_only, new_run

CHECKOUT = RunFilter(workflow="checkout")


def job(job_id: str = "bulk-1", run_filter: RunFilter = CHECKOUT, **changes: object) -> NewBulkJob:
    made = NewBulkJob(job_id, BulkAction.CANCEL, run_filter, "erin", Via.CLI, "wrong batch")
    return replace(made, **changes)  # type: ignore[arg-type]


def start(store: Store, clock: FakeClock, *run_ids: str, workflow: str = "checkout") -> None:
    for run_id in run_ids:
        store.create_run(new_run(run_id, workflow), now=clock.now())


def pending(store: Store, job_id: str = "bulk-1") -> list[str]:
    return [run.run_id for run in store.bulk_runs(job_id, outcome=None, limit=100)]


def cancel_of(run_id: str, job_id: str = "bulk-1", key: str = "k") -> Message:
    audit = of_job(audit_of(Action.CANCEL, "erin", Via.CLI), job_id)
    return Message(run_id, "cancel", "erin", dedupe_key=key, audit=audit)


def test_a_job_selects_the_runs_its_filter_matches_once(store: Store, clock: FakeClock) -> None:
    start(store, clock, "c1", "c2", "c3")
    start(store, clock, "other", workflow="refund")

    made, created = store.create_bulk_job(job(), now=clock.now())

    assert created
    assert (made.id, made.action, made.filter, made.by, made.via) == (
        "bulk-1",
        BulkAction.CANCEL,
        CHECKOUT,
        "erin",
        Via.CLI,
    )
    assert (made.reason, made.created_at, made.finished_at) == ("wrong batch", clock.now(), None)
    assert (made.total, made.acted, made.skipped, made.pending) == (3, 0, 0, 3)
    start(store, clock, "c4")  # after the job was made: not in it
    assert pending(store) == ["c1", "c2", "c3"]
    assert store.bulk_job("bulk-1") == made
    assert store.bulk_job("bulk-unknown") is None


def test_every_filter_narrows_the_selection(store: Store, clock: FakeClock) -> None:
    for n, (run_id, queue, key) in enumerate(
        [("a", None, "k1"), ("b", "emails", "k1"), ("c", "emails", "k2"), ("d", None, None)]
    ):
        run = replace(new_run(run_id, "checkout"), queue=queue, key=key)
        store.create_run(run, now=clock.now() + timedelta(minutes=n))
    at = clock.now()
    made = iter(range(100))

    def selected(run_filter: RunFilter) -> list[str]:
        job_id = f"bulk-{next(made)}"
        store.create_bulk_job(job(job_id, run_filter), now=at)
        return pending(store, job_id)

    assert selected(RunFilter(queue="emails")) == ["b", "c"]
    assert selected(RunFilter(queue="default")) == ["a", "d"]
    assert selected(RunFilter(key="k1")) == ["a", "b"]
    minutes = RunFilter(since=at + timedelta(minutes=1), until=at + timedelta(minutes=3))
    assert selected(minutes) == ["b", "c"]
    assert selected(RunFilter(ids=("d", "b", "nobody"), workflow="checkout")) == ["b", "d"]
    assert selected(RunFilter(status=RunStatus.PENDING, key="k2")) == ["c"]
    assert selected(RunFilter(status=RunStatus.FAILED)) == []


def test_a_job_that_matches_nothing_is_finished_at_once(store: Store, clock: FakeClock) -> None:
    made, created = store.create_bulk_job(job(), now=clock.now())

    assert created
    assert (made.total, made.finished_at, made.finished) == (0, clock.now(), True)


def test_the_same_persons_unfinished_job_is_found_not_made_twice(
    store: Store, clock: FakeClock
) -> None:
    start(store, clock, "c1")
    store.create_bulk_job(job("bulk-1"), now=clock.now())

    again, created = store.create_bulk_job(job("bulk-2"), now=clock.now())
    assert (again.id, created) == ("bulk-1", False)
    others = [
        job("bulk-3", by="sam"),
        job("bulk-4", action=BulkAction.PAUSE),
        job("bulk-5", RunFilter(workflow="checkout", status=RunStatus.PENDING)),
    ]
    assert [store.create_bulk_job(o, now=clock.now())[1] for o in others] == [True] * 3

    store.settle_bulk_runs("bulk-1", {"c1": "not today"}, now=clock.now())
    assert store.create_bulk_job(job("bulk-6"), now=clock.now())[0].id == "bulk-6"  # finished
    unfinished = store.bulk_jobs(limit=10, unfinished=True)  # newest first; ties by id
    assert [j.id for j in unfinished] == ["bulk-6", "bulk-5", "bulk-4", "bulk-3"]
    assert len(store.bulk_jobs(limit=10)) == 5
    assert len(store.bulk_jobs(limit=2)) == 2


def test_jobs_are_listed_newest_first(store: Store, clock: FakeClock) -> None:
    for n in range(3):
        store.create_bulk_job(job(f"bulk-{n}", by=f"p{n}"), now=clock.now())
        clock.advance(timedelta(seconds=1))

    assert [j.id for j in store.bulk_jobs(limit=10)] == ["bulk-2", "bulk-1", "bulk-0"]


def test_a_message_of_the_job_settles_its_run_once(store: Store, clock: FakeClock) -> None:
    start(store, clock, "c1", "c2")
    store.create_bulk_job(job(), now=clock.now())
    clock.advance(timedelta(seconds=5))

    assert store.send(cancel_of("c1"), now=clock.now()).outcome is SentOutcome.STORED
    with pytest.raises(AlreadySettled, match="bulk job 'bulk-1' has settled run 'c1' already"):
        store.send(cancel_of("c1", key="another"), now=clock.now())  # a second try: refused
    with pytest.raises(AlreadySettled):  # a run the job did not select
        store.send(cancel_of("c2", job_id="bulk-other"), now=clock.now())

    assert len(store.mail(["c1"])["c1"]) == 1  # the refused message was not stored
    assert store.mail(["c2"]) == {}
    entries = store.audit_trail(limit=10)
    assert [(e.run_id, e.detail) for e in entries] == [("c1", '{"job": "bulk-1"}')]
    made = store.bulk_job("bulk-1")
    assert made is not None
    assert (made.acted, made.skipped, made.updated_at, made.finished) == (1, 0, clock.now(), False)
    assert store.bulk_runs("bulk-1", outcome=Outcome.ACTED, limit=10)[0].run_id == "c1"


def test_a_checkpoint_and_a_fork_of_the_job_settle_their_runs(
    store: Store, clock: FakeClock
) -> None:
    start(store, clock, "r1", workflow="send_invoice")
    start(store, clock, "r2", workflow="refund")
    store.create_bulk_job(job(run_filter=RunFilter(ids=("r1", "r2"))), now=clock.now())
    retried = of_job(audit_of(Action.RETRY, "erin", Via.CLI), "bulk-1")
    claim = claim_only(store, clock, "r1", workflow="send_invoice")
    released = (Event(claim.events[-1].seq + 1, EventKind.RELEASED, clock.now()),)
    handed_back = checkpoint(claim, released, status=RunStatus.PENDING, available_at=clock.now())

    assert store.commit([replace(handed_back, audit=retried)], now=clock.now()) == [True]

    claim = claim_only(store, clock, "r2", workflow="refund")
    done = Event(claim.events[-1].seq + 1, EventKind.RUN_COMPLETED, clock.now(), data="null")
    store.commit([checkpoint(claim, (done,), status=RunStatus.COMPLETED)], now=clock.now())
    note = Event(0, EventKind.RUN_RESTARTED, clock.now())
    started = (Event(1, EventKind.RUN_STARTED, clock.now()),)
    restarted = of_job(audit_of(Action.RESTART, "erin", Via.CLI, restarted_as="r3"), "bulk-1")
    fork = {"source": "r2", "note": note, "now": clock.now(), "audit": restarted}
    assert store.fork(new_run("r3"), started, **fork)  # type: ignore[arg-type]
    with pytest.raises(AlreadySettled):
        store.fork(new_run("r4"), started, **fork)  # type: ignore[arg-type]

    assert store.get_run("r4") is None  # refused whole
    made = store.bulk_job("bulk-1")
    assert made is not None
    assert (made.acted, made.pending) == (2, 0)
    assert [e.action for e in store.audit_trail(limit=10)] == ["restart", "retry"]


def test_skipped_runs_are_settled_with_why_and_the_job_finishes(
    store: Store, clock: FakeClock
) -> None:
    start(store, clock, "c1", "c2", "c3")
    store.create_bulk_job(job(), now=clock.now())
    store.send(cancel_of("c1"), now=clock.now())
    clock.advance(timedelta(seconds=1))

    after = store.settle_bulk_runs("bulk-1", {"c1": "too late", "c2": "it ended"}, now=clock.now())

    assert after is not None
    assert (after.acted, after.skipped, after.pending, after.finished) == (1, 1, 1, False)
    [skipped] = store.bulk_runs("bulk-1", outcome=Outcome.SKIPPED, limit=10)
    assert (skipped.run_id, skipped.outcome, skipped.note) == ("c2", Outcome.SKIPPED, "it ended")
    with pytest.raises(AlreadySettled):  # a skipped run is not acted on afterwards
        store.send(cancel_of("c2", key="k2"), now=clock.now())

    done = store.settle_bulk_runs("bulk-1", {"c3": "gone"}, now=clock.now())
    assert done is not None
    assert (done.acted, done.skipped, done.finished_at) == (1, 2, clock.now())
    assert store.settle_bulk_runs("bulk-unknown", {}, now=clock.now()) is None


def test_a_dry_run_counts_the_matching_runs_by_status(store: Store, clock: FakeClock) -> None:
    start(store, clock, "c1")
    claim_only(store, clock, "c1", workflow="checkout")  # running now
    start(store, clock, "c3", "c2")
    start(store, clock, "other", workflow="refund")

    found = store.matching(CHECKOUT, limit=2)

    assert dict(found.by_status) == {RunStatus.PENDING: 2, RunStatus.RUNNING: 1}
    assert (found.total, found.first) == (3, ["c1", "c2"])
    assert found.fitting(BulkAction.PAUSE) == 3
    assert found.fitting(BulkAction.RESUME) == 0
    assert store.matching(RunFilter(), limit=0).total == 4
    assert store.bulk_jobs(limit=10) == []  # nothing made

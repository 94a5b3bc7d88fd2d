"""The Store contract for the audit trail: an entry goes in with the write that does its
action (a start, a message, a person's checkpoint, a fork), exactly when that write does
something, and is read back newest first, a bounded page at a time, by time, actor and run."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from durably.core.audit import Action, Audit, AuditEntry, Via, audit_of
from durably.core.history import Event, EventKind
from durably.core.status import RunStatus
from durably.stores import Message, SentOutcome, Store
from durably.testing import FakeClock

from .support import WORKFLOW, checkpoint, claim_only, new_run

ERIN = audit_of(Action.CANCEL, "erin", Via.API, reason="wrong order")


def trail(store: Store, **filters: object) -> list[AuditEntry]:
    return store.audit_trail(limit=100, **filters)  # type: ignore[arg-type]


def test_an_entry_recorded_alone_reads_back_whole(store: Store, clock: FakeClock) -> None:
    store.create_run(new_run("r1"), now=clock.now())
    store.record_audit(Audit(Action.LOGIN, "erin", Via.DASHBOARD), now=clock.now())
    clock.advance(timedelta(seconds=1))
    store.record_audit(ERIN, now=clock.now(), run_id="r1")

    newest, oldest = trail(store)

    assert (newest.by, newest.action, newest.via) == ("erin", "cancel", "api")
    assert (newest.run_id, newest.workflow) == ("r1", WORKFLOW)  # the run's, from its row
    assert newest.detail == '{"reason": "wrong order"}'
    assert newest.at == clock.now()
    assert (oldest.action, oldest.run_id, oldest.workflow, oldest.detail) == (
        "login",
        None,
        None,
        None,
    )
    assert newest.id > oldest.id


def test_the_trail_is_found_by_actor_run_and_time(store: Store, clock: FakeClock) -> None:
    for run_id in ("r1", "r2"):
        store.create_run(new_run(run_id), now=clock.now())
    start = clock.now()
    for n, (who, run_id) in enumerate([("erin", "r1"), ("sam", "r1"), ("erin", "r2")]):
        clock.advance(timedelta(minutes=1))
        store.record_audit(
            audit_of(Action.PAUSE, who, Via.CLI, n=n), now=clock.now(), run_id=run_id
        )

    assert [e.run_id for e in trail(store, by="erin")] == ["r2", "r1"]
    assert [e.by for e in trail(store, run_id="r1")] == ["sam", "erin"]
    assert [e.by for e in trail(store, by="erin", run_id="r1")] == ["erin"]
    since = start + timedelta(minutes=2)
    assert [e.detail for e in trail(store, since=since)] == ['{"n": 2}', '{"n": 1}']
    assert [e.detail for e in trail(store, until=since)] == ['{"n": 0}']
    assert trail(store, by="nobody") == []


def test_pages_follow_each_other_without_gaps_or_repeats(store: Store, clock: FakeClock) -> None:
    for n in range(7):
        if n % 3 == 0:
            clock.advance(timedelta(seconds=1))  # some entries share their time
        store.record_audit(audit_of(Action.LOGIN, f"p{n}", Via.DASHBOARD), now=clock.now())

    seen: list[str] = []
    before = None
    while page := store.audit_trail(limit=3, before=before):
        assert len(page) <= 3  # the page size bounds the query
        seen += [entry.by for entry in page]
        before = (page[-1].at, page[-1].id)

    assert seen == [f"p{n}" for n in reversed(range(7))]


def test_a_message_with_an_entry_records_it_once_when_stored(
    store: Store, clock: FakeClock
) -> None:
    store.create_run(new_run("r1"), now=clock.now())
    message = Message("r1", "signal", "erin", "go", '"the data"', "key-1", audit=ERIN)

    assert store.send(message, now=clock.now()).outcome is SentOutcome.STORED
    assert store.send(message, now=clock.now()).outcome is SentOutcome.DUPLICATE
    assert store.send(replace(message, run_id="nobody"), now=clock.now()).outcome is (
        SentOutcome.NO_RUN
    )

    assert [(e.by, e.run_id) for e in trail(store)] == [("erin", "r1")]


def test_a_start_with_an_entry_records_it_when_it_creates_the_run(
    store: Store, clock: FakeClock
) -> None:
    started = audit_of(Action.START, "erin", Via.CLI)
    run = replace(new_run("r1"), audit=started)

    assert store.create_run(run, now=clock.now())[1] is True
    assert store.create_run(run, now=clock.now())[1] is False  # found: nothing started
    made = store.create_runs(
        [replace(new_run(f"b{n}"), audit=started) for n in range(2)] + [run], now=clock.now()
    )

    assert [created for _, created in made] == [True, True, False]
    assert sorted(e.run_id or "" for e in trail(store)) == ["b0", "b1", "r1"]
    assert store.create_run(new_run("quiet"), now=clock.now())[1] is True  # no entry asked
    assert len(trail(store)) == 3


def test_a_checkpoint_with_an_entry_records_it_once_when_fenced_in(
    store: Store, clock: FakeClock
) -> None:
    store.create_run(new_run("r1"), now=clock.now())
    claim = claim_only(store, clock, "r1")
    released = (Event(claim.events[-1].seq + 1, EventKind.RELEASED, clock.now()),)
    retried = replace(
        checkpoint(claim, released, status=RunStatus.PENDING, available_at=clock.now()),
        audit=audit_of(Action.RETRY, "erin", Via.DASHBOARD),
    )

    assert store.commit([retried], now=clock.now()) == [True]
    assert store.commit([retried], now=clock.now()) == [True]  # a retried commit: applied
    stale = replace(retried, events=(replace(released[0], seq=released[0].seq + 1),))
    assert store.commit([stale], now=clock.now()) == [False]  # its lease is gone

    assert [(e.action, e.by, e.via, e.workflow) for e in trail(store)] == [
        ("retry", "erin", "dashboard", WORKFLOW)
    ]


def test_a_fork_records_its_entry_on_the_run_it_restarts(store: Store, clock: FakeClock) -> None:
    store.create_run(new_run("r1"), now=clock.now())
    claim = claim_only(store, clock, "r1")
    done = Event(claim.events[-1].seq + 1, EventKind.RUN_COMPLETED, clock.now(), data="null")
    store.commit(
        [checkpoint(claim, (done,), status=RunStatus.COMPLETED, result="1")], now=clock.now()
    )
    started = (Event(1, EventKind.RUN_STARTED, clock.now()),)
    note = Event(0, EventKind.RUN_RESTARTED, clock.now())
    restarted = audit_of(Action.RESTART, "erin", Via.API, restarted_as="r2")

    assert store.fork(
        new_run("r2"), started, source="r1", note=note, now=clock.now(), audit=restarted
    )
    assert not store.fork(
        new_run("r2"), started, source="r1", note=note, now=clock.now(), audit=restarted
    )  # taken: nothing written, no second entry

    assert [(e.action, e.run_id, e.detail) for e in trail(store)] == [
        ("restart", "r1", '{"restarted_as": "r2"}')
    ]


def test_pruning_runs_keeps_their_entries(store: Store, clock: FakeClock) -> None:
    store.create_run(new_run("r1"), now=clock.now())
    claim = claim_only(store, clock, "r1")
    done = Event(claim.events[-1].seq + 1, EventKind.RUN_COMPLETED, clock.now(), data="null")
    store.commit(
        [checkpoint(claim, (done,), status=RunStatus.COMPLETED, result="1")], now=clock.now()
    )
    store.record_audit(ERIN, now=clock.now(), run_id="r1")

    assert store.prune(clock.now() + timedelta(seconds=1), limit=10) == 1

    assert [(e.run_id, e.workflow) for e in trail(store)] == [("r1", WORKFLOW)]

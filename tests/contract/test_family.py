"""The Store contract for what a checkpoint does besides appending: a new generation of its
run (`Checkpoint.input`: the history starts over), and what it does to other runs
(`Checkpoint.starts` and `Checkpoint.messages`): child runs are created and messages sent in
the checkpoint's own transaction, only when it is fenced in, never again when a retried
commit finds it applied; a start whose id is taken tells the parent instead; a parent's
message reaches only its own children, and rouses a paused or parked one. Both real
stores."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta

from durably.core.children import CHILD, ChildEnded
from durably.core.event_data import encode_payload
from durably.core.history import Event, EventKind
from durably.core.payloads import RunStarted
from durably.core.status import RunStatus
from durably.stores import Checkpoint, Claim, Message, NewRun, Store
from durably.testing import FakeClock

from .support import checkpoint, claim_only, execute_sql, new_run


def _child(run_id: str, parent: str) -> NewRun:
    started = encode_payload(RunStarted(parent=parent))
    return NewRun(run_id, "child_flow", '{"args": [], "kwargs": {}}', parent, started)


def _started(claim: Claim, clock: FakeClock, child: str) -> tuple[Event, ...]:
    seq = claim.events[-1].seq + 1
    data = json.dumps({"run": child, "workflow": "child_flow"})
    return (
        Event(seq, EventKind.CHILD_STARTED, clock.now(), 0, "durably.child:child_flow", None, data),
    )


def test_a_fenced_checkpoint_creates_its_children_with_their_lineage(
    store: Store, store_url: str, clock: FakeClock
) -> None:
    store.create_run(new_run("p1"), now=clock.now())
    parent = claim_only(store, clock, "p1")
    done = replace(
        checkpoint(parent, _started(parent, clock, "p1.0")), starts=(_child("p1.0", "p1"),)
    )
    assert store.commit([done], now=clock.now()) == [True]

    child = store.get_run("p1.0")
    assert child is not None
    assert (child.status, child.parent, child.workflow) == (RunStatus.PENDING, "p1", "child_flow")
    assert child.available_at == store.get_run("p1.0").available_at  # due now: claimable
    [first] = store.history("p1.0")
    assert first.kind is EventKind.RUN_STARTED
    assert json.loads(first.data or "") == {"parent": "p1"}
    [claimed] = store.claim(
        "w", ["child_flow"], now=clock.now(), lease=timedelta(seconds=30), limit=5
    )
    assert claimed.run_id == "p1.0"
    assert list(claimed.events) == store.history("p1.0")  # its first claim, as stored
    if not store_url.startswith("sqlite"):  # PostgreSQL kept the event's data in the row
        kept = execute_sql(store_url, "SELECT started FROM durably_runs WHERE id = 'p1.0'")
        assert kept == [(first.data,)]


def test_a_stale_checkpoint_creates_nothing_and_a_retried_one_nothing_twice(
    store: Store, clock: FakeClock
) -> None:
    store.create_run(new_run("p1"), now=clock.now())
    parent = claim_only(store, clock, "p1")
    stale = Checkpoint(
        "p1", parent.epoch + 1, _started(parent, clock, "p1.0"), starts=(_child("p1.0", "p1"),)
    )
    assert store.commit([stale], now=clock.now()) == [False]
    assert store.get_run("p1.0") is None

    notice = Message("p9", "signal", "p1", "go")  # to a run that does not exist: dropped
    done = replace(
        checkpoint(parent, _started(parent, clock, "p1.0")),
        starts=(_child("p1.0", "p1"),),
        messages=(notice,),
    )
    assert store.commit([done], now=clock.now()) == [True]
    assert store.commit([done], now=clock.now()) == [True]  # the answer was lost: tried again
    assert len(store.history("p1.0")) == 1
    rows = execute_sql(store.url, "SELECT count(*) FROM durably_runs WHERE parent = 'p1'")
    assert rows == [(1,)]


def test_a_start_whose_id_is_taken_tells_the_parent_and_leaves_the_other_run_alone(
    store: Store, clock: FakeClock
) -> None:
    store.create_run(new_run("taken"), now=clock.now())
    store.create_run(new_run("p1", workflow="parent_flow"), now=clock.now())
    parent = claim_only(store, clock, "p1", workflow="parent_flow")
    done = replace(
        checkpoint(parent, _started(parent, clock, "taken"), status=RunStatus.PENDING),
        starts=(_child("taken", "p1"),),
    )
    assert store.commit([done], now=clock.now()) == [True]

    other = store.get_run("taken")
    assert other is not None
    assert other.parent is None
    assert len(store.history("taken")) == 1
    [told] = store.mail(["p1"])["p1"]
    assert (told.kind, told.name) == (CHILD, "taken")
    assert json.loads(told.data or "")["error_class"] == "durably.errors.ChildIdTaken"
    # the parent waits for its child with no due time: the notice makes it due now
    assert store.get_run("p1").available_at == clock.now()  # type: ignore[union-attr]


def test_a_childs_end_reaches_its_waiting_parent_in_the_same_commit(
    store: Store, clock: FakeClock
) -> None:
    store.create_run(new_run("p1", workflow="parent_flow"), now=clock.now())
    parent = claim_only(store, clock, "p1", workflow="parent_flow")
    start = replace(
        checkpoint(parent, _started(parent, clock, "p1.0"), status=RunStatus.PENDING),
        starts=(_child("p1.0", "p1"),),
    )
    store.commit([start], now=clock.now())
    assert store.get_run("p1").available_at is None  # type: ignore[union-attr]
    clock.advance(timedelta(seconds=1))
    child = claim_only(store, clock, "p1.0", workflow="child_flow")
    ended = ChildEnded("p1.0", RunStatus.COMPLETED, '"ok"')
    notice = Message("p1", CHILD, "child run p1.0", "p1.0", ended.to_json(), "durably:child:p1.0")
    end = Event(child.events[-1].seq + 1, EventKind.RUN_COMPLETED, clock.now())
    finish = replace(
        checkpoint(child, (end,), status=RunStatus.COMPLETED, result='"ok"'), messages=(notice,)
    )
    assert store.commit([finish], now=clock.now()) == [True]

    assert store.get_run("p1").available_at == clock.now()  # type: ignore[union-attr]
    [told] = store.mail(["p1"])["p1"]
    assert ChildEnded.of_message(told.received()) == ended


def test_a_parents_message_reaches_only_its_children_and_rouses_a_paused_or_parked_one(
    store: Store, clock: FakeClock
) -> None:
    store.create_run(new_run("p1", workflow="parent_flow"), now=clock.now())
    store.create_run(new_run("stranger"), now=clock.now())
    parent = claim_only(store, clock, "p1", workflow="parent_flow")
    start = replace(
        checkpoint(parent, _started(parent, clock, "p1.0")), starts=(_child("p1.0", "p1"),)
    )
    store.commit([start], now=clock.now())
    execute_sql(
        store.url,
        "UPDATE durably_runs SET status = 'paused', available_at = NULL WHERE id = 'p1.0'",
    )
    cancels = tuple(
        Message(run_id, "cancel", "parent run p1", None, None, "durably:cancel", from_parent="p1")
        for run_id in ("p1.0", "stranger")
    )
    seq = parent.events[-1].seq + 2
    end = Event(seq, EventKind.RUN_COMPLETED, clock.now())
    done = replace(checkpoint(parent, (end,), status=RunStatus.COMPLETED), messages=cancels)
    assert store.commit([done], now=clock.now()) == [True]

    child = store.get_run("p1.0")
    assert child is not None
    assert (child.status, child.available_at) == (RunStatus.PENDING, clock.now())
    assert [m.kind for m in store.mail(["p1.0"])["p1.0"]] == ["cancel"]
    assert store.mail(["stranger"]) == {}  # not its child: nothing reaches it


def test_a_checkpoint_that_continues_as_new_replaces_the_history_and_the_input(
    store: Store, clock: FakeClock
) -> None:
    store.create_run(new_run("loop"), now=clock.now())
    claim = claim_only(store, clock, "loop")
    seq = claim.events[-1].seq + 1
    old = (Event(seq, EventKind.VALUE_RECORDED, clock.now(), 0, "durably.now", None, "1"),)
    assert store.commit([checkpoint(claim, old)], now=clock.now()) == [True]
    started = encode_payload(RunStarted(generation=2))
    fresh = (Event(seq + 1, EventKind.RUN_STARTED, clock.now(), data=started),)
    stale = Checkpoint("loop", claim.epoch + 1, fresh, RunStatus.PENDING, input='{"n": 2}')
    assert store.commit([stale], now=clock.now()) == [False]
    assert len(store.history("loop")) == 3  # untouched

    new = replace(stale, epoch=claim.epoch, available_at=clock.now())
    assert store.commit([new], now=clock.now()) == [True]
    assert store.commit([new], now=clock.now()) == [True]  # a lost answer, tried again
    assert [e.seq for e in store.history("loop")] == [seq + 1]
    run = store.get_run("loop")
    assert run is not None
    assert (run.input, run.status, run.event_count) == ('{"n": 2}', RunStatus.PENDING, seq + 1)
    [again] = store.claim(
        "w", ["send_invoice"], now=clock.now(), lease=timedelta(seconds=30), limit=1
    )
    assert [e.kind for e in again.events] == [EventKind.RUN_STARTED, EventKind.CLAIMED]
    assert again.input == '{"n": 2}'

"""The Store contract for the two calls behind steering runs: `mail` hands a worker the
messages sent to the runs it is running (a read: they stay in the inbox until a fenced
checkpoint folds them), and `fork` restarts an ended run as a new one whose history is given
whole, with a note on the ended run, in one transaction. Both real stores."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta

from durably.core.history import Event, EventKind
from durably.core.status import RunStatus
from durably.stores import Message, NewRun, SentOutcome, Store
from durably.testing import FakeClock

from .support import checkpoint, claim_only, new_run, step_events


def test_mail_is_the_undelivered_messages_of_the_runs_that_have_any(
    store: Store, clock: FakeClock
) -> None:
    for run_id in ("r1", "r2", "r3"):
        store.create_run(new_run(run_id), now=clock.now())
    first = store.send(Message("r1", "pause", "ops"), now=clock.now())
    second = store.send(Message("r1", "cancel", "erin", data='"dup"'), now=clock.now())
    store.send(Message("r3", "signal", "bob", name="go"), now=clock.now())

    mail = store.mail(["r1", "r2", "missing"])

    assert set(mail) == {"r1"}  # r2 has none; r3 was not asked about; unknown ids are ignored
    assert [m.id for m in mail["r1"]] == [first.message_id, second.message_id]  # sent order
    assert [(m.kind, m.sender, m.data) for m in mail["r1"]] == [
        ("pause", "ops", None),
        ("cancel", "erin", '"dup"'),
    ]
    assert store.mail([]) == {}


def test_mail_is_a_read_the_fenced_commit_that_folds_it_empties_the_inbox(
    store: Store, clock: FakeClock
) -> None:
    store.create_run(new_run("r1"), now=clock.now())
    claim = claim_only(store, clock, "r1")
    sent = store.send(Message("r1", "cancel", "ops"), now=clock.now())
    assert sent.outcome is SentOutcome.STORED
    assert sent.status is RunStatus.RUNNING

    [delivered] = store.mail(["r1"])["r1"]
    assert store.mail(["r1"])["r1"] == (delivered,)  # reading twice changes nothing
    folded = Event(
        claim.events[-1].seq + 1,
        EventKind.MESSAGE_RECEIVED,
        clock.now(),
        data=json.dumps({"id": delivered.id}),
    )
    assert store.commit([checkpoint(claim, (folded,), consumed=(delivered.id,))], now=clock.now())
    assert store.mail(["r1"]) == {}


def ended(store: Store, clock: FakeClock, run_id: str, status: RunStatus) -> list[Event]:
    """A run that ran two steps and ended `status`; its history."""
    store.create_run(new_run(run_id), now=clock.now())
    claim = claim_only(store, clock, run_id)
    steps = step_events(claim, 0, clock.now()) + step_events(
        [*claim.events, *step_events(claim, 0, clock.now())], 1, clock.now()
    )
    assert store.commit([checkpoint(claim, steps, status=status)], now=clock.now()) == [True]
    return store.history(run_id)


def forked_history(source: list[Event], upto: int, at: datetime) -> list[Event]:
    """A run_started, then the source's step events before position `upto`, renumbered."""
    started = Event(1, EventKind.RUN_STARTED, at, data='{"restarted_from": "r1"}')
    reused = [e for e in source if e.position is not None and e.position < upto]
    return [started, *(replace(event, seq=seq) for seq, event in enumerate(reused, start=2))]


def note(at: datetime) -> Event:
    return Event(0, EventKind.RUN_RESTARTED, at, data='{"run": "r1.restart-1"}')


def test_fork_creates_the_run_with_its_history_and_notes_the_ended_run(
    store: Store, clock: FakeClock
) -> None:
    source = ended(store, clock, "r1", RunStatus.FAILED)
    clock.advance(timedelta(minutes=5))
    history = forked_history(source, 1, clock.now())

    forked = store.fork(
        NewRun("r1.restart-1", "send_invoice", '{"amount": 12}'),
        history,
        source="r1",
        note=note(clock.now()),
        now=clock.now(),
    )

    assert forked
    run = store.get_run("r1.restart-1")
    assert run is not None
    assert (run.status, run.workflow, run.input) == (
        RunStatus.PENDING,
        "send_invoice",
        '{"amount": 12}',
    )
    assert run.available_at == clock.now()  # due now
    assert store.history("r1.restart-1") == history  # exactly as given, seq from 1
    original = store.history("r1")
    assert original[:-1] == source  # nothing of the old history changed
    assert original[-1].kind is EventKind.RUN_RESTARTED
    assert original[-1].seq == source[-1].seq + 1  # numbered after its last event
    assert store.get_run("r1").status is RunStatus.FAILED  # type: ignore[union-attr]
    [claim] = store.claim(
        "w", ["send_invoice"], now=clock.now(), lease=timedelta(seconds=30), limit=5
    )
    assert claim.run_id == "r1.restart-1"
    assert [e.seq for e in claim.events][: len(history)] == [e.seq for e in history]


def test_fork_refuses_a_run_that_has_not_ended_or_a_taken_id_and_writes_nothing(
    store: Store, clock: FakeClock
) -> None:
    source = ended(store, clock, "done", RunStatus.COMPLETED)
    store.create_run(new_run("live"), now=clock.now())
    history = forked_history(source, 1, clock.now())
    run = NewRun("done.restart-1", "send_invoice", "{}")

    assert not store.fork(run, history, source="live", note=note(clock.now()), now=clock.now())
    assert not store.fork(run, history, source="nobody", note=note(clock.now()), now=clock.now())
    assert store.get_run("done.restart-1") is None
    assert [e.kind for e in store.history("live")] == [EventKind.RUN_STARTED]

    taken = NewRun("live", "send_invoice", "{}")  # the id of a run that exists
    assert not store.fork(taken, history, source="done", note=note(clock.now()), now=clock.now())
    assert store.history("done") == source  # no note for a fork that did not happen

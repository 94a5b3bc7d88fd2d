"""The Store contract for debounced starts (durably.core.debounce): the starts of one
workflow and debounce key make one gathering run, which takes each start's input and due
time (never past its due_by) until a worker claims it; then the next start makes a new run.
Racing starts, from threads and from other connections, never make two gathering runs, and
a claim racing them never loses a start nor changes a begun run's input. Every test runs
against both real stores, plain and encrypted."""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from datetime import datetime, timedelta

import pytest

from durably.codec.encryption import PREFIX, Keyring, new_key
from durably.core.audit import Action, Via, audit_of
from durably.core.debounce import Debounce
from durably.core.status import RunStatus
from durably.stores import Message, NewRun, Store, open_store
from durably.testing import FakeClock

from .support import LEASE, WORKFLOW, execute_sql, in_threads, new_run

WINDOW = timedelta(seconds=30)


def debounced(
    run_id: str,
    n: int,
    now: datetime,
    *,
    key: str = "customer-42",
    workflow: str = WORKFLOW,
    max_wait: timedelta | None = None,
) -> NewRun:
    """The run a start `debounce=WINDOW, debounce_key=key, max_wait=...` of input {"n": n}
    asks for at `now`, as durably.client.starts builds it."""
    how = Debounce(key, WINDOW, max_wait)
    run = NewRun(run_id, workflow, json.dumps({"n": n}))
    return NewRun(
        run.id, run.workflow, run.input, due=how.due(now), debounce=key, due_by=how.due_by(now)
    )


def inputs_of(store: Store) -> list[int]:
    return sorted(json.loads(run.input)["n"] for run in store.runs(limit=1000))


def claim_ids(store: Store, clock: FakeClock, workflow: str = WORKFLOW) -> list[str]:
    claims = store.claim("worker-a", [workflow], now=clock.now(), lease=LEASE, limit=100)
    return [claim.run_id for claim in claims]


def test_starts_of_one_key_in_the_window_make_one_run_with_the_last_input(
    store: Store, clock: FakeClock
) -> None:
    first, created = store.create_run(debounced("s0", 0, clock.now()), now=clock.now())
    assert created
    assert (first.id, first.debounce, first.gathered, first.gathering) == (
        "s0",
        "customer-42",
        1,
        True,
    )
    assert first.available_at == clock.now() + WINDOW
    for n in range(1, 100):
        clock.advance("1s")
        record, created = store.create_run(debounced(f"s{n}", n, clock.now()), now=clock.now())
        assert (record.id, created) == ("s0", False)
        assert json.loads(record.input) == {"n": n}

    [run] = store.runs(limit=10)
    assert (run.id, run.status, run.gathered, run.lease_epoch) == ("s0", RunStatus.PENDING, 100, 0)
    assert json.loads(run.input) == {"n": 99}
    assert run.available_at == clock.now() + WINDOW  # the last start's window
    assert run.created_at == first.created_at
    assert [event.kind for event in store.history("s0")] == ["run_started"]
    assert claim_ids(store, clock) == []  # not due until the starts stop
    clock.advance(WINDOW)
    [claim] = store.claim("worker-a", [WORKFLOW], now=clock.now(), lease=LEASE, limit=10)
    assert (claim.run_id, json.loads(claim.input)) == ("s0", {"n": 99})


def test_the_gathering_runs_first_claim_hands_back_its_first_starts_event_as_stored(
    store: Store, store_url: str, clock: FakeClock
) -> None:
    # On PostgreSQL the first start's run_started data is kept in the run's row (schema V15)
    # and a first claim builds the event from it: a start that joins changes neither.
    first = '{"correlation_id": "basket-1"}'
    store.create_run(replace(debounced("s0", 0, clock.now()), started=first), now=clock.now())
    clock.advance("1s")
    joins = replace(debounced("s1", 1, clock.now()), started='{"correlation_id": "basket-2"}')
    assert store.create_run(joins, now=clock.now())[0].id == "s0"
    clock.advance(WINDOW)

    [claim] = store.claim("worker-a", [WORKFLOW], now=clock.now(), lease=LEASE, limit=10)

    assert list(claim.events) == store.history("s0")
    assert claim.events[0].data == first
    if not store_url.startswith("sqlite"):  # made from the row, which kept the first's data
        assert execute_sql(store_url, "SELECT started FROM durably_runs") == [(first,)]


def test_another_key_or_another_workflow_makes_another_run(store: Store, clock: FakeClock) -> None:
    now = clock.now()
    store.create_run(debounced("a1", 1, now, key="a"), now=now)
    store.create_run(debounced("b1", 2, now, key="b"), now=now)
    store.create_run(debounced("o1", 3, now, key="a", workflow="other"), now=now)
    store.create_run(new_run("plain"), now=now)  # a plain start gathers nothing
    record, created = store.create_run(debounced("a2", 4, now, key="a"), now=now)

    assert (record.id, created) == ("a1", False)
    runs = {run.id: run for run in store.runs(limit=10)}
    assert sorted(runs) == ["a1", "b1", "o1", "plain"]
    assert [runs[name].gathered for name in ("a1", "b1", "o1")] == [2, 1, 1]
    assert (runs["plain"].debounce, runs["plain"].gathered, runs["plain"].gathering) == (
        None,
        None,
        False,
    )


def test_max_wait_caps_the_due_time_however_many_starts_come(
    store: Store, clock: FakeClock
) -> None:
    began = clock.now()
    cap = timedelta(minutes=5)
    store.create_run(debounced("s0", 0, began, max_wait=cap), now=began)
    for n in range(1, 40):  # a start every 10 s for 6.5 minutes: never 30 s of quiet
        clock.advance("10s")
        record, _ = store.create_run(debounced(f"s{n}", n, clock.now()), now=clock.now())
        assert record.available_at == min(clock.now() + WINDOW, began + cap)
        assert record.due_by == began + cap  # the first start's, whatever the later ones say

    assert clock.now() > began + cap
    [claim] = store.claim("worker-a", [WORKFLOW], now=clock.now(), lease=LEASE, limit=10)
    assert json.loads(claim.input) == {"n": 39}


def test_a_cap_shorter_than_the_window_makes_the_first_start_due_at_the_cap(
    store: Store, clock: FakeClock
) -> None:
    now = clock.now()
    record, _ = store.create_run(debounced("s0", 0, now, max_wait=timedelta(seconds=5)), now=now)

    assert record.available_at == record.due_by == now + timedelta(seconds=5)


def test_a_start_after_the_claim_makes_a_new_run_and_leaves_the_begun_one_as_it_is(
    store: Store, clock: FakeClock
) -> None:
    store.create_run(debounced("s0", 0, clock.now()), now=clock.now())
    store.create_run(debounced("s1", 1, clock.now()), now=clock.now())
    clock.advance(WINDOW)
    assert claim_ids(store, clock) == ["s0"]

    record, created = store.create_run(debounced("s2", 2, clock.now()), now=clock.now())

    assert (record.id, created, record.gathered, record.gathering) == ("s2", True, 1, True)
    begun = store.get_run("s0")
    assert begun is not None
    assert (begun.status, json.loads(begun.input), begun.gathered) == (
        RunStatus.RUNNING,
        {"n": 1},
        2,
    )
    assert (begun.debounce, begun.gathering) == ("customer-42", False)  # the key stays shown


def test_a_run_with_mail_keeps_the_due_time_the_mail_gave_it(
    store: Store, clock: FakeClock
) -> None:
    store.create_run(debounced("s0", 0, clock.now()), now=clock.now())
    store.send(Message("s0", "cancel", "alice", dedupe_key="c1"), now=clock.now())
    woken = store.get_run("s0")
    assert woken is not None
    assert woken.available_at == clock.now()  # made due now, for the cancel

    clock.advance("1s")
    record, created = store.create_run(debounced("s1", 1, clock.now()), now=clock.now())

    assert (record.id, created, record.gathered) == ("s0", False, 2)
    assert record.available_at == woken.available_at  # not pushed back: the cancel goes first


def test_a_batch_applies_its_debounced_starts_in_order(store: Store, clock: FakeClock) -> None:
    now = clock.now()
    outcomes = store.create_runs(
        [
            debounced("s0", 0, now),
            new_run("plain"),
            debounced("s1", 1, now),
            debounced("t0", 7, now, key="other"),
            debounced("s2", 2, now),
            new_run("plain"),
        ],
        now=now,
    )

    assert [(record.id, created) for record, created in outcomes] == [
        ("s0", True),
        ("plain", True),
        ("s0", False),
        ("t0", True),
        ("s0", False),
        ("plain", False),
    ]
    run = store.get_run("s0")
    assert run is not None
    assert (json.loads(run.input), run.gathered) == ({"n": 2}, 3)


def test_concurrent_starts_from_threads_make_one_gathering_run(
    store: Store, clock: FakeClock
) -> None:
    threads, each = 8, 25

    def start(index: int) -> list[str]:
        made = []
        for n in range(each):
            run = debounced(f"t{index}-{n}", index * each + n, clock.now())
            record, created = store.create_run(run, now=clock.now())
            if created:
                made.append(record.id)
        return made

    made = [run_id for found in in_threads(threads, start) for run_id in found]

    [run] = store.runs(limit=1000)
    assert made == [run.id]
    assert run.gathered == threads * each


@pytest.mark.parametrize("batched", [False, True], ids=["one-by-one", "batches"])
def test_concurrent_starts_from_other_connections_make_one_gathering_run(
    store_url: str, clock: FakeClock, batched: bool
) -> None:
    stores = [open_store(store_url) for _ in range(6)]
    each = 20

    def start(index: int) -> int:
        runs = [debounced(f"c{index}-{n}", n, clock.now()) for n in range(each)]
        if batched:
            outcomes = stores[index].create_runs(runs, now=clock.now())
        else:
            outcomes = [stores[index].create_run(run, now=clock.now()) for run in runs]
        return sum(created for _, created in outcomes)

    try:
        made = in_threads(len(stores), start, ready=lambda index: stores[index].get_run("-"))
        [run] = stores[0].runs(limit=1000)
    finally:
        for opened in stores:
            opened.close()
    assert sum(made) == 1
    assert run.gathered == len(stores) * each


def test_a_claim_racing_starts_never_loses_one_nor_changes_a_begun_runs_input(
    store_url: str, clock: FakeClock
) -> None:
    starters, each = 4, 60
    clock.advance("1h")
    past = clock.now() - timedelta(minutes=10)  # every run due at once: the claimer races
    store, claimer = open_store(store_url), open_store(store_url)
    done = threading.Event()
    claimed: dict[str, str] = {}  # run id -> the input its claim began with

    def start(index: int) -> None:
        for n in range(each):
            run = debounced(f"r{index}-{n}", index * each + n, past)
            store.create_run(run, now=clock.now())

    def claim() -> None:
        while True:
            last_round = done.is_set()
            for found in claimer.claim("c", [WORKFLOW], now=clock.now(), lease=LEASE, limit=5):
                claimed[found.run_id] = found.input
            if last_round:
                return

    thread = threading.Thread(target=claim, name="claimer")
    thread.start()
    try:
        in_threads(starters, start)
    finally:
        done.set()
        thread.join(timeout=60)
        claimer.close()
    runs = store.runs(limit=10_000)
    store.close()
    assert sum(run.gathered or 0 for run in runs) == starters * each  # no start lost
    assert [run.id for run in runs if run.gathering] == []  # the last claim took the last
    for run in runs:
        assert run.input == claimed[run.id]  # as it began: no start changed it after


def test_a_persons_start_that_joins_is_in_the_audit_trail(store: Store, clock: FakeClock) -> None:
    def by(who: str, run: NewRun) -> NewRun:
        audit = audit_of(Action.START, who, Via.CLI, debounce=run.debounce)
        return NewRun(
            run.id, run.workflow, run.input, due=run.due, debounce=run.debounce, audit=audit
        )

    store.create_run(by("alice", debounced("s0", 0, clock.now())), now=clock.now())
    store.create_run(debounced("s1", 1, clock.now()), now=clock.now())  # the app's: none
    store.create_run(by("bob", debounced("s2", 2, clock.now())), now=clock.now())

    trail = store.audit_trail(limit=10, run_id="s0")
    assert [(entry.by, entry.action, entry.run_id) for entry in trail] == [
        ("bob", "start", "s0"),
        ("alice", "start", "s0"),
    ]
    assert json.loads(trail[0].detail or "{}") == {"debounce": "customer-42"}


def test_the_encrypted_store_seals_the_input_a_start_gives_the_gathering_run(
    store_url: str, clock: FakeClock
) -> None:
    keys = Keyring.parse([f"k1:{new_key()}"], where="the contract suite")
    store = open_store(store_url, keys=keys)
    try:
        store.create_run(debounced("s0", 0, clock.now()), now=clock.now())
        record, created = store.create_run(debounced("s1", 1, clock.now()), now=clock.now())
        assert (record.id, created, json.loads(record.input)) == ("s0", False, {"n": 1})
        [(stored,)] = execute_sql(store_url, "SELECT input FROM durably_runs")
        assert stored.startswith(PREFIX)
        assert '"n"' not in stored
        assert keys.open(stored) == record.input
        assert inputs_of(store) == [1]
    finally:
        store.close()

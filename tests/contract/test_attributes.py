"""The Store contract for runs' custom attributes: written with the run in its create's
transaction (create_run, create_runs, fork, import, a checkpoint's children), read back
exactly as given, searched by (each must match, with the other filters and the keyset
cursor) through their index, deleted with pruned runs, and left in the clear by the
encrypted store. Every test runs against both real stores, plain and encrypted."""

from __future__ import annotations

import dataclasses
import sqlite3
from datetime import timedelta
from typing import Any

import pytest

from durably.core.history import Event, EventKind
from durably.core.status import RunStatus
from durably.stores import NewRun, Store
from durably.stores.sql import reads
from durably.testing import FakeClock

from .support import LEASE, WORKFLOW, checkpoint, claim_only, execute_sql, new_run

GIVEN = {"customer": "42", "plan": "pro", "city": "Zürich", "note": "a=b: c ✓ 東京"}


def tagged(run_id: str, workflow: str = WORKFLOW, **attributes: str) -> NewRun:
    return dataclasses.replace(new_run(run_id, workflow), attributes=attributes)


def ids(runs: list[Any]) -> list[str]:
    return [run.id for run in runs]


def test_a_runs_attributes_are_written_with_it_and_read_back_as_given(
    store: Store, clock: FakeClock, store_url: str
) -> None:
    store.create_run(tagged("r1", **GIVEN), now=clock.now())
    store.create_run(new_run("plain"), now=clock.now())

    assert store.attributes(["r1", "plain", "nobody"]) == {"r1": GIVEN}
    assert store.attributes([]) == {}
    stored = execute_sql(
        store_url, "SELECT name, value FROM durably_attributes WHERE run_id = ?", ["r1"]
    )
    assert dict(stored) == GIVEN  # in the clear, in the encrypted store too


def test_a_batch_writes_each_runs_own_and_an_existing_run_keeps_its_own(
    store: Store, clock: FakeClock
) -> None:
    store.create_run(tagged("old", customer="1"), now=clock.now())

    made = store.create_runs(
        [
            tagged("a", customer="2", plan="pro"),
            tagged("b"),
            tagged("a", customer="3"),  # the same id again: its first occurrence counts
            tagged("old", customer="4"),  # found, not created: nothing written
            tagged("c", customer="5"),
        ],
        now=clock.now(),
    )

    assert [created for _, created in made] == [True, True, False, False, True]
    assert store.attributes(["a", "b", "c", "old"]) == {
        "a": {"customer": "2", "plan": "pro"},
        "c": {"customer": "5"},
        "old": {"customer": "1"},
    }
    _, created = store.create_run(tagged("c", customer="6"), now=clock.now())
    assert created is False
    assert store.attributes(["c"]) == {"c": {"customer": "5"}}


def test_a_create_whose_attributes_cannot_be_written_creates_nothing(
    store: Store, clock: FakeClock, store_url: str
) -> None:
    # A row left behind under the new run's id and name: writing the attributes fails, and
    # with them the whole create (one transaction), in a batch too.
    execute_sql(store_url, "INSERT INTO durably_attributes VALUES ('r1', 'customer', 'x')")

    with pytest.raises(Exception, match=r"(?i)unique|duplicate"):
        store.create_run(tagged("r1", customer="42"), now=clock.now())
    with pytest.raises(Exception, match=r"(?i)unique|duplicate"):
        store.create_runs([tagged("r0"), tagged("r1", customer="42")], now=clock.now())

    assert store.get_run("r1") is None
    assert store.get_run("r0") is None
    assert store.history("r1") == []
    assert store.attributes(["r0", "r1"]) == {"r1": {"customer": "x"}}


def test_runs_are_found_by_attributes_each_of_which_must_match(
    store: Store, clock: FakeClock
) -> None:
    for run_id, workflow, attributes in [
        ("a", WORKFLOW, {"customer": "42", "plan": "pro"}),
        ("b", WORKFLOW, {"customer": "42", "plan": "free"}),
        ("c", "refund", {"customer": "42", "plan": "pro"}),
        ("d", WORKFLOW, {"customer": "7", "plan": "pro"}),
        ("e", WORKFLOW, {}),
    ]:
        store.create_run(tagged(run_id, workflow, **attributes), now=clock.now())
        clock.advance("1s")
    keyed = dataclasses.replace(tagged("f", customer="42"), key="tenant-1", queue="emails")
    store.create_run(keyed, now=clock.now())
    [running] = store.claim("w", [WORKFLOW], now=clock.now(), lease=LEASE, limit=1)
    assert running.run_id == "a"  # the first due

    assert ids(store.runs(attributes={"customer": "42"})) == ["f", "a", "c", "b"]
    assert ids(store.runs(attributes={"customer": "42", "plan": "pro"})) == ["a", "c"]
    assert ids(store.runs(attributes={"customer": "42", "plan": "gold"})) == []
    assert ids(store.runs(attributes={"customer": "42"}, workflow="refund")) == ["c"]
    assert ids(store.runs(attributes={"plan": "pro"}, status=RunStatus.RUNNING)) == ["a"]
    assert ids(store.runs(attributes={"customer": "42"}, key="tenant-1")) == ["f"]
    assert ids(store.runs(attributes={"customer": "42"}, queue="emails")) == ["f"]
    assert ids(store.runs(attributes={"customer": "42"}, queue="default")) == ["a", "c", "b"]
    since = clock.now() - timedelta(seconds=4)  # started with b or after
    assert ids(store.runs(attributes={"plan": "pro"}, since=since)) == ["d", "c"]
    assert ids(store.runs(attributes={"plan": "pro"}, until=since)) == ["a"]
    assert ids(store.runs(attributes={"Customer": "42"})) == []  # names are exact
    assert ids(store.runs(attributes={})) == ids(store.runs())


def test_a_search_pages_with_the_keyset_cursor(store: Store, clock: FakeClock) -> None:
    for number in range(7):
        wanted = {"customer": "42"} if number % 2 == 0 else {"customer": "7"}
        store.create_run(tagged(f"r{number}", **wanted), now=clock.now())  # all at one time

    seen: list[str] = []
    after = None
    while True:
        page = store.runs(attributes={"customer": "42"}, limit=2, after=after)
        seen += ids(page)
        if len(page) < 2:
            break
        after = (page[-1].updated_at, page[-1].id)

    assert seen == ["r6", "r4", "r2", "r0"]


def test_forks_imports_and_children_are_created_with_the_attributes_they_are_given(
    store: Store, clock: FakeClock
) -> None:
    store.create_run(tagged("parent", customer="42"), now=clock.now())
    claim = claim_only(store, clock, "parent")
    child = tagged("parent.child", "refund", customer="43")
    done = checkpoint(claim, status=RunStatus.COMPLETED, result="null")
    assert store.commit([dataclasses.replace(done, starts=(child,))], now=clock.now()) == [True]
    started = Event(1, EventKind.RUN_STARTED, clock.now())
    note = Event(0, EventKind.RUN_RESTARTED, clock.now(), data='{"as": "parent.restart-1"}')

    forked = store.fork(
        tagged("parent.restart-1", customer="42"),
        [started],
        source="parent",
        note=note,
        now=clock.now(),
    )
    imported = store.import_run(tagged("brought", plan="pro"), [started], now=clock.now())

    assert (forked, imported) == (True, True)
    assert store.attributes(["parent.child", "parent.restart-1", "brought"]) == {
        "parent.child": {"customer": "43"},
        "parent.restart-1": {"customer": "42"},
        "brought": {"plan": "pro"},
    }


def test_pruning_deletes_a_runs_attributes_with_it(
    store: Store, clock: FakeClock, store_url: str
) -> None:
    store.create_run(tagged("done", customer="42"), now=clock.now())
    done = claim_only(store, clock, "done")
    store.create_run(tagged("kept", customer="42"), now=clock.now())
    store.commit([checkpoint(done, status=RunStatus.COMPLETED, result="null")], now=clock.now())
    clock.advance("30d")

    assert store.prune(clock.now() - timedelta(days=1), limit=100) == 1

    assert store.attributes(["done", "kept"]) == {"kept": {"customer": "42"}}
    assert ids(store.runs(attributes={"customer": "42"})) == ["kept"]
    left = execute_sql(store_url, "SELECT run_id FROM durably_attributes")
    assert left == [("kept",)]


class Explaining:
    """A connection that explains each query it is given instead of running it: what the
    database plans for the query durably writes, on the real database."""

    def __init__(self, db: Any, explain: str) -> None:
        self.db, self.explain, self.plan = db, explain, ""

    def execute(self, sql: str, params: Any = ()) -> Any:
        rows = self.db.execute(self.explain + sql, params).fetchall()
        self.plan += "\n".join(str(row) for row in rows)
        return self

    def fetchall(self) -> list[Any]:
        return []


def test_a_search_by_attribute_starts_from_its_index(
    store: Store, clock: FakeClock, store_url: str
) -> None:
    runs = [tagged(f"r{n}", customer=f"c{n}", plan=f"p{n % 3}") for n in range(2000)]
    store.create_runs(runs, now=clock.now())
    execute_sql(store_url, "ANALYZE")
    wanted = {"customer": "c7", "plan": "p1"}

    if store_url.startswith("sqlite:///"):
        with sqlite3.connect(store_url.removeprefix("sqlite:///")) as db:
            explaining = Explaining(db, "EXPLAIN QUERY PLAN ")
            reads.runs(
                explaining,
                reads.SQLITE,
                status=None,
                workflow=None,
                limit=10,
                after=None,
                attributes=wanted,
            )
        db.close()
    else:
        import psycopg

        with psycopg.connect(store_url, autocommit=True) as pg:
            explaining = Explaining(pg, "EXPLAIN ")
            reads.runs(
                explaining,
                reads.POSTGRES,
                status=None,
                workflow=None,
                limit=10,
                after=None,
                attributes=wanted,
            )

    assert "durably_attributes_by_value" in explaining.plan, explaining.plan
    assert ids(store.runs(attributes=wanted)) == ["r7"]

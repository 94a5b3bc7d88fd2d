"""The Store contract for versions and workers: a run keeps the version it was created with,
a claim that names the versions it serves takes only those (and runs from before versions
were recorded), the due runs nobody here serves are counted, and workers beat, are listed
and are forgotten. Every test runs against both real stores."""

from __future__ import annotations

from datetime import timedelta

from durably.core.history import Event, EventKind
from durably.core.status import RunStatus
from durably.stores import Checkpoint, NewRun, Store
from durably.stores.records import WorkerBeat
from durably.testing import FakeClock

from .support import LEASE, WORKFLOW, checkpoint, execute_sql


def _run(run_id: str, version: str | None, workflow: str = WORKFLOW) -> NewRun:
    return NewRun(run_id, workflow, "[]", version=version)


def _claimed(store: Store, clock: FakeClock, serves: object) -> list[str]:
    claims = store.claim("w", serves, now=clock.now(), lease=LEASE, limit=100)  # type: ignore[arg-type]
    return sorted(claim.run_id for claim in claims)


def test_a_run_keeps_the_version_it_was_created_with(store: Store, clock: FakeClock) -> None:
    store.create_run(_run("one", "v1"), now=clock.now())
    store.create_runs([_run("two", "v2"), _run("none", None)], now=clock.now())

    versions = {name: store.get_run(name).version for name in ("one", "two", "none")}  # type: ignore[union-attr]
    assert versions == {"one": "v1", "two": "v2", "none": None}


def test_a_claim_takes_only_the_versions_it_serves_and_unversioned_runs(
    store: Store, clock: FakeClock
) -> None:
    for run_id, version in [("old", "v1"), ("new", "v2"), ("older", "v0"), ("before", None)]:
        store.create_run(_run(run_id, version), now=clock.now())
    store.create_run(_run("other", "v1", workflow="other"), now=clock.now())

    assert _claimed(store, clock, {WORKFLOW: ["v2"], "other": []}) == ["before", "new"]
    assert _claimed(store, clock, {WORKFLOW: ["v1", "v0"]}) == ["old", "older"]
    assert _claimed(store, clock, ["other"]) == ["other"]  # a list of names: any version


def test_due_runs_of_versions_not_served_are_counted(store: Store, clock: FakeClock) -> None:
    store.create_run(_run("e", "v3"), now=clock.now())
    [claim] = store.claim("w", {WORKFLOW: ["v3"]}, now=clock.now(), lease=LEASE, limit=1)
    later = clock.now() + timedelta(hours=1)  # "e" sleeps: not due, not counted
    store.commit([checkpoint(claim, status=RunStatus.PENDING, available_at=later)], now=clock.now())
    for run_id, version in [("a", "v1"), ("b", "v1"), ("c", "v2"), ("d", None)]:
        store.create_run(_run(run_id, version), now=clock.now())

    assert store.unserved({WORKFLOW: ["v2"]}, now=clock.now()) == {(WORKFLOW, "v1"): 2}
    assert store.unserved({WORKFLOW: ["v1", "v2"]}, now=clock.now()) == {}
    assert store.unserved({"other": ["v1"]}, now=clock.now()) == {}


def test_children_and_forks_are_created_with_the_version_given(
    store: Store, clock: FakeClock
) -> None:
    store.create_run(_run("parent", "p1"), now=clock.now())
    [claim] = store.claim("w", [WORKFLOW], now=clock.now(), lease=LEASE, limit=1)
    child = NewRun("parent.1.kid", "kid", "[]", parent="parent", version="k7")
    assert store.commit(
        [Checkpoint(claim.run_id, claim.epoch, (), starts=(child,))], now=clock.now()
    ) == [True]
    ended = checkpoint(claim, status=RunStatus.COMPLETED, result="null")
    assert store.commit([ended], now=clock.now()) == [True]
    started = Event(1, EventKind.RUN_STARTED, clock.now())
    note = Event(0, EventKind.RUN_RESTARTED, clock.now(), data='{"run": "again"}')
    assert store.fork(_run("again", "p1"), [started], source="parent", note=note, now=clock.now())

    assert store.get_run("parent.1.kid").version == "k7"  # type: ignore[union-attr]
    assert store.get_run("again").version == "p1"  # type: ignore[union-attr]


def test_workers_beat_are_listed_and_forgotten(store: Store, clock: FakeClock) -> None:
    started = clock.now()
    first = WorkerBeat("w-1", started, started, timedelta(seconds=10), {WORKFLOW: ("v1",)})
    store.beat(first)
    clock.advance("10s")
    store.beat(
        WorkerBeat("w-1", started, clock.now(), timedelta(seconds=10), {WORKFLOW: ("v1", "v2")})
    )
    store.beat(WorkerBeat("w-2", clock.now(), clock.now(), timedelta(seconds=5), {}))

    listed = store.workers()
    assert [w.name for w in listed] == ["w-1", "w-2"]
    assert listed[0].seen_at == clock.now()
    assert listed[0].started_at == started
    assert listed[0].serves == {WORKFLOW: ("v1", "v2")}
    assert listed[0].alive(clock.now() + timedelta(seconds=30))
    assert not listed[0].alive(clock.now() + timedelta(seconds=31))

    store.forget_worker("w-2")
    assert [w.name for w in store.workers()] == ["w-1"]
    clock.advance(timedelta(days=1, seconds=11))
    store.beat(WorkerBeat("w-3", clock.now(), clock.now(), timedelta(seconds=5), {}))
    assert [w.name for w in store.workers()] == ["w-3"]  # silent a day: dropped


def test_the_version_column_is_plain_text(store: Store, store_url: str, clock: FakeClock) -> None:
    store.create_run(_run("r", "2025-06-a"), now=clock.now())
    assert execute_sql(store_url, "SELECT version FROM durably_runs WHERE id = ?", ["r"]) == [
        ("2025-06-a",)
    ]

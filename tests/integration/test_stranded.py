"""A run whose worker died is no dead end, on both stores: `runs show` says its lease expired
and its worker is presumed dead, and who takes it over (or that nobody can); the worker that
takes it over records the attempt lost; a person can fail it, or release the dead worker's
leases at once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import durably
from durably import DurablyError, RunStatus
from durably.core.history import EventKind
from durably.stores.records import WorkerBeat
from durably.testing import FakeClock
from durably.views.timeline import describe_run

from .conftest import DEAD_LEASE, dead_worker
from .test_cli import durably_cli


def ship_app(app: durably.App) -> list[str]:
    ran: list[str] = []

    @app.step
    async def pack(order: str) -> str:
        ran.append(f"pack {order}")
        return order

    @app.step
    async def ship(order: str) -> str:
        ran.append(f"ship {order}")
        return f"shipped {order}"

    @app.workflow(version="1")
    async def deliver(order: str) -> str:
        await pack(order)
        return await ship(order)  # type: ignore[no-any-return]

    return ran


def test_runs_show_says_the_worker_is_presumed_dead_and_who_takes_over(
    app: durably.App, clock: FakeClock, store_url: str, tmp_path: Path
) -> None:
    ship_app(app)
    app.start("deliver", "o-1", id="o-1")
    dead_worker(app.store, clock, "deliver", [("pack", "o-1")], unknown="ship")
    clock.advance(DEAD_LEASE + timedelta(seconds=1))
    run, history = app.client.get("o-1"), app.client.history("o-1")

    nobody = dict(describe_run(run, history, [], clock.now()))
    alive = WorkerBeat("w-2", clock.now(), clock.now(), timedelta(seconds=10), {"deliver": ("1",)})
    someone = dict(describe_run(run, history, [alive], clock.now()))
    shown = durably_cli("runs", "show", "o-1", "--store", store_url, cwd=tmp_path)

    assert "worker dead-worker presumed dead" in nobody["lease"]
    assert "no live worker runs it" in nobody["lease"]
    assert nobody["lease"].endswith("start one (durably worker MODULE:ATTR)")
    assert someone["lease"].endswith("the next worker to poll takes it over (w-2)")
    assert shown.returncode == 0, shown.stderr
    assert "presumed dead" in shown.stdout


def test_a_worker_silent_for_three_beats_is_presumed_dead_before_its_lease_ends(
    app: durably.App, clock: FakeClock
) -> None:
    ship_app(app)
    app.start("deliver", "o-2", id="o-2")
    beat = WorkerBeat("dead-worker", clock.now(), clock.now(), timedelta(seconds=1), {})
    app.store.beat(beat)  # it said it was alive, then took the run and died
    claim = dead_worker(app.store, clock, "deliver", [("pack", "o-2")], unknown="ship")
    clock.advance(timedelta(seconds=4))  # four beats missed; its lease (5 s) still runs
    run, history, workers = app.client.get("o-2"), app.client.history("o-2"), app.client.workers()

    said = dict(describe_run(run, history, workers, clock.now()))["now"]

    assert (run.status, run.lease_owner, run.lease_epoch) == (
        RunStatus.RUNNING,
        "dead-worker",
        claim.epoch,
    )
    assert said.startswith(
        "held by worker dead-worker, silent for 4 s and presumed dead (its attempt in flight "
        "is lost); another worker takes it over when its lease expires at "
    )
    assert said.endswith(
        "(in 1 s), or at once after a person releases its leases (durably runs release o-2)"
    )
    [dead] = workers
    assert not dead.alive(clock.now())  # `durably workers` says gone; the metric agrees


def test_the_worker_that_takes_over_records_the_attempt_lost(
    app: durably.App, clock: FakeClock
) -> None:
    ran = ship_app(app)
    handle = app.start("deliver", "o-2", id="o-2")
    dead_worker(app.store, clock, "deliver", [("pack", "o-2")], unknown="ship")
    clock.advance(DEAD_LEASE + timedelta(seconds=1))
    app.run_until_idle()

    assert handle.result(timeout=0) == "shipped o-2"
    assert ran == ["ship o-2"]
    [lost] = [e for e in app.client.history("o-2") if e.kind is EventKind.ATTEMPT_LOST]
    assert (lost.position, lost.name, lost.attempt) == (1, "ship", 1)


def test_a_person_fails_a_stranded_run_or_releases_its_dead_workers_leases(
    app: durably.App, clock: FakeClock
) -> None:
    ship_app(app)
    app.start("deliver", "o-3", id="o-3")
    app.start("deliver", "o-4", id="o-4")
    dead_worker(app.store, clock, "deliver", [("pack", "o-3")], unknown="ship")
    dead_worker(app.store, clock, "deliver", [], unknown="pack")

    with pytest.raises(DurablyError, match=r"worker dead-worker holds it until .* release"):
        app.client.fail("o-3", reason="the courier is gone")

    clock.advance(DEAD_LEASE + timedelta(seconds=1))
    app.client.fail("o-3", reason="the courier is gone")
    assert app.client.get("o-3").status is RunStatus.PENDING  # its undo goes to a worker
    app.run_until_idle()
    assert app.client.get("o-3").status is RunStatus.FAILED

    assert app.client.get("o-4").status is RunStatus.COMPLETED  # taken over: lease expired


def test_releasing_a_dead_workers_leases_lets_the_next_worker_take_over_at_once(
    app: durably.App, clock: FakeClock, store_url: str, tmp_path: Path
) -> None:
    ship_app(app)
    handle = app.start("deliver", "o-5", id="o-5")
    [held] = app.store.claim(
        "crashed", ["deliver"], now=clock.now(), lease=timedelta(hours=1), limit=1
    )
    assert app.run_until_idle() == 0  # an hour's lease: nobody takes it over yet

    released = app.client.release(held.run_id)
    owner, count = released.worker, released.count
    app.run_until_idle()
    refused = durably_cli("runs", "release", "o-5", "--store", store_url, cwd=tmp_path)

    assert (owner, count) == ("crashed", 1)
    assert handle.result(timeout=0) == "shipped o-5"
    assert refused.returncode == 1
    assert "cannot release run 'o-5': it is completed, held by no worker" in refused.stderr


def test_the_release_command_says_who_takes_over_and_what_was_left_to_release(
    app: durably.App, clock: FakeClock, store_url: str, tmp_path: Path
) -> None:
    ship_app(app)
    app.start("deliver", "o-6", id="o-6")
    now = datetime.now(UTC)  # the command's clock is the real one
    app.store.claim("crashed", ["deliver"], now=now, lease=timedelta(hours=1), limit=1)

    first = durably_cli("runs", "release", "o-6", "--store", store_url, cwd=tmp_path)
    live = WorkerBeat("w-live", now, datetime.now(UTC), timedelta(seconds=30), {})
    app.store.beat(live)  # a worker runs now: no reminder to start one
    again = durably_cli("runs", "release", "o-6", "--store", store_url, cwd=tmp_path)

    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines()[0] == "released 1 run(s) held by worker crashed"
    # no worker is live: the one command that moves it on, not a dead worker's name
    assert "no worker is live; one must run to take them over: " in first.stdout
    assert "/durably worker MODULE:ATTR --store " in first.stdout  # by its path
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines() == [
        "worker crashed holds no lease that has not expired: its runs are free for the next "
        "worker to claim already"
    ]

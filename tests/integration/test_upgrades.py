"""Deploys that never strand runs, on both stores: `durably upgrade` moves each run in flight
on a version no live worker serves to the deployed code when that code replays its history
(no step runs), records who moved it and from which version, and leaves a run whose history
the code no longer follows where it is, naming the first call where they part. A run a live
worker serves, or one that moved on meanwhile, is not moved."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import durably
from durably import RunStatus
from durably.core.event_data import read_payload
from durably.core.history import EventKind
from durably.core.payloads import Upgraded
from durably.runtime.upgrades import Outcome
from durably.stores.records import WorkerBeat
from durably.testing import FakeClock
from durably.views.timeline import describe_run

from . import upgrade_app
from .conftest import events, settle

REPO = Path(__file__).resolve().parents[2]
TARGET = "tests.integration.upgrade_app:app"


def started_on_first_code(app: durably.App, clock: FakeClock, *orders: str) -> str:
    """Runs of `order` started by the first code, asleep after their reservation; its worker
    gone (a drain beats once: the clock moves past when it would count as live)."""
    upgrade_app.build(app, "first")
    for order in orders:
        app.start("order", order, id=order)
    app.run_until_idle()
    clock.advance(timedelta(minutes=5))
    version = app.registry.workflows["order"].version
    for order in orders:
        run = app.client.get(order)
        assert (run.status, run.version) == (RunStatus.PENDING, version)
    return version


def test_an_edit_that_keeps_the_calls_moves_the_runs_and_they_finish(
    app: durably.App, other_app: durably.App, clock: FakeClock
) -> None:
    old = started_on_first_code(app, clock, "o-1", "o-2")
    upgrade_app.calls.clear()
    upgrade_app.build(other_app, "edited")
    new = other_app.registry.workflows["order"].version
    assert new != old  # the edit changed the default version: before, the runs were stranded

    dry = other_app.upgrade(dry_run=True, by="erin")
    assert [(u.run_id, u.outcome) for u in sorted(dry, key=lambda u: u.run_id)] == [
        ("o-1", Outcome.WOULD_MOVE),
        ("o-2", Outcome.WOULD_MOVE),
    ]
    assert other_app.client.get("o-1").version == old  # a dry run moves nothing

    moved = other_app.upgrade(by="erin")
    assert {(u.run_id, u.outcome, u.from_version, u.to_version) for u in moved} == {
        ("o-1", Outcome.MOVED, old, new),
        ("o-2", Outcome.MOVED, old, new),
    }
    assert upgrade_app.calls == []  # no step ran to find that out
    [note] = events(other_app, "o-1", EventKind.UPGRADED)
    assert read_payload(note, Upgraded) == Upgraded(old, new, "erin")
    assert other_app.client.get("o-1").version == new
    shown = dict(describe_run(other_app.client.get("o-1"), other_app.client.history("o-1")))
    assert shown["upgraded"].startswith(f"from version {old} to {new}, by erin at ")
    assert other_app.upgrade(by="erin") == []  # nothing is stranded any more

    clock.advance(timedelta(hours=1))
    settle(other_app, clock)
    assert other_app.client.get("o-1").status is RunStatus.COMPLETED
    assert other_app.client.get("o-1").result == '"shipped o-1"'
    # the reservation is not made again: the new code replayed it
    assert sorted(upgrade_app.calls) == ["ship o-1", "ship o-2"]


def test_a_run_the_code_no_longer_follows_stays_and_says_where_they_part(
    app: durably.App, other_app: durably.App, clock: FakeClock
) -> None:
    old = started_on_first_code(app, clock, "o-3")
    upgrade_app.calls.clear()
    upgrade_app.build(other_app, "diverging")

    [stays] = other_app.upgrade(by="erin")

    assert stays.outcome is Outcome.DIVERGES
    assert stays.why is not None
    assert "step #0 is recorded as 'reserve' but the workflow now calls 'check_fraud'" in (
        stays.why
    )
    run = other_app.client.get("o-3")
    assert (run.status, run.version) == (RunStatus.PENDING, old)  # where it was
    assert events(other_app, "o-3", EventKind.UPGRADED) == []
    assert upgrade_app.calls == []


def test_runs_a_live_worker_serves_are_left_to_it(
    app: durably.App, other_app: durably.App, clock: FakeClock
) -> None:
    old = started_on_first_code(app, clock, "o-4")
    upgrade_app.build(other_app, "edited")
    now = clock.now()
    app.store.beat(  # a worker of the first code, still running (a rolling deploy)
        WorkerBeat("old-worker", now, now, timedelta(seconds=1), {"order": (old,)})
    )

    assert other_app.upgrade(by="erin") == []
    assert other_app.client.get("o-4").version == old

    clock.advance(timedelta(seconds=10))  # it stops beating: presumed dead
    assert [u.outcome for u in other_app.upgrade(by="erin")] == [Outcome.MOVED]


def test_a_run_that_moved_on_after_its_rehearsal_is_not_moved(
    app: durably.App, other_app: durably.App, clock: FakeClock
) -> None:
    old = started_on_first_code(app, clock, "o-5")
    upgrade_app.build(other_app, "edited")
    new = other_app.registry.workflows["order"].version
    history = app.client.history("o-5")
    note = history[-1]  # any event: the store does not read it when it refuses

    moved_on = app.store.move_version(
        "o-5", from_version=old, to_version=new, seen=len(history) - 1, note=note, now=clock.now()
    )
    wrong_version = app.store.move_version(
        "o-5", from_version=new, to_version=new, seen=len(history), note=note, now=clock.now()
    )

    assert (moved_on, wrong_version) == (False, False)
    assert app.client.get("o-5").version == old
    assert app.client.history("o-5") == history  # nothing written


def test_the_command_moves_and_reports_and_fails_when_a_run_stays(
    app: durably.App, clock: FakeClock, store_url: str, tmp_path: Path
) -> None:
    started_on_first_code(app, clock, "o-6")

    def upgrade(code: str, *args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PYTHONPATH": str(REPO), "UPGRADE_STORE": store_url}
        return subprocess.run(
            [sys.executable, "-m", "durably", "upgrade", TARGET, *args],
            env={**env, "UPGRADE_CODE": code},
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    diverging = upgrade("diverging", "--dry-run")
    assert diverging.returncode == 1, diverging.stderr
    assert diverging.stdout.startswith("o-6: diverges (order ")
    assert "0 run(s) would move to the deployed code; 1 stay" in diverging.stdout

    moved = upgrade("edited", "--by", "erin", "--json")
    assert moved.returncode == 0, moved.stderr
    [shown] = json.loads(moved.stdout)
    assert (shown["run"], shown["outcome"]) == ("o-6", "moved")
    assert app.client.get("o-6").version == shown["to_version"]

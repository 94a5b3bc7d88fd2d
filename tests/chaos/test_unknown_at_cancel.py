"""An attempt whose outcome is unknown is never forgotten at cancel, with real worker
processes and SIGKILL, on both stores (tests.chaos.unknown_app journals every effect and
undo with its idempotency key: the ledger the checks read).

A worker runs a step's body (its effect happens) and is killed before the step's outcome is
recorded; the run is then cancelled. The next worker must undo that step too (it has no
reconcile hook: its undo runs, with no result), not only the steps that completed. Then a
storm: many runs, workers killed at random moments, half the runs cancelled at random
moments; every effect of every cancelled run is undone.
"""

from __future__ import annotations

import os
import random
import subprocess
import time
from pathlib import Path

import pytest

import durably
from durably import RunStatus
from durably.core.history import EventKind
from durably.core.status import FINAL
from durably.errors import WorkflowFailed
from tests.chaos.control_app import journal
from tests.chaos.unknown_app import build
from tests.integration.processes import kill, start_worker, wait_until

pytestmark = pytest.mark.chaos

TARGET = "tests.chaos.unknown_app:app"
WAIT = 30.0  # seconds: generous; nothing here is timed


def lines(path: Path, what: str) -> list[list[str]]:
    return [line.split() for line in journal(path) if line.split()[0] == what]


def test_a_step_killed_after_its_effect_is_undone_when_the_run_is_cancelled(
    store_url: str, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    client = build(durably.App(store_url))
    effects = tmp_path / "effects.txt"
    name = ("--name", "unknown-worker")  # restarted under it, it recovers its runs at once
    first, second = tmp_path / "first.log", tmp_path / "second.log"
    try:
        handle = client.start("order", str(effects), id="o-1")
        processes.append(start_worker(store_url, first, *name, target=TARGET))
        wait_until("charge's effect happened", lambda: bool(lines(effects, "charge")), first)
        kill(processes[0])  # its outcome is now unknown: the effect is in the world
        assert client.client.get("o-1").status is RunStatus.RUNNING  # leased to the dead
        assert client.client.cancel("o-1", by="ops").changed

        processes.append(start_worker(store_url, second, *name, target=TARGET))
        with pytest.raises(WorkflowFailed, match="RunCancelled: cancelled by ops"):
            handle.result(timeout=WAIT)
        assert client.client.get("o-1").status is RunStatus.CANCELLED
        # the unknown step is undone first (it came last), with no result; then the other
        assert lines(effects, "refund") == [["refund", "o-1:1:charge:undo", "None"]]
        assert lines(effects, "release") == [["release", "o-1:0:reserve:undo", "hold-1"]]
        order = [line.split()[0] for line in journal(effects)]
        assert order == ["reserve", "charge", "refund", "release"]
        claims = [e for e in client.client.history("o-1") if e.kind is EventKind.CLAIMED]
        assert len(claims) == 2  # the fault really happened: the run moved to a new worker
    finally:
        client.close()


RUNS = 40
KILLS = 4


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_storm_of_kills_and_cancels_leaves_no_effect_of_a_cancelled_run_undone(
    store_url: str, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    seed = int(os.environ.get("CHAOS_SEED") or random.randrange(2**32))
    rng = random.Random(seed)
    print(f"\nseed {seed}")
    client = build(durably.App(store_url))
    effects = tmp_path / "effects.txt"
    ids = [f"s-{n:03d}" for n in range(RUNS)]
    try:
        for run_id in ids:
            client.start("storm", str(effects), rng.uniform(0.2, 1.5), id=run_id)
        to_cancel = set(rng.sample(ids, RUNS // 2))
        logs = iter(tmp_path / f"worker-{n}.log" for n in range(KILLS + 2))
        name = ("--name", "storm-worker", "--lease", "2s")
        processes.append(start_worker(store_url, next(logs), *name, target=TARGET))
        kills, began = 0, time.monotonic()
        pending_cancels = sorted(to_cancel)
        while time.monotonic() - began < 180:
            time.sleep(rng.uniform(0.1, 0.5))  # real time is the point: faults at random
            for _ in range(rng.randint(0, 2)):
                if pending_cancels:
                    _cancel(client, _next_to_cancel(client, pending_cancels))
            if kills < KILLS and rng.random() < 0.5:
                kill(processes[-1])
                kills += 1
                processes.append(start_worker(store_url, next(logs), *name, target=TARGET))
            if not pending_cancels and kills == KILLS and _all_ended(client, ids):
                break
        assert kills == KILLS
        assert _all_ended(client, ids), "runs did not end in time"

        effects_of: dict[str, set[str]] = {}
        undone: set[str] = set()
        for what, key in (line.split() for line in journal(effects)):
            if what == "effect":
                effects_of.setdefault(key.split(":")[0], set()).add(key)
            else:
                undone.add(key.removesuffix(":undo"))
        unknown_at_cancel = 0
        for run_id in ids:
            status = client.client.get(run_id).status
            mine = effects_of.get(run_id, set())
            if status is RunStatus.CANCELLED:
                assert mine <= undone, (
                    f"{run_id}: effects never undone: {mine - undone}; its history:\n"
                    + "\n".join(
                        f"{e.seq} {e.kind} {e.position} {e.name} {e.attempt} {e.data}"
                        for e in client.client.history(run_id)
                    )
                )
                history = client.client.history(run_id)
                completed = {
                    (e.position, e.name) for e in history if e.kind is EventKind.STEP_COMPLETED
                }
                undos = {
                    (e.position, e.name)
                    for e in history
                    if e.kind is EventKind.COMPENSATION_COMPLETED
                }
                unknown_at_cancel += len(undos - completed)
            else:
                assert status is RunStatus.COMPLETED, f"{run_id} ended {status}"
                assert not (mine & undone), f"{run_id} completed, yet something was undone"
        print(f"kills {kills}; undos of unknown attempts {unknown_at_cancel}")
        assert unknown_at_cancel >= 1  # the fault was really exercised: a step cut off
    finally:
        client.close()


def _next_to_cancel(client: durably.App, pending: list[str]) -> str:
    """One of the runs still to cancel, taken off the list: a running one if there is one,
    so that cancels meet steps in flight (on a slow machine, a run cancelled before any
    worker took it has nothing to cut off)."""
    running = [
        i
        for i, run_id in enumerate(pending)
        if client.client.get(run_id).status is RunStatus.RUNNING
    ]
    return pending.pop(running[0] if running else -1)


def _cancel(client: durably.App, run_id: str) -> None:
    """Cancel the run, unless it ended first (a cancel that comes too late changes nothing)."""
    try:
        client.client.cancel(run_id, by="storm")
    except durably.DurablyError as exc:
        if "it has finished" not in str(exc):
            raise


def _all_ended(client: durably.App, ids: list[str]) -> bool:
    return all(client.client.get(run_id).status in FINAL for run_id in ids)

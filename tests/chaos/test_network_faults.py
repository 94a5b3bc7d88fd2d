"""Network faults between durably and PostgreSQL, with real worker processes: every
connection of the workers goes through a fault proxy on loopback (tests/faultproxy.py) that
adds latency, resets connections at random and loses the answers to statements the server
has acted on (ambiguous commits), while runs claim, checkpoint, fire timers, take signals
and cancels and start children. Nothing is lost, no run is stranded, every history is whole,
and a step body runs again only within the at-least-once window (its outcome's commit was
lost), always under its own idempotency key. The journal the steps write is the ledger; the
proxy's counts show the faults really happened.
"""

from __future__ import annotations

import os
import random
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import TypeVar

import pytest

import durably
from durably import RunStatus
from durably.core.history import EventKind
from durably.core.status import FINAL
from tests.chaos.control_app import journal
from tests.chaos.network_app import build
from tests.faultproxy import FaultProxy
from tests.integration.processes import patiently, start_worker

pytestmark = [pytest.mark.chaos, pytest.mark.postgres, pytest.mark.slow]

TARGET = "tests.chaos.network_app:app"
RUNS = 30
WORKERS = 2
T = TypeVar("T")


@pytest.mark.timeout(300)
def test_runs_survive_resets_latency_and_lost_answers(
    postgres_url: str, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    seed = int(os.environ.get("CHAOS_SEED") or random.randrange(2**32))
    rng = random.Random(seed)
    print(f"\nseed {seed} (rerun with CHAOS_SEED={seed})")
    proxy = FaultProxy(postgres_url, seed=seed).start()
    direct = build(durably.App(postgres_url))  # the test's own view: no faults
    faulty = build(durably.App(proxy.url))  # signals and cancels go through the faults
    effects = tmp_path / "effects.txt"
    ids = [f"n-{n:03d}" for n in range(RUNS)]
    cancelled = set(rng.sample(ids, RUNS // 5))
    try:
        for n, run_id in enumerate(ids):
            direct.start("parcel", str(effects), n, id=run_id)
        proxy.faults.latency = (0.0, 0.004)
        proxy.faults.reset = 0.004
        proxy.faults.lose_answer = 0.03
        for n in range(WORKERS):
            options = ("--lease", "3s", "--name", f"net-{n}")
            log = tmp_path / f"worker-{n}.log"
            processes.append(start_worker(proxy.url, log, *options, target=TARGET))

        began = time.monotonic()
        pending = list(ids)
        while time.monotonic() - began < 240:
            run_id = pending.pop(0) if pending else None
            if run_id is not None:
                if run_id in cancelled:
                    patiently(lambda r=run_id: faulty.client.cancel(r, by="chaos"))  # type: ignore[misc]
                else:
                    patiently(
                        lambda r=run_id: faulty.client.signal(
                            r,
                            "go",
                            by="chaos",  # type: ignore[misc]
                            dedupe_key=f"go-{r}",
                        )
                    )
            if not pending and _all_final(direct, ids):
                break
            time.sleep(0.05)
        proxy.faults.reset = proxy.faults.lose_answer = 0.0  # let the stragglers finish
        deadline = time.monotonic() + 60
        while not _all_final(direct, ids) and time.monotonic() < deadline:
            time.sleep(0.2)
        counts = proxy.counts
        print(f"proxy: {counts}")
        assert _all_final(direct, ids), _stranded(direct, ids, tmp_path)
        _check(direct, ids, cancelled, effects)
        # the faults really happened
        assert counts.lost_answers >= 3, counts
        assert counts.resets >= 3, counts
        for n in range(WORKERS):
            assert processes[n].poll() is None, (tmp_path / f"worker-{n}.log").read_text()
    finally:
        proxy.close()
        faulty.close()
        direct.close()


def _check(client: durably.App, ids: list[str], cancelled: set[str], effects: Path) -> None:
    done = Counter(line.split()[1] for line in journal(effects) if line.startswith("effect"))
    undone = {
        line.split()[1].removesuffix(":undo")
        for line in journal(effects)
        if line.startswith("undo")
    }
    for n, run_id in enumerate(ids):
        run = client.client.get(run_id)
        history = client.client.history(run_id)
        finals = [e for e in history if e.kind in _ENDINGS]
        assert len(finals) == 1, (run_id, [str(e.kind) for e in history])
        completions = Counter(e.position for e in history if e.kind is EventKind.STEP_COMPLETED)
        assert all(count == 1 for count in completions.values()), (run_id, completions)
        mine = {key for key in done if key.startswith(f"{run_id}:")}
        if run.status is RunStatus.COMPLETED:
            assert client.handle(run_id).result(timeout=0) == f"shipped {n}"
            keys = {f"{run_id}:0:pack", f"{run_id}:4:ship"}
            assert keys <= mine, (run_id, mine)
            assert not (mine & undone)
        else:
            assert run.status is RunStatus.CANCELLED, (run_id, run.status)
            assert run_id in cancelled
            assert mine <= undone, (run_id, mine - undone)
    again = {key: count for key, count in done.items() if count > 1}
    print(f"step bodies run again under their key (at-least-once window): {again}")


_ENDINGS = {EventKind.RUN_COMPLETED, EventKind.RUN_FAILED, EventKind.RUN_CANCELLED}


def _all_final(client: durably.App, ids: list[str]) -> bool:
    return all(client.client.get(run_id).status in FINAL for run_id in ids)


def _stranded(client: durably.App, ids: list[str], folder: Path) -> str:
    lines = [
        f"{run_id}: {client.client.get(run_id).status}"
        for run_id in ids
        if client.client.get(run_id).status not in FINAL
    ]
    logs = "\n".join(log.read_text()[-3000:] for log in sorted(folder.glob("worker-*.log")))
    return "\n".join(lines) + "\n" + logs

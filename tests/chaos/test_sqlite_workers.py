"""SQLite under load: four real `durably worker` processes on one database file, a thousand
short workflows started in one batch (start_many), and signals and cancels sent to some of
them while they run.

Nobody dies here, so every run must end exactly once, every step must run and be recorded
exactly once (its idempotency key journalled once: the at-least-once window only opens when a
worker dies), the four workers must all have had a share of the work, and no process, worker
or client, may meet "database is locked" or any other error.

What the steps did, and where, is journalled to a file by the workers (tests.chaos.load_app);
the engine never touches it.
"""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

import durably
from durably import RunStatus, Start
from durably.core.event_data import read_payload
from durably.core.history import Event, EventKind
from durably.core.payloads import Claimed
from durably.core.status import FINAL
from tests.chaos.control_app import journal
from tests.chaos.load_app import CHAIN, build, expected
from tests.integration.processes import start_worker, wait_until

pytestmark = pytest.mark.chaos

TARGET = "tests.chaos.load_app:app"
WORKERS = 4
OPTIONS = ("--concurrency", "8", "--poll", "50ms")
CHAINS, GATES, DOOMED = 900, 60, 40  # runs of each workflow
DEADLINE = 60.0  # seconds for every run to end, from the batch's start
TROUBLE = ("locked", "Traceback", " ERROR ", "unavailable")  # in no worker's log
ENDINGS = frozenset({EventKind.RUN_COMPLETED, EventKind.RUN_CANCELLED, EventKind.RUN_FAILED})


@pytest.mark.timeout(DEADLINE + 60)
def test_four_worker_processes_share_one_sqlite_file_under_load(
    sqlite_url: str,
    tmp_path: Path,
    processes: list[subprocess.Popen[bytes]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    client = build(durably.App(sqlite_url))
    effects = tmp_path / "effects.txt"
    log = str(effects)
    chains = {f"chain-{n:03d}": n * 7_919 + 13 for n in range(CHAINS)}
    gates = {f"gate-{n:02d}": n for n in range(GATES)}
    doomed = {f"doomed-{n:02d}": n for n in range(DOOMED)}
    names = [f"w{n}" for n in range(WORKERS)]
    logs = [tmp_path / f"{name}.log" for name in names]
    try:
        for name, worker_log in zip(names, logs, strict=True):
            options = (*OPTIONS, "--name", name)
            processes.append(start_worker(sqlite_url, worker_log, *options, target=TARGET))
        for name, worker_log in zip(names, logs, strict=True):  # all compete from the start
            wait_until(f"{name} started", said(worker_log, " started "), worker_log)

        began = time.monotonic()
        client.start_many(
            [Start("chain", (seed, log), id=run_id) for run_id, seed in chains.items()]
            + [Start("gate", (seed, log), id=run_id) for run_id, seed in gates.items()]
            + [Start("doomed", (seed, log), id=run_id) for run_id, seed in doomed.items()]
        )
        total = len(chains) + len(gates) + len(doomed)
        steered = steer(client, effects, total, began, logs)
        elapsed = time.monotonic() - began
        assert steered == (len(gates), len(doomed))
        for worker in processes:
            worker.send_signal(signal.SIGTERM)
        for worker, worker_log in zip(processes, logs, strict=True):
            assert worker.wait(timeout=30) == 0, worker_log.read_text()

        # -- every run ended once, as it should ------------------------------------------------
        records = {record.id: record for record in client.store.runs(limit=total + 1)}
        assert len(records) == total
        results = {
            run_id: json.loads(record.result or "null") for run_id, record in records.items()
        }
        statuses = Counter(str(record.status) for record in records.values())
        assert statuses == {"completed": len(chains) + len(gates), "cancelled": len(doomed)}
        assert all(results[run_id] == expected(seed) for run_id, seed in chains.items())
        assert all(results[run_id] == f"go-{seed} {seed}" for run_id, seed in gates.items())
        assert all(records[run_id].status is RunStatus.CANCELLED for run_id in doomed)
        histories = {run_id: client.client.history(run_id) for run_id in records}
        broken = {run_id: why for run_id, events in histories.items() if (why := problem(events))}
        assert not broken, f"broken histories: {list(broken.items())[:10]}"

        # -- every step ran once, and was recorded once ---------------------------------------
        effects_seen = Counter((words[0], words[1]) for words in map(str.split, journal(effects)))
        twice = {effect: count for effect, count in effects_seen.items() if count > 1}
        assert not twice, f"effects journalled more than once: {list(twice.items())[:10]}"
        assert set(effects_seen) == expected_effects(chains, gates, doomed)
        started = Counter(
            json.loads(event.data or "{}")["key"]
            for events in histories.values()
            for event in events
            if event.kind is EventKind.STEP_STARTED
        )
        assert set(started.values()) == {1}, "a step was attempted more than once"
        bodies = {key for what, key in effects_seen if what in BODIES}
        assert set(started) == bodies, "the steps started and the step bodies that ran differ"

        # -- the four workers shared the work, and met no trouble -----------------------------
        claims = Counter(
            read_payload(event, Claimed).owner
            for events in histories.values()
            for event in events
            if event.kind is EventKind.CLAIMED
        )
        ran_in = Counter(words[2] for words in map(str.split, journal(effects)))
        print(
            f"\n{total} runs ended in {elapsed:.1f}s on {WORKERS} workers; claims by worker "
            f"{dict(sorted(claims.items()))}; step bodies by process {dict(ran_in)}"
        )
        assert set(claims) == set(names)
        assert min(claims.values()) >= total // (WORKERS * 4), "a worker had almost no share"
        assert len(ran_in) == WORKERS
        for worker_log in logs:
            text = worker_log.read_text()
            found = [word for word in TROUBLE if word in text]
            assert not found, f"{worker_log.name} logged {found}:\n{text}"
        client_trouble = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert not client_trouble, f"the client logged: {client_trouble}"
    finally:
        client.close()


def said(path: Path, words: str) -> Callable[[], bool]:
    """Whether the log at `path` says `words` yet."""
    return lambda: words in path.read_text()


# -- steering -------------------------------------------------------------------------------


def steer(
    client: durably.App, effects: Path, total: int, began: float, logs: list[Path]
) -> tuple[int, int]:
    """Until every run has ended: signal each gate run once its first step ran, cancel each
    doomed run once its hanging step runs. How many were signalled and cancelled."""
    signalled: set[str] = set()
    cancelled: set[str] = set()
    while True:
        for words in map(str.split, journal(effects)):
            run_id = words[1].split(":")[0]
            if words[0] == "knock" and run_id not in signalled:
                seed = int(run_id.removeprefix("gate-"))
                assert client.client.signal(run_id, "go", f"go-{seed}", by="load test").stored
                signalled.add(run_id)
            elif words[0] == "hang" and run_id not in cancelled:
                assert client.client.cancel(run_id, reason="load test", by="load test").changed
                cancelled.add(run_id)
        records = client.store.runs(limit=total + 1)
        if sum(record.status in FINAL for record in records) == total:
            return len(signalled), len(cancelled)
        if time.monotonic() - began > DEADLINE:
            left = Counter(str(r.status) for r in records if r.status not in FINAL)
            tails = "\n".join(f"--- {p.name}\n{p.read_text()[-2000:]}" for p in logs)
            pytest.fail(f"runs not ended within {DEADLINE:.0f}s: {dict(left)}\n{tails}")
        time.sleep(0.05)


# -- the checks -----------------------------------------------------------------------------

BODIES = frozenset({*CHAIN, "knock", "enter", "reserve", "hang"})  # step bodies (not undos)


def expected_effects(
    chains: dict[str, int], gates: dict[str, int], doomed: dict[str, int]
) -> set[tuple[str, str]]:
    """Every (what, idempotency key) the journal must hold, once each."""
    wanted = {(step, f"{run_id}:{at}:{step}") for run_id in chains for at, step in enumerate(CHAIN)}
    for run_id in gates:  # the signal wait takes position 1
        wanted |= {("knock", f"{run_id}:0:knock"), ("enter", f"{run_id}:2:enter")}
    for run_id in doomed:
        hang = f"{run_id}:1:hang"
        wanted |= {("reserve", f"{run_id}:0:reserve"), ("hang", hang), ("hang-cancelled", hang)}
        wanted.add(("release", f"{run_id}:0:reserve:undo"))
    return wanted


def problem(events: list[Event]) -> str | None:
    """What is wrong with an ended run's history, or None: its events are numbered 1..n, it
    ended once (its last event), each step completed once (but a cancelled hang), and no claim
    took it over from another worker."""
    if [event.seq for event in events] != list(range(1, len(events) + 1)):
        return "its events are not numbered 1..n"
    endings = [event for event in events if event.kind in ENDINGS]
    if len(endings) != 1 or endings[0] is not events[-1]:
        return f"endings {[str(event.kind) for event in endings]}"
    completed = Counter(
        event.position for event in events if event.kind is EventKind.STEP_COMPLETED
    )
    if any(count != 1 for count in completed.values()):
        return f"a step completed more than once: {dict(completed)}"
    failed = [event.name for event in events if event.kind is EventKind.STEP_FAILED]
    if failed not in ([], ["hang"]):
        return f"steps failed: {failed}"
    for event in events:
        if event.kind is EventKind.CLAIMED and read_payload(event, Claimed).took_over_from:
            return "taken over from another worker, though none died"
    return None

"""Zombies, on both stores: a worker process stalls (SIGSTOP) in the middle of long steps until
well past its lease; a second worker takes its runs over and completes them; then the first
wakes up (SIGCONT) with its step bodies still in flight.

The lease fence must refuse whatever the zombie still writes (each run's history stays as the
second worker left it: one outcome per step attempt, one completion, the second worker's
result), and the zombie must stop its async step bodies as soon as it learns its lease is
gone, then go on serving as a healthy worker: when its heartbeat's renewal is refused, and
when a refused checkpoint tells it first (the second test: the other step bodies of that run,
the branches of a durably.gather, are cancelled with it).

What the steps did, in which process and when, is journalled to a file by the workers
(tests.chaos.zombie_app); the engine never touches it.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import durably
from durably import RunStatus, Start
from durably.core.event_data import read_payload
from durably.core.history import Event, EventKind
from durably.core.payloads import Claimed
from tests.chaos.control_app import journal, write
from tests.chaos.zombie_app import build, hurry
from tests.integration.processes import start_worker, wait_until

pytestmark = pytest.mark.chaos

TARGET = "tests.chaos.zombie_app:app"
LEASE = 2.0  # seconds: short, so that the stall past it is short too
OPTIONS = ("--lease", f"{LEASE:g}s", "--poll", "50ms")
ZOMBIE, SUCCESSOR = "zombie", "successor"  # the workers' names (--name)
LONG = 1_200  # a grind's ticks: a minute of work, unless hurried
HELD_PAST = LEASE / 2  # seconds the zombie stays stopped past its leases' expiry, at least
STOP_BOUND = LEASE  # seconds after it wakes by which the zombie's step bodies must be stopped
QUIET_TRIES = 50  # tries to stop the zombie outside a store transaction
WAIT = 30.0
ROUNDS = 3  # tries at a race (see the gather's test)
# What the zombie logs when the fence refuses it a write: a checkpoint, or (its heartbeat) the
# renewal of its lease.
REFUSED = "lease epoch 1 was taken over by another worker; this worker's writes are refused"
ABANDONED = "lease lost to another worker; abandoning it"
OUTCOMES = frozenset(
    {
        EventKind.STEP_COMPLETED,
        EventKind.STEP_ATTEMPT_FAILED,
        EventKind.STEP_FAILED,
        EventKind.ATTEMPT_LOST,
    }
)


def test_a_zombie_is_fenced_off_and_stops_its_steps_when_it_wakes(
    store_url: str, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    """Two runs of `haul` left in the middle of `grind`: z-short's grind ends by itself as the
    zombie wakes (its outcome comes too late), z-long's would go on for a minute."""
    client = build(durably.App(store_url))
    runs = ("z-long", "z-short")
    short, long = "z-short:0:grind", "z-long:0:grind"
    try:
        stall = Stall.of(client, store_url, tmp_path, processes, "haul", runs, [long, short])
        zombie, successor, effects = stall.zombie, stall.successor, stall.journal
        for run_id in runs:
            check_fenced_history(stall.settled[run_id], successor.pid)
        ticked = len(ticks(effects, short, zombie.pid))

        stall.wake(short)
        wait_until(
            "the zombie learnt it lost both runs",
            lambda: (
                bool(ended(effects, long, zombie.pid, "cancelled"))
                and bool(ended(effects, short, zombie.pid, "end", "cancelled"))
                and all(stall.told(run_id) for run_id in runs)
            ),
            stall.zombie_log,
            timeout=WAIT,
        )
        # z-long's body was cancelled by the engine, promptly, with most of its work left
        [cancelled_at] = ended(effects, long, zombie.pid, "cancelled")
        print(f"the zombie's z-long grind was cancelled {cancelled_at - stall.woke:.2f}s after")
        assert cancelled_at - stall.woke <= STOP_BOUND
        assert [at for at in ticks(effects, long, zombie.pid) if at > cancelled_at] == []
        assert ended(effects, long, zombie.pid, "end") == []
        assert len(ticks(effects, long, zombie.pid)) < LONG
        assert stall.told("z-long") == ABANDONED
        # z-short's body ended by itself as the zombie woke; its outcome was not recorded:
        # refused at the next checkpoint (or dropped, had the heartbeat's refusal come first)
        assert len(ticks(effects, short, zombie.pid)) > ticked
        print(f"the zombie's z-short: {stall.told('z-short')}")
        seals = sorted(line for line in journal(effects) if line.startswith("seal"))
        assert seals == [f"seal {run_id}:1:seal {successor.pid}" for run_id in sorted(runs)]

        stall.keeps_serving()
        for run_id in runs:
            assert client.client.history(run_id) == stall.settled[run_id], (
                f"{run_id}'s history moved"
            )
            assert client.client.get(run_id).status is RunStatus.COMPLETED
    finally:
        client.close()


def test_a_zombie_stops_the_other_steps_of_a_gather_once_a_checkpoint_is_refused(
    store_url: str, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    """A run of `fan` left with its two grinds in flight: as the zombie wakes, the first ends,
    so the seal starts, and the fence refuses its start; the second grind must stop then.

    That needs the refusal to reach the zombie before its heartbeat renews the lease (else the
    heartbeat cancels the run, as in the test above): a race, which the scenario runs up to
    ROUNDS times to see."""
    client = build(durably.App(store_url))
    try:
        for round_ in range(1, ROUNDS + 1):
            run_id = f"z-fan-{round_}"
            first, second = f"{run_id}:0:grind", f"{run_id}:1:grind"
            where = tmp_path / f"round-{round_}"
            where.mkdir()
            try:  # the scenario's own checks fail the test, not the expected way
                stall = Stall.of(
                    client, store_url, where, processes, "fan", [run_id], [first, second]
                )
                stall.wake(first)
            except AssertionError as exc:
                pytest.fail(f"the stall went wrong: {exc}")
            stopped = stall.stopped(second)
            if stopped is not None and stall.told(run_id) == ABANDONED:
                stall.kill()  # the heartbeat's renewal came first: not the case, try again
                continue
            late = [at for at in ticks(stall.journal, second, stall.zombie.pid) if at > stall.woke]
            print(f"the zombie's second grind ticked {len(late)} time(s) after it woke")
            assert stopped is not None, "the zombie's second grind went on, its lease lost"
            assert stopped - stall.woke <= STOP_BOUND
            return
        pytest.skip(f"the zombie's heartbeat learnt of the lost lease first {ROUNDS} times")
    finally:
        client.close()


# -- the stall ------------------------------------------------------------------------------


@dataclass(slots=True)
class Stall:
    """A zombie stopped past its leases while its runs' steps were in flight, and the successor
    that took them over and completed them."""

    client: durably.App
    journal: Path
    zombie: subprocess.Popen[bytes]
    successor: subprocess.Popen[bytes]
    zombie_log: Path
    successor_log: Path
    expiry: dict[str, datetime]  # each run's lease expiry, as the zombie left it
    stalled_at: float  # when the zombie was stopped (monotonic)
    settled: dict[str, list[Event]]  # the histories the successor left
    woke: float = 0.0

    @classmethod
    def of(
        cls,
        client: durably.App,
        store_url: str,
        tmp_path: Path,
        processes: list[subprocess.Popen[bytes]],
        workflow: str,
        runs: Sequence[str],
        keys: Sequence[str],
    ) -> Stall:
        """Start `runs` of `workflow`; stop their worker once the grinds with `keys` tick in it;
        have a second worker take them over and complete them."""
        effects = tmp_path / "effects.txt"
        zombie_log, successor_log = tmp_path / "zombie.log", tmp_path / "successor.log"
        client.start_many([Start(workflow, (LONG, str(effects)), id=run_id) for run_id in runs])
        zombie = start_worker(store_url, zombie_log, *OPTIONS, "--name", ZOMBIE, target=TARGET)
        processes.append(zombie)
        wait_until(
            "the grinds ticking in the first worker",
            lambda: all(ticks(effects, key, zombie.pid) for key in keys),
            zombie_log,
        )
        stalled_at = time.monotonic()
        expiry = stop_quietly(zombie, client, store_url, runs, zombie_log)
        successor = start_worker(
            store_url, successor_log, *OPTIONS, "--name", SUCCESSOR, target=TARGET
        )
        processes.append(successor)
        for key in keys:  # its attempts need not take a minute
            write(str(effects), hurry(key, successor.pid))
        wait_until(
            "the successor completed the runs",
            lambda: all(client.client.get(run_id).status is RunStatus.COMPLETED for run_id in runs),
            successor_log,
        )
        # real time is the point here: the zombie stays stopped well past its leases' expiry
        held_until = max(expiry.values()) + timedelta(seconds=HELD_PAST)
        time.sleep(max(0.0, (held_until - datetime.now(UTC)).total_seconds()))
        assert process_state(zombie.pid) == "T", "the zombie was not stopped all along"
        settled = {run_id: client.client.history(run_id) for run_id in runs}
        for run_id in runs:
            check_taken_over(settled[run_id], expiry[run_id])
        return cls(
            client,
            effects,
            zombie,
            successor,
            zombie_log,
            successor_log,
            expiry,
            stalled_at,
            settled,
        )

    def wake(self, *hurried: str) -> None:
        """SIGCONT the zombie; the grinds with keys `hurried` end at their next tick there."""
        for key in hurried:
            write(str(self.journal), hurry(key, self.zombie.pid))
        past = datetime.now(UTC) - max(self.expiry.values())
        assert past >= timedelta(seconds=HELD_PAST)  # stalled past its leases, really
        self.woke = time.monotonic()
        os.kill(self.zombie.pid, signal.SIGCONT)
        print(
            f"\nthe zombie slept {self.woke - self.stalled_at:.2f}s, {past.total_seconds():.2f}s "
            f"past its leases' expiry (leases of {LEASE:g}s)"
        )

    def stopped(self, key: str) -> float | None:
        """When the zombie's attempt of the grind with `key` was cancelled, if it was within
        STOP_BOUND of its waking (looked at a second longer)."""
        deadline = self.woke + STOP_BOUND + 1.0
        while time.monotonic() < deadline:
            if cancelled := ended(self.journal, key, self.zombie.pid, "cancelled"):
                return cancelled[0]
            time.sleep(0.02)
        return None

    def kill(self) -> None:
        """SIGKILL both workers."""
        for worker in (self.zombie, self.successor):
            worker.kill()
            worker.wait()

    def told(self, run_id: str) -> str | None:
        """How the zombie learnt that the fence refused it a write of the run, if it did: a
        refused checkpoint (REFUSED), or its heartbeat's refused renewal (ABANDONED)."""
        text = self.zombie_log.read_text()
        if f"run {run_id}: run '{run_id}': {REFUSED}" in text:
            return REFUSED
        return ABANDONED if f"run {run_id}: {ABANDONED}" in text else None

    def keeps_serving(self) -> None:
        """With the successor stopped, the zombie runs a new run, and logged no error."""
        self.successor.send_signal(signal.SIGTERM)
        assert self.successor.wait(timeout=WAIT) == 0
        after = self.client.start("haul", 2, str(self.journal), id="z-after")
        pid = self.zombie.pid
        assert after.result(timeout=WAIT) == [f"ground by {pid}", f"sealed by {pid}"]
        assert self.zombie.poll() is None
        for path in (self.zombie_log, self.successor_log):
            text = path.read_text()
            assert " ERROR " not in text, f"{path.name}:\n{text}"
            assert "Traceback" not in text, f"{path.name}:\n{text}"


def stop_quietly(
    worker: subprocess.Popen[bytes],
    client: durably.App,
    store_url: str,
    runs: Sequence[str],
    log: Path,
) -> dict[str, datetime]:
    """SIGSTOP the worker at a moment it is inside no store transaction (stopped inside one,
    it would hold SQLite's write lock, or the runs' row locks, and stall the successor too:
    not the fault under test); the lease expiry of each of its runs as it left them."""
    for _ in range(QUIET_TRIES):
        os.kill(worker.pid, signal.SIGSTOP)
        wait_until("the worker stopped", lambda: process_state(worker.pid) == "T", log)
        if store_is_free(store_url, runs):
            records = [client.client.get(run_id) for run_id in runs]
            expiry = {}
            for record in records:
                assert (record.status, record.lease_owner) == (RunStatus.RUNNING, ZOMBIE)
                assert record.available_at is not None
                expiry[record.id] = record.available_at
            return expiry
        os.kill(worker.pid, signal.SIGCONT)
        time.sleep(0.05)  # let it finish that transaction
    pytest.fail(f"the worker was inside a store transaction {QUIET_TRIES} times in a row")


def store_is_free(store_url: str, runs: Sequence[str]) -> bool:
    """Whether a writer can lock the store (SQLite), or the runs' rows (PostgreSQL), now."""
    if store_url.startswith("sqlite:///"):
        db = sqlite3.connect(store_url.removeprefix("sqlite:///"), timeout=0.2)
        try:
            db.execute("BEGIN IMMEDIATE")
            db.rollback()
            return True
        except sqlite3.OperationalError:
            return False
        finally:
            db.close()
    import psycopg

    with psycopg.connect(store_url) as pg:
        try:
            lock = "SELECT id FROM durably_runs WHERE id = ANY(%s) FOR UPDATE NOWAIT"
            pg.execute(lock, [list(runs)])
            return True
        except psycopg.errors.LockNotAvailable:
            return False
        finally:
            pg.rollback()


def process_state(pid: int) -> str:
    """The state letter of a process (/proc/PID/stat): R, S, T (stopped) ..."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0]


# -- the checks -----------------------------------------------------------------------------


def check_taken_over(events: Sequence[Event], expiry: datetime) -> None:
    """The run was claimed by the zombie, then by the successor once its lease had expired."""
    claims = [(e, read_payload(e, Claimed)) for e in events if e.kind is EventKind.CLAIMED]
    owners = [(claim.owner, claim.took_over_from) for _, claim in claims]
    assert owners == [(ZOMBIE, None), (SUCCESSOR, ZOMBIE)]
    assert claims[1][0].at > expiry, "taken over before the zombie's lease expired"


def check_fenced_history(events: Sequence[Event], successor: int) -> None:
    """A `haul` the zombie held, as the successor left it: the zombie's attempt lost, one
    outcome per attempt, one completion, the successor's result."""
    outcomes: dict[tuple[int | None, int | None], list[str]] = {}
    for event in events:
        if event.kind is EventKind.STEP_STARTED:
            outcomes.setdefault((event.position, event.attempt), [])  # an attempt begun
        elif event.kind in OUTCOMES:
            outcomes.setdefault((event.position, event.attempt), []).append(str(event.kind))
    assert outcomes == {
        (0, 1): ["attempt_lost"],  # the zombie's, recorded by the successor
        (0, 2): ["step_completed"],
        (1, 1): ["step_completed"],
    }
    grinds = [e for e in events if e.kind is EventKind.STEP_STARTED and e.position == 0]
    assert len({json.loads(e.data or "{}")["key"] for e in grinds}) == 1  # one key, two tries
    kinds = [event.kind for event in events]
    assert kinds.count(EventKind.RUN_COMPLETED) == 1
    assert kinds[-1] is EventKind.RUN_COMPLETED
    results = [json.loads(e.data or "null") for e in events if e.kind is EventKind.STEP_COMPLETED]
    assert results == [f"ground by {successor}", f"sealed by {successor}"]


# -- the journal ----------------------------------------------------------------------------


def ticks(path: Path, key: str, pid: int) -> list[float]:
    """When the attempt of the grind with `key` in process `pid` journalled each tick."""
    found = []
    for line in journal(path):
        words = line.split()
        if words[:3] == ["tick", key, str(pid)]:
            found.append(float(words[4]))
    return found


def ended(path: Path, key: str, pid: int, *how: str) -> list[float]:
    """When that attempt journalled that it ended `how` (end, cancelled)."""
    return [
        float(words[3])
        for words in (line.split() for line in journal(path))
        if words[0] in how and words[1:3] == [key, str(pid)]
    ]

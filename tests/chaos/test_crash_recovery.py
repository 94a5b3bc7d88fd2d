"""Crash recovery with real worker processes, a real store and real SIGKILLs.

Hundreds of runs of a five-step workflow execute on three worker processes; a seeded RNG
picks the moments (progress points) and the victims of several SIGKILLs, and a fresh worker
replaces each one. Afterwards every run must have completed with the right result, every
step's keyed side effect must exist exactly once, re-executed step bodies must be bounded by
what the killed workers had in flight, and every history must be whole.

Rerun a failure with the seed it prints: CHAOS_SEED=<seed> make chaos.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import pytest

from durably.app import App
from durably.core.history import Event, EventKind
from durably.core.status import FINAL, RunStatus
from durably.stores import RunRecord

from .crash_app import WORKFLOW, Ledger, build_app, expected_result

pytestmark = pytest.mark.chaos

ROOT = Path(__file__).resolve().parents[2]
WORKERS = 3
CONCURRENCY = 16
LEASE = "2s"
STEPS = 5
POLL = 0.1  # seconds between looks at the store
DEADLINE = 120.0  # seconds for every run to end, from the first worker's start
KILL_GAP = 0.2  # seconds between kills at least: spread in time, not only over progress
SETTLED = FINAL | {RunStatus.NEEDS_ATTENTION}  # nothing more happens to such a run by itself


@dataclass(frozen=True, slots=True)
class Kill:
    pid: int
    at: float  # seconds since the workers started
    finished: int  # runs finished when it landed
    held: int  # runs the store showed leased to the victim


@dataclass(slots=True)
class Outcome:
    seed: int
    elapsed: float = 0.0
    kills: list[Kill] = field(default_factory=list)


@pytest.mark.slow
@pytest.mark.timeout(DEADLINE + 120)  # room for the report when runs do not end in time
def test_every_run_survives_workers_killed_mid_step(store_url: str, tmp_path: Path) -> None:
    outcome = _crash_and_check(store_url, tmp_path, runs=300, kills=(4, 6))
    assert len(outcome.kills) >= 4


@pytest.mark.soak
@pytest.mark.timeout(900)
def test_soak_many_runs_many_kills(
    store_url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if "soak" not in str(request.config.getoption("markexpr")):
        pytest.skip("a soak: run it with `make soak` (pytest -m soak)")
    outcome = _crash_and_check(store_url, tmp_path, runs=2_000, kills=(15, 15), deadline=600.0)
    assert len(outcome.kills) >= 15


# -- the scenario ---------------------------------------------------------------------------


def _crash_and_check(
    store_url: str,
    tmp_path: Path,
    *,
    runs: int,
    kills: tuple[int, int],
    deadline: float = DEADLINE,
) -> Outcome:
    seed = int(os.environ.get("CHAOS_SEED") or random.randrange(2**32))
    rng = random.Random(seed)
    print(f"\nchaos seed {seed} (rerun with CHAOS_SEED={seed}); store {_kind(store_url)}")
    effects_url = store_url if _kind(store_url) == "postgres" else str(tmp_path / "effects.db")
    ledger = Ledger(effects_url)
    ledger.create_tables()
    app = build_app(store_url)
    seeds = {f"chaos-{n:05d}": n * 7_919 + 13 for n in range(runs)}
    for run_id, value in seeds.items():
        app.start(WORKFLOW, value, id=run_id)

    outcome = Outcome(seed)
    env = {**os.environ, "DURABLY_STORE": store_url, "CHAOS_EFFECTS": effects_url}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    workers = Workers(env, tmp_path / "workers")
    try:
        plan = _kill_plan(rng, runs, rng.randint(*kills))
        _run_with_kills(store_url, app, workers, rng, plan, outcome, runs=runs, deadline=deadline)
        workers.stop()
        _check(app, ledger, seeds, outcome, workers)
    except BaseException:
        print(workers.tails())
        raise
    finally:
        workers.kill_all()
        app.close()
        ledger.close()
    return outcome


def _kill_plan(rng: random.Random, runs: int, kills: int) -> list[int]:
    """After how many finished runs each kill lands: spread over the first two thirds of the
    work, so that the last kill (each waits KILL_GAP after the one before) still lands before
    the end on a fast machine (300 runs took 2.8 s here: a plan up to 85% with 0.4 s between
    kills left one kill with nothing to land on)."""
    return sorted(int(runs * rng.uniform(0.03, 0.65)) for _ in range(kills))


def _run_with_kills(
    store_url: str,
    app: App,
    workers: Workers,
    rng: random.Random,
    plan: list[int],
    outcome: Outcome,
    *,
    runs: int,
    deadline: float,
) -> None:
    for _ in range(WORKERS):
        workers.spawn()
    started = time.monotonic()
    last_kill = started
    while True:
        now = time.monotonic()
        records = app.store.runs(limit=runs + 1)
        finished = sum(record.status in SETTLED for record in records)
        if finished == runs:
            outcome.elapsed = now - started
            return
        if now - started > deadline:
            workers.kill_all()  # freeze the store, so the report shows what was left behind
            records = app.store.runs(limit=runs + 1)
            pytest.fail(_stuck_report(store_url, records, deadline), pytrace=False)
        if plan and finished >= plan[0] and now - last_kill >= KILL_GAP:
            plan.pop(0)
            pid = workers.kill_one(rng)
            held = sum(_owner_pid(record) == pid for record in records)
            outcome.kills.append(Kill(pid, round(now - started, 2), finished, held))
            print(f"  SIGKILL {outcome.kills[-1]}")
            last_kill = now
            workers.spawn()
        workers.replace_exited()
        time.sleep(POLL)


# -- the checks -----------------------------------------------------------------------------


def _check(
    app: App, ledger: Ledger, seeds: dict[str, int], outcome: Outcome, workers: Workers
) -> None:
    store = app.store
    records = {record.id: record for record in store.runs(limit=len(seeds) + 1)}
    assert sorted(records) == sorted(seeds), "the store holds other runs than the ones started"
    statuses = Counter(str(record.status) for record in records.values())
    assert statuses == {"completed": len(seeds)}, f"not every run completed: {dict(statuses)}"
    wrong = {
        run_id: (json.loads(record.result or "null"), expected_result(seeds[run_id]))
        for run_id, record in records.items()
        if json.loads(record.result or "null") != expected_result(seeds[run_id])
    }
    assert not wrong, f"runs with a wrong result (got, expected): {_some(wrong.items())}"

    histories = {run_id: store.history(run_id) for run_id in records}
    broken = {
        run_id: problem
        for run_id, events in histories.items()
        if (problem := _history_problem(records[run_id], events))
    }
    assert not broken, f"broken histories: {_some(broken.items())}"
    _print_takeovers(histories, outcome)
    _check_ledger(ledger, _step_facts(histories), len(seeds), outcome)
    assert not workers.exited, f"workers exited though nobody killed them: {workers.exited}"
    errors = workers.error_lines()
    assert not errors, f"a worker logged errors: {errors[:5]}"


def _history_problem(record: RunRecord, events: Sequence[Event]) -> str | None:
    """What is wrong with a completed run's history, or None."""
    seqs = [event.seq for event in events]
    if seqs != list(range(1, len(events) + 1)):
        return f"seq is not 1..{len(events)}: {seqs}"
    if record.event_count != len(events):
        return f"the run says {record.event_count} events, the history has {len(events)}"
    completed = sorted(
        -1 if e.position is None else e.position
        for e in events
        if e.kind is EventKind.STEP_COMPLETED
    )
    if completed != list(range(STEPS)):
        return f"step_completed positions {completed}, expected each of 0..{STEPS - 1} once"
    kinds = [event.kind for event in events]
    if EventKind.STEP_FAILED in kinds or kinds.count(EventKind.RUN_COMPLETED) != 1:
        return f"events {[str(kind) for kind in kinds]}"
    if kinds[-1] is not EventKind.RUN_COMPLETED:
        return f"the last event is {kinds[-1]}, not run_completed"
    keys = {(e.position, _started_key(e)) for e in events if e.kind is EventKind.STEP_STARTED}
    if len(keys) != STEPS:
        return f"attempts of a step carry different idempotency keys: {sorted(keys)}"
    return None


@dataclass(frozen=True, slots=True)
class StepFacts:
    starts: Counter[str]  # idempotency key -> step_started events (attempts begun)
    results: dict[str, int]  # idempotency key -> the recorded result


def _step_facts(histories: dict[str, list[Event]]) -> StepFacts:
    starts: Counter[str] = Counter()
    results: dict[str, int] = {}
    for events in histories.values():
        keys: dict[int | None, str] = {}
        for event in events:
            if event.kind is EventKind.STEP_STARTED:
                keys[event.position] = _started_key(event)
                starts[keys[event.position]] += 1
            elif event.kind is EventKind.STEP_COMPLETED:
                results[keys[event.position]] = json.loads(event.data or "null")
    return StepFacts(starts, results)


def _check_ledger(ledger: Ledger, steps: StepFacts, runs: int, outcome: Outcome) -> None:
    effects = ledger.effects()
    applied = dict(effects)
    assert len(applied) == len(effects), "an idempotency key has two effect rows"
    assert len(effects) == runs * STEPS, f"{len(effects)} effects for {runs} runs x {STEPS} steps"
    assert applied.keys() == steps.results.keys(), (
        "effects and recorded steps differ: "
        f"effects without a step {_some(applied.keys() - steps.results.keys())}, "
        f"steps without an effect {_some(steps.results.keys() - applied.keys())}"
    )
    mismatched = {key: (applied[key], steps.results[key]) for key in applied}
    mismatched = {key: pair for key, pair in mismatched.items() if pair[0] != pair[1]}
    assert not mismatched, (
        f"effect value differs from the recorded result: {_some(mismatched.items())}"
    )

    executions = ledger.executions()
    assert executions.keys() == applied.keys(), "a body ran whose effect is missing, or vice versa"
    unannounced = {k: (n, steps.starts[k]) for k, n in executions.items() if n > steps.starts[k]}
    assert not unannounced, (
        "a step body ran more often than its start was committed (executions, starts): "
        f"{_some(unannounced.items())}"
    )
    reexecuted = executions.total() - len(effects)
    bound = len(outcome.kills) * CONCURRENCY
    print(
        f"kills {len(outcome.kills)}, step bodies executed {executions.total()}, "
        f"effects {len(effects)}, re-executions {reexecuted} (bound {bound})"
    )
    assert reexecuted <= bound, (
        f"{reexecuted} step bodies ran again, more than the {len(outcome.kills)} kills x "
        f"{CONCURRENCY} steps in flight can explain; re-executed: "
        f"{_some((k, n) for k, n in executions.items() if n > 1)}"
    )


def _print_takeovers(histories: dict[str, list[Event]], outcome: Outcome) -> None:
    killed = {kill.pid for kill in outcome.kills}
    takeovers: Counter[str] = Counter()
    for events in histories.values():
        for event in events:
            data = json.loads(event.data or "{}") if event.kind is EventKind.CLAIMED else {}
            if "took_over_from" in data:
                victim = _pid_of(data["took_over_from"])
                takeovers["from killed workers" if victim in killed else "from others"] += 1
    print(f"runs taken over: {dict(takeovers)}; all runs ended in {outcome.elapsed:.1f}s")


# -- worker processes -----------------------------------------------------------------------


class Workers:
    """The crash app's worker processes, each with its stderr in a file of its own."""

    def __init__(self, env: dict[str, str], logs: Path) -> None:
        self._env = env
        self._logs = logs
        logs.mkdir()
        self._live: list[tuple[subprocess.Popen[bytes], IO[bytes]]] = []
        self._all: list[Path] = []
        self._logs_of: dict[int, Path] = {}
        self.exited: list[tuple[int, int, str]] = []  # (pid, exit code, log) of lone exits

    def spawn(self) -> None:
        log = self._logs / f"worker-{len(self._all)}.log"
        stderr = log.open("wb")
        command = [
            *(sys.executable, "-m", "durably", "worker", "tests.chaos.crash_app:app"),
            *("--concurrency", str(CONCURRENCY), "--lease", LEASE, "--poll", "50ms"),
        ]
        process = subprocess.Popen(
            command, env=self._env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=stderr
        )
        self._live.append((process, stderr))
        self._all.append(log)
        self._logs_of[process.pid] = log

    def replace_exited(self) -> None:
        """Note every worker that exited though nobody killed it, and start one in its place."""
        for entry in [entry for entry in self._live if entry[0].poll() is not None]:
            self._live.remove(entry)
            entry[1].close()
            process = entry[0]
            self.exited.append((process.pid, process.returncode, self._logs_of[process.pid].name))
            self.spawn()

    def kill_one(self, rng: random.Random) -> int:
        """SIGKILL a live worker chosen by `rng`; its pid."""
        process, stderr = self._live.pop(rng.randrange(len(self._live)))
        process.send_signal(signal.SIGKILL)
        process.wait()
        stderr.close()
        return process.pid

    def stop(self) -> None:
        """SIGTERM every live worker and wait for it to stop cleanly."""
        for process, _ in self._live:
            process.send_signal(signal.SIGTERM)
        for process, _ in self._live:
            code = process.wait(timeout=30)
            log = self._logs_of[process.pid]
            # A worker still importing has no SIGTERM handler yet: the signal ends it at once.
            importing = code == -signal.SIGTERM and " started " not in log.read_text()
            assert code == 0 or importing, f"worker {process.pid} exited with {code} on SIGTERM"

    def kill_all(self) -> None:
        for process, stderr in self._live:
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
            process.wait()
            stderr.close()
        self._live.clear()

    def error_lines(self) -> list[str]:
        return [line for line in self._lines() if " ERROR " in line or "Traceback" in line]

    def tails(self, lines: int = 30) -> str:
        parts = []
        for log in self._all:
            text = log.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {log.name} (last {len(text)} lines)\n" + "\n".join(text))
        return "\n".join(parts)

    def _lines(self) -> Iterator[str]:
        for log in self._all:
            yield from log.read_text(errors="replace").splitlines()


# -- helpers --------------------------------------------------------------------------------


def _stuck_report(store_url: str, records: Sequence[RunRecord], deadline: float) -> str:
    unfinished = [record for record in records if record.status not in SETTLED]
    listed = ", ".join(f"{r.id}: {r.status} (owner {r.lease_owner})" for r in unfinished[:20])
    shown = "\n".join(_runs_show(store_url, record.id) for record in unfinished[:3])
    return (
        f"{len(unfinished)} run(s) did not end within {deadline:.0f}s: {listed}\n"
        f"statuses: {dict(Counter(str(r.status) for r in unfinished))}\n{shown}"
    )


def _runs_show(store_url: str, run_id: str) -> str:
    command = [sys.executable, "-m", "durably", "runs", "show", run_id, "--store", store_url]
    shown = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)
    return f"$ durably runs show {run_id}\n{shown.stdout}{shown.stderr}"


def _started_key(event: Event) -> str:
    key: str = json.loads(event.data or "{}")["key"]
    return key


def _owner_pid(record: RunRecord) -> int | None:
    if record.status is not RunStatus.RUNNING or record.lease_owner is None:
        return None
    return _pid_of(record.lease_owner)


def _pid_of(owner: str) -> int | None:
    """The pid in a worker name (host:pid:suffix)."""
    parts = owner.rsplit(":", 2)
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None


def _kind(store_url: str) -> str:
    return "postgres" if store_url.startswith(("postgres://", "postgresql://")) else "sqlite"


def _some(items: Iterable[object], limit: int = 10) -> str:
    listed = list(items)
    more = f" ... and {len(listed) - limit} more" if len(listed) > limit else ""
    return f"{listed[:limit]}{more}"

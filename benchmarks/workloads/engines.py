"""What engines are measured on (core, compare, roundtrip): chains of trivial steps (a load's
throughput; one workflow at a time through two chain lengths; durably here times only the
running of runs started first, runner processes start and run together) and the store's own
commit floor; then, each a command of the runners: W3 (a worker SIGKILLed half way, and its
successor), a hop to an idle worker, a burst on the queue, the cold start, a start -> result
round trip from outside the worker, durably's starts/s, debounced starts/s (durably's
start(debounce=) beside DBOS's Debouncer).
"""

import random
import statistics
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks.plan import Metric, Trial, Values
from benchmarks.runners.processes import Child, ProcessRunner
from benchmarks.runners.protocol import BenchmarkError, Load, count_effects, create_effects

LIMIT = 900.0  # seconds to start every W3 run, to apply half the effects, to recover


def seconds(trial: Trial, load: Load) -> float:
    """What the trial's runner took over `load`, on a fresh store."""
    with trial.fresh() as url:
        return trial.engine.throughput(trial, url, load)


def throughput(name: str, unit: str, trial: Trial, load: Load) -> Values:
    """A load's workflows/s (unit "workflows") or steps/s (unit "steps")."""
    per_s = load.workflows / seconds(trial, load) * (load.steps if unit == "steps" else 1)
    label = f"{name.upper()} ({load}, c={load.concurrency})"
    return {Metric(f"{name}_{unit}_per_s", label, f"{unit}/s", True): per_s}


def fit(trial: Trial, loads: tuple[Load, Load]) -> Values:
    """One workflow at a time through a short and a long chain: the line through the two gives
    a step's checkpoint and a workflow's fixed cost (its start, claim and last commit)."""
    (short, long), ms = loads, [1000 * seconds(trial, load) / load.workflows for load in loads]
    per_step = (ms[1] - ms[0]) / (long.steps - short.steps)
    fixed = ms[0] - short.steps * per_step
    return {
        Metric("step_checkpoint_ms", "per-step checkpoint (fit)", "ms/step"): per_step,
        Metric("workflow_fixed_ms", "workflow start+finish (fit)", "ms/workflow"): fixed,
    }


def floor(trial: Trial, commits: int) -> Values:
    """The store's own durable commit: single-row transactions, one at a time; no engine."""
    ms = 1000 * trial.store.commit_floor(commits) / commits
    label = f"store floor ({commits:,} single-row commits)"
    per_s = Metric("floor_commits_per_s", label, "commits/s", True)
    return {Metric("floor_commit_ms", label, "ms/commit"): ms, per_s: 1000 / ms}


def run(trial: Trial, command: str, **options: object) -> dict[str, Any]:
    """The trial's engine's runner process, run on a fresh store: its JSON line."""
    runner = trial.engine
    assert isinstance(runner, ProcessRunner), "an engine in processes of its own"
    with trial.fresh() as url:
        return runner.run(trial, command, url, **options)


def recovery(trial: Trial, size: tuple[Load, int]) -> Values:
    """W3: `load`, each step sleeping `sleep_ms`, then applying a keyed effect; w3-work killed at
    half the effects, w3-recover timed from spawn to all runs ended; runs lost, effects twice."""
    load, sleep_ms = size
    seconds, lost, duplicates = killed(trial, load, sleep_ms, load.workflows * load.steps // 2)
    workload = f"W3 ({load}, {sleep_ms} ms each, SIGKILL at 50%)"
    return {
        Metric("w3_recovery_s", f"{workload}: recovery", "s"): seconds,
        Metric("w3_lost_runs", "W3: runs lost", "runs"): lost,
        Metric("w3_duplicate_effects", "W3: effects applied twice", "effects"): duplicates,
    }


def kills(trial: Trial, size: tuple[Load, int, int]) -> Values:
    """W3 killed at `count` points spread over the work (from 5% to 95% of the effects, each
    after a random pause of up to two steps' sleep, so that kills fall anywhere in a step's
    cycle): the effects applied twice per kill, and how many kills caused none."""
    load, sleep_ms, count = size
    total, rng, duplicates = load.workflows * load.steps, random.Random(7), []
    for n in range(count):
        at = int(total * (0.05 + 0.9 * n / max(1, count - 1)))
        pause = rng.uniform(0, 2 * sleep_ms / 1000)
        duplicates.append(killed(trial, load, sleep_ms, max(1, at), pause)[2])
    workload = f"W3 ({load}, {sleep_ms} ms each), {count} kills"
    unit = "effects per kill"
    return {
        Metric("w3_kill_duplicates", f"{workload}: effects applied twice", unit): [
            float(d) for d in duplicates
        ],
        Metric("w3_kill_duplicates_max", f"{workload}: the most after one kill", unit): max(
            duplicates
        ),
        Metric("w3_kills_clean", f"{workload}: kills with none twice", "kills", True): sum(
            1 for d in duplicates if d == 0
        ),
    }


def killed(
    trial: Trial, load: Load, sleep_ms: int, at_effects: int, pause: float = 0.0
) -> tuple[float, int, int]:
    """w3-work SIGKILLed `pause` seconds after `at_effects` effects, then w3-recover: the
    seconds it took (spawn to every run ended), the runs lost, the effects applied twice."""
    runner = trial.engine
    assert isinstance(runner, ProcessRunner), "an engine in processes of its own"
    with trial.fresh() as url, tempfile.TemporaryDirectory(prefix="bench-effects-") as tmp:
        create_effects(sink := Path(tmp) / "effects.db")
        options = {**asdict(load), "sleep_ms": sleep_ms, "effects": sink}
        with Child(runner.argv("w3-work", url, options)) as work:
            if (started := work.json_line("started", LIMIT)["started"]) != load.workflows:
                raise work.failed(f"started {started} runs, not {load.workflows}")
            deadline = time.monotonic() + LIMIT
            while count_effects(sink)[0] < at_effects:
                if work.process.poll() is not None or time.monotonic() > deadline:
                    raise work.failed(f"ended ({work.process.returncode}) or took {LIMIT:g} s")
                time.sleep(0.002)
            time.sleep(pause)
        # SIGKILLed at the end of its block
        began = time.perf_counter()
        with Child(runner.argv("w3-recover", url, options)) as recover:
            output = recover.json_line("completed", LIMIT)
            if (code := recover.wait(limit=60)) != 0:
                raise recover.failed(f"exited with {code}")
        seconds, (applied, duplicates) = time.perf_counter() - began, count_effects(sink)
        trial.record("w3-recover", options, output)
    if output["completed"] == load.workflows and applied != load.workflows * load.steps:
        raise BenchmarkError(f"every run completed, yet {applied} effects applied")
    return seconds, load.workflows - output["completed"], duplicates


def hop(trial: Trial, hops: int) -> Values:
    """Enqueue -> the first step runs, on an idle worker here or in another process: the median."""
    values: Values = {}
    for mode in ("in-process", "cross-process"):
        if len(hop_ms := run(trial, "queue-hop", hops=hops, mode=mode)["hop_ms"]) != hops:
            raise BenchmarkError(f"{len(hop_ms)} hops, not {hops}")
        key, label = f"hop_{mode.replace('-', '_')}", f"queue hop, idle, {mode} ({hops} hops)"
        values[Metric(f"{key}_ms", label, "ms (median)")] = statistics.median(hop_ms)
    return values


def queue(trial: Trial, load: Load) -> Values:
    """One-step workflows enqueued at once to a running worker: first enqueue to last end."""
    seconds = run(trial, "queue-throughput", **asdict(load))["total_seconds"]
    label = f"queue ({load.workflows:,} one-step wf, c={load.concurrency})"
    return {Metric("queue_workflows_per_s", label, "workflows/s", True): load.workflows / seconds}


def cold_start(trial: Trial, size: None) -> Values:
    """Importing the engine, opening it on the store, ready to run work."""
    ready_ms = 1000 * run(trial, "cold-start")["ready_seconds"]
    return {Metric("cold_start_ms", "cold start (import -> ready)", "ms"): ready_ms}


def roundtrip(trial: Trial, size: tuple[int, int, int]) -> Values:
    """Start -> result of a 3-step workflow, one at a time (`warm_up` first), run in another
    process: the median, the p95 (pooled), the wait after the run's last commit, and the median
    beyond the 6 commits a run makes at the store's floor (`commits` timed right after). Then
    started beside a worker in the caller's process: the median, and the median of a workflow
    with no step (what a run costs besides its steps)."""
    runs, warm_up, commits = size
    output = run(trial, "roundtrip", workflows=runs, steps=3, warm_up=warm_up, mode="cross-process")
    if len(totals := output["roundtrip_ms"]) != runs:
        raise BenchmarkError(f"{len(totals)} round trips, not {runs}")
    heard = [ms for ms in output["heard_after_end_ms"] or () if ms is not None]
    label = f"round trip, start -> result ({runs} of 3 steps)"
    here = run(trial, "roundtrip", workflows=runs, steps=3, warm_up=warm_up, mode="in-process")
    if len(beside := here["roundtrip_ms"]) != runs:
        raise BenchmarkError(f"{len(beside)} round trips in-process, not {runs}")
    label_here = f"round trip in-process, start -> result ({runs} of 3 steps)"
    empty = run(trial, "roundtrip", workflows=runs, steps=0, warm_up=warm_up, mode="in-process")
    if len(fixed := empty["roundtrip_ms"]) != runs:
        raise BenchmarkError(f"{len(fixed)} round trips of no step in-process, not {runs}")
    label_fixed = f"round trip in-process of a workflow with no step ({runs})"
    floor_ms = 1000 * trial.store.commit_floor(commits) / commits
    return {
        Metric("roundtrip_ms", label, "ms (median)"): statistics.median(totals),
        Metric("roundtrip_p95_ms", label, "ms (p95)", p95=True): totals,
        Metric("heard_ms", "round trip: heard after the run's last commit", "ms"): heard or None,
        Metric("beyond_commits_ms", "round trip beyond 6 commits of the floor", "ms"): (
            statistics.median(totals) - 6 * floor_ms
        ),
        Metric("roundtrip_in_process_ms", label_here, "ms (median)"): statistics.median(beside),
        Metric("fixed_in_process_ms", label_fixed, "ms (median)"): statistics.median(fixed),
    }


def starts(trial: Trial, count: int) -> Values:
    """durably's starts/s: app.start in a loop, start_many of 100, 8 threads calling app.start."""
    ways = {"loop": "app.start in a loop", "batch": "start_many of 100", "threads": "8 threads"}
    return {
        Metric(f"starts_{mode}_per_s", f"{count:,} starts: {how}", "starts/s", True): (
            run(trial, "starts", workflows=count, mode=mode)["starts_per_s"]
            if trial.engine.name == "durably"
            else None
        )
        for mode, how in ways.items()
    }


DEBOUNCED = {
    "one-key": "one key, a loop",
    "keys": "100 keys, a loop",
    "threads": "one key, 8 threads",
}


def debounce(trial: Trial, count: int) -> Values:
    """Debounced starts/s: `count` starts, each a run's first or joining the run its key
    gathers (a window of a minute: nothing runs meanwhile), by each mode of DEBOUNCED."""
    return {
        Metric(
            f"debounce_{mode.replace('-', '_')}_per_s",
            f"{count:,} debounced starts: {how}",
            "starts/s",
            True,
        ): run(trial, "debounce", starts=count, mode=mode)["starts_per_s"]
        for mode, how in DEBOUNCED.items()
    }

"""The comparison benchmark: durably and DBOS Transact side by side, same machine, same run.

For each store, each workload and each repetition, every engine's runner (benchmarks/runners,
one module per engine, same protocol) runs in a fresh process on a fresh store: SQLite, a new
file in a temp dir (WAL, synchronous=FULL); PostgreSQL, a new database on the server
(synchronous_commit=on), dropped after. The engines take turns going first, one repetition to
the next, so that drift on the machine hits both alike. The workloads (full sizes):

    W1           1,000 workflows x 3 trivial async steps, concurrency 32: workflows/s
    W2           200 workflows x 20 steps, concurrency 32: steps/s
    sequential   200 x 3 and 50 x 20 at concurrency 1; the line time/workflow = fixed +
                 steps x per_step through the two gives one step's checkpoint and one
                 workflow's start+finish (its start, claim and last commit)
    W3           500 workflows x 10 steps that sleep 10 ms and apply a keyed side effect; the
                 worker is SIGKILLed once half the effects are applied and a new one recovers:
                 seconds from its spawn to its result line (every run ended), runs lost,
                 effects applied twice, and its time to ready
    queue hop    an idle worker, in the client's process or another: enqueue -> the first step
                 runs, 30 hops 50 ms apart: median and p95
    queue        1,000 one-step workflows enqueued as fast as the client can to a running
                 worker (concurrency 32), first enqueue to last completion: workflows/s
    cold start   import of the engine -> open on the store, ready to run work
    floor        the store's own commit floor (benchmarks.core): single-row transactions

Throughput and latency include starting the runs (app.start, or the engine's equivalent).
Every figure is the median of --repeat repetitions (default 3).

    python -m benchmarks.compare                          # both stores, full sizes (make bench)
    python -m benchmarks.compare --quick --repeat 1       # a few seconds per workload
    python -m benchmarks.compare --stores sqlite --engines durably --only w1,hop
    python -m benchmarks.compare --fast                   # SQLite NORMAL, PostgreSQL off

The table goes to stdout (progress to stderr); the machine, date, both engines' versions,
durability settings and every sample to benchmarks/results/compare-latest.json
(compare-fast-latest.json with --fast, whose rows have no targets). An engine that is not
installed gets a note in its cells; a runner that fails stops the benchmark with its stderr.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from benchmarks import core, harness
from benchmarks.harness import Bench, Trial, Values, Workload, at_most
from benchmarks.measures import Sequential, Throughput
from benchmarks.report import Metric
from benchmarks.runners import effects
from benchmarks.runners.processes import ProcessRunner
from benchmarks.runners.protocol import BenchmarkError, Load

__all__ = ["BENCH", "main"]

TARGETS = {  # durably's, in the durable mode only
    **core.TARGETS,  # per-step checkpoint, W1, W2
    ("workflow_fixed_ms", "sqlite"): at_most(0.4),
    ("workflow_fixed_ms", "postgres"): at_most(1.0),
    ("hop_in_process_ms", "sqlite"): at_most(2),
    ("hop_in_process_ms", "postgres"): at_most(3),
    ("hop_cross_process_ms", "sqlite"): at_most(2),
    ("hop_cross_process_ms", "postgres"): at_most(3),
    ("w3_recovery_s", "sqlite"): at_most(2),
    ("w3_recovery_s", "postgres"): at_most(2),
    ("w3_lost_runs", "sqlite"): at_most(0),
    ("w3_lost_runs", "postgres"): at_most(0),
    ("cold_start_ms", "sqlite"): at_most(150),
    ("cold_start_ms", "postgres"): at_most(150),
}


def runner_of(trial: Trial) -> ProcessRunner:
    """The trial's engine, which here runs in processes of its own."""
    runner = trial.engine
    if not isinstance(runner, ProcessRunner):
        raise BenchmarkError(f"{trial.workload} needs an engine in processes of its own")
    return runner


# -- W3: a worker SIGKILLed half way, and its successor ------------------------------------

W3_START_LIMIT = 600.0  # seconds to start every run durably
W3_HALF_LIMIT = 600.0  # seconds to apply half of the effects
W3_RECOVER_LIMIT = 900.0  # seconds from the new process's spawn to its result


@dataclass(frozen=True, slots=True)
class W3Size:
    load: Load
    sleep_ms: int  # in each step, before its side effect


@dataclass(frozen=True, slots=True)
class Recovery:
    """Seconds from the new process's spawn to every run ended, runs lost, effects applied
    twice, and the new process's time to ready."""

    per_runner = True

    def once(self, trial: Trial, w: Workload[W3Size]) -> Values:
        runner, load = runner_of(trial), w.size.load
        with trial.fresh() as url, tempfile.TemporaryDirectory(prefix="bench-effects-") as tmp:
            sink = Path(tmp) / "effects.db"
            effects.create(sink)
            options: dict[str, object] = {
                "workflows": load.workflows,
                "steps": load.steps,
                "sleep-ms": w.size.sleep_ms,
                "concurrency": load.concurrency,
                "effects": sink,
            }
            at_kill = work_until_half(runner, url, options, sink, load)
            began = time.perf_counter()
            output = recover(trial, runner, url, options)
            recovery = time.perf_counter() - began
            output["effects_at_kill"] = at_kill  # in the results' record of the run too
            output["effects_applied"] = applied = effects.applied(sink)
            duplicates = effects.duplicates(sink)
        if output["completed"] == load.workflows and applied != load.workflows * load.steps:
            why = f"every run completed, yet {applied} of {load.workflows * load.steps} effects"
            raise BenchmarkError(why, [runner.module, "w3-recover"])
        return {
            "w3_recovery_s": recovery,
            "w3_lost_runs": load.workflows - output["completed"],
            "w3_duplicate_effects": duplicates,
            "w3_ready_s": output["ready_seconds"],
        }

    def metrics(self, w: Workload[W3Size], found: Mapping[str, float]) -> list[Metric]:
        workload = f"{w.title} ({w.size.load}, {w.size.sleep_ms} ms each, SIGKILL at 50%)"
        return [
            Metric("w3_recovery_s", f"{workload}: recovery", "s"),
            Metric("w3_lost_runs", f"{w.title}: runs lost", "runs"),
            Metric("w3_duplicate_effects", f"{w.title}: effects applied twice", "effects"),
            Metric("w3_ready_s", f"{w.title}: new process ready", "s"),
        ]

    def record(self, w: Workload[W3Size]) -> dict[str, Any]:
        return {"w3": f"{w.size.load}, {w.size.sleep_ms} ms sleep per step"}


def work_until_half(
    runner: ProcessRunner, url: str, options: dict[str, object], sink: Path, load: Load
) -> int:
    """Run w3-work until half of the effects are applied, then SIGKILL it; effects by then."""
    child = runner.spawn("w3-work", url, options)
    half = load.workflows * load.steps // 2
    try:
        started = child.json_line("started", W3_START_LIMIT)
        if started["started"] != load.workflows:
            raise child.failed(f"started {started['started']} runs, not {load.workflows}")
        deadline = time.monotonic() + W3_HALF_LIMIT
        while (applied := effects.applied(sink)) < half:
            if child.process.poll() is not None:
                raise child.failed(f"exited with {child.process.returncode} before being killed")
            if time.monotonic() > deadline:
                raise child.failed(f"{applied} of {half} effects after {W3_HALF_LIMIT:g} s")
            time.sleep(0.002)
        child.kill()
        return applied
    finally:
        child.close()


def recover(
    trial: Trial, runner: ProcessRunner, url: str, options: dict[str, object]
) -> dict[str, Any]:
    """w3-recover's result line, once it has exited cleanly."""
    child = runner.spawn("w3-recover", url, options)
    try:
        output = child.json_line("completed", W3_RECOVER_LIMIT)
        if (code := child.wait(limit=60)) != 0:
            raise child.failed(f"exited with {code}")
    finally:
        child.close()
    return trial.record(runner.name, "w3-recover", options, output)


# -- the queue: a hop to an idle worker, a burst, a cold start -----------------------------

MODES = ("in-process", "cross-process")


@dataclass(frozen=True, slots=True)
class Hop:
    """An idle worker, in the client's process or another: enqueue -> the first step runs,
    `size` hops 50 ms apart: median and p95."""

    per_runner = True

    def once(self, trial: Trial, w: Workload[int]) -> Values:
        runner, values = runner_of(trial), {}
        for mode in MODES:
            with trial.fresh() as url:
                output = runner.run(trial, "queue-hop", url, hops=w.size, mode=mode)
            if len(hop_ms := output["hop_ms"]) != w.size:
                raise BenchmarkError(f"{len(hop_ms)} hops", [runner.module, "queue-hop"])
            key = f"hop_{mode.replace('-', '_')}"
            values[f"{key}_ms"] = statistics.median(hop_ms)
            values[f"{key}_p95_ms"] = p95(hop_ms)
        return values

    def metrics(self, w: Workload[int], found: Mapping[str, float]) -> list[Metric]:
        metrics = []
        for mode in MODES:
            key, label = (
                f"hop_{mode.replace('-', '_')}",
                f"{w.title}, idle, {mode} ({w.size} hops)",
            )
            metrics.append(Metric(f"{key}_ms", label, "ms (median)"))
            metrics.append(Metric(f"{key}_p95_ms", label, "ms (p95)"))
        return metrics

    def record(self, w: Workload[int]) -> dict[str, Any]:
        return {"hops": w.size}


def p95(values: Sequence[float]) -> float:
    if len(values) < 2:
        return values[0]
    return statistics.quantiles(values, n=20, method="inclusive")[18]


@dataclass(frozen=True, slots=True)
class Queue:
    """One-step workflows enqueued as fast as the client can to a running worker, first
    enqueue to last completion."""

    per_runner = True

    def once(self, trial: Trial, w: Workload[Load]) -> Values:
        runner, load = runner_of(trial), w.size
        with trial.fresh() as url:
            output = runner.run(
                trial,
                "queue-throughput",
                url,
                workflows=load.workflows,
                concurrency=load.concurrency,
            )
        if output.get("completed") != load.workflows:
            raise BenchmarkError(f"completed: {output}", [runner.module, "queue-throughput"])
        return {"queue_workflows_per_s": load.workflows / output["total_seconds"]}

    def metrics(self, w: Workload[Load], found: Mapping[str, float]) -> list[Metric]:
        label = f"{w.title} ({w.size.workflows:,} one-step wf, c={w.size.concurrency})"
        return [Metric("queue_workflows_per_s", label, "workflows/s", higher_is_better=True)]

    def record(self, w: Workload[Load]) -> dict[str, Any]:
        return {"queue": w.size.workflows}


@dataclass(frozen=True, slots=True)
class ColdStart:
    """Import of the engine -> open on the store, ready to run work."""

    per_runner = True

    def once(self, trial: Trial, w: Workload[None]) -> Values:
        with trial.fresh() as url:
            output = runner_of(trial).run(trial, "cold-start", url)
        return {"cold_start_ms": 1000 * output["ready_seconds"]}

    def metrics(self, w: Workload[None], found: Mapping[str, float]) -> list[Metric]:
        return [Metric("cold_start_ms", f"{w.title} (import -> ready)", "ms")]

    def record(self, w: Workload[None]) -> dict[str, Any]:
        return {}


# -- the registry --------------------------------------------------------------------------

WITH_STARTS = Throughput()
BENCH = Bench(
    "compare",
    __doc__,
    (
        replace(core.W1, measure=WITH_STARTS, report=("w1_workflows_per_s", "start_ms")),
        replace(core.W2, measure=WITH_STARTS, report=("w2_steps_per_s",)),
        replace(core.SEQUENTIAL, measure=Sequential()),
        Workload("w3", "W3", Recovery(), W3Size(Load(500, 10), 10), W3Size(Load(100, 10), 10)),
        Workload("hop", "queue hop", Hop(), 30, quick=10),
        Workload("queue", "queue", Queue(), Load(1_000, 1), quick=Load(200, 1)),
        Workload("cold", "cold start", ColdStart(), None, quick=None),
        core.FLOOR,
    ),
    TARGETS,
    engines=("durably", "dbos"),
)


def main(argv: Sequence[str] | None = None) -> int:
    return harness.main(BENCH, argv)


if __name__ == "__main__":
    sys.exit(main())

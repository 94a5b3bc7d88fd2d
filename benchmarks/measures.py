"""What benchmarks.core and benchmarks.compare both measure: chains of trivial steps at some
concurrency, one workflow at a time through two chain lengths, and the store's commit floor.

`started_first`: durably in this process starts every run before the clock that matters
(core: app.start timed apart, only app.run_until_idle counted); runner processes time start
and run together (compare), since an engine may not tell them apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from benchmarks.harness import Trial, Values, Workload
from benchmarks.report import Metric
from benchmarks.runners.protocol import Load, Timing

__all__ = ["Floor", "Sequential", "Throughput"]


@dataclass(frozen=True, slots=True)
class Throughput:
    """A load's workflows/s and steps/s, and what starting one run cost."""

    started_first: bool = False
    per_runner = True

    def once(self, trial: Trial, w: Workload[Load]) -> Values:
        load = w.size
        with trial.fresh() as url:
            timing = trial.engine.throughput(trial, url, load)
        per_s = load.workflows / timed(timing, self.started_first)
        start = timing.start_seconds
        return {
            f"{w.name}_workflows_per_s": per_s,
            f"{w.name}_steps_per_s": per_s * load.steps,
            "start_ms": None if start is None else 1000 * start / load.workflows,
        }

    def metrics(self, w: Workload[Load], found: Mapping[str, float]) -> list[Metric]:
        label = f"{w.title} ({w.size}, c={w.size.concurrency})"
        if self.started_first:
            start = f"app.start of one run ({w.title})"
        else:
            start = f"start of one run (during {w.title})"
        return [
            Metric(f"{w.name}_workflows_per_s", label, "workflows/s", higher_is_better=True),
            Metric(f"{w.name}_steps_per_s", label, "steps/s", higher_is_better=True),
            Metric("start_ms", start, "ms"),
        ]

    def record(self, w: Workload[Load]) -> dict[str, Any]:
        return {w.name: str(w.size)}


@dataclass(frozen=True, slots=True)
class Sequential:
    """One workflow at a time through a short and a long chain; the line time/workflow =
    fixed + steps x per_step through the two gives one step's checkpoint and the fixed cost
    of a workflow (its start, claim and last commit)."""

    started_first: bool = False
    per_runner = True

    def once(self, trial: Trial, w: Workload[tuple[Load, Load]]) -> Values:
        short, long = w.size
        ms = []
        for load in (short, long):
            with trial.fresh() as url:
                timing = trial.engine.throughput(trial, url, load)
            ms.append(1000 * timed(timing, self.started_first) / load.workflows)
        per_step = (ms[1] - ms[0]) / (long.steps - short.steps)
        return {
            f"{w.name}_short_ms": ms[0],
            f"{w.name}_long_ms": ms[1],
            "step_checkpoint_ms": per_step,
            "workflow_fixed_ms": ms[0] - short.steps * per_step,
        }

    def metrics(self, w: Workload[tuple[Load, Load]], found: Mapping[str, float]) -> list[Metric]:
        short, long = (f"{w.title} ({load}, c={load.concurrency})" for load in w.size)
        return [
            Metric(f"{w.name}_short_ms", short, "ms/workflow"),
            Metric(f"{w.name}_long_ms", long, "ms/workflow"),
            Metric("step_checkpoint_ms", "per-step checkpoint (fit)", "ms/step"),
            Metric("workflow_fixed_ms", "workflow start+finish (fit)", "ms/workflow"),
        ]

    def record(self, w: Workload[tuple[Load, Load]]) -> dict[str, Any]:
        return {"sequential": [str(load) for load in w.size]}


@dataclass(frozen=True, slots=True)
class Floor:
    """The store's own cost of a durable commit: single-row transactions, one at a time, on
    the store's durable settings. No engine takes part."""

    per_runner = False

    def once(self, trial: Trial, w: Workload[int]) -> Values:
        ms = 1000 * trial.store.commit_floor(w.size) / w.size
        return {"floor_commit_ms": ms, "floor_commits_per_s": 1000 / ms}

    def metrics(self, w: Workload[int], found: Mapping[str, float]) -> list[Metric]:
        label = f"store floor ({w.size:,} single-row commits)"
        return [
            Metric("floor_commit_ms", label, "ms/commit"),
            Metric("floor_commits_per_s", label, "commits/s", higher_is_better=True),
        ]

    def record(self, w: Workload[int]) -> dict[str, Any]:
        return {"floor_commits": w.size}


def timed(timing: Timing, started_first: bool) -> float:
    """The seconds that count: from every run started, or from the first start."""
    return timing.run_seconds if started_first else timing.total_seconds

"""Chains of trivial steps (core, compare): a load's throughput, one workflow at a time through
two chain lengths, and the store's own commit floor. durably in this process starts every run
before the clock that counts; runner processes time start and run together, since an engine
may not tell them apart.
"""

from __future__ import annotations

from collections.abc import Callable

from benchmarks.plan import Metric, Trial, Values
from benchmarks.runners.protocol import Load

__all__ = ["fit", "floor", "throughput"]


def seconds(trial: Trial, load: Load) -> float:
    """What the trial's runner took over `load`, on a fresh store."""
    with trial.fresh() as url:
        return trial.engine.throughput(trial, url, load)


def throughput(name: str, unit: str) -> Callable[[Trial, Load], Values]:
    """A load's workflows/s (unit "workflows") or steps/s (unit "steps")."""

    def measure(trial: Trial, load: Load) -> Values:
        per_s = load.workflows / seconds(trial, load) * (load.steps if unit == "steps" else 1)
        label = f"{name.upper()} ({load}, c={load.concurrency})"
        return {Metric(f"{name}_{unit}_per_s", label, f"{unit}/s", True): per_s}

    return measure


def fit(trial: Trial, loads: tuple[Load, Load]) -> Values:
    """One workflow at a time through a short and a long chain; the line time/workflow = fixed
    + steps x per_step through the two gives one step's checkpoint and the fixed cost of a
    workflow (its start, claim and last commit)."""
    (short, long), ms = loads, [1000 * seconds(trial, load) / load.workflows for load in loads]
    per_step = (ms[1] - ms[0]) / (long.steps - short.steps)
    return {
        Metric("step_checkpoint_ms", "per-step checkpoint (fit)", "ms/step"): per_step,
        Metric("workflow_fixed_ms", "workflow start+finish (fit)", "ms/workflow"): ms[0]
        - short.steps * per_step,
    }


def floor(trial: Trial, commits: int) -> Values:
    """The store's own cost of a durable commit: single-row transactions, one at a time, on its
    durable settings, whatever --fast says. No engine takes part."""
    ms = 1000 * trial.store.commit_floor(commits) / commits
    label = f"store floor ({commits:,} single-row commits)"
    return {
        Metric("floor_commit_ms", label, "ms/commit"): ms,
        Metric("floor_commits_per_s", label, "commits/s", True): 1000 / ms,
    }

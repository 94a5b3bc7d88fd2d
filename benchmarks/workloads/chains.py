"""Chains of trivial steps (core, compare): a load's throughput, one workflow at a time through
two chain lengths, and the store's own commit floor. `started_first`: durably in this process
starts every run before the clock that counts (app.start timed apart); runner processes time
start and run together, since an engine may not tell them apart.
"""

from __future__ import annotations

from collections.abc import Callable

from benchmarks.plan import Metric, Trial, Values
from benchmarks.runners.protocol import Load, Timing

__all__ = ["floor", "sequential", "throughput"]

Measure = Callable[[Trial, Load], Values]


def timed(trial: Trial, load: Load) -> Timing:
    """What the trial's runner took over `load`, on a fresh store."""
    with trial.fresh() as url:
        return trial.engine.throughput(trial, url, load)


def throughput(name: str, *, started_first: bool) -> Measure:
    """A load's workflows/s and steps/s, and what starting one run cost."""

    def measure(trial: Trial, load: Load) -> Values:
        timing = timed(trial, load)
        per_s = load.workflows / (timing.run_seconds if started_first else timing.total_seconds)
        start = timing.start_seconds and 1000 * timing.start_seconds / load.workflows
        label = f"{name.upper()} ({load}, c={load.concurrency})"
        starting = f"{'app.start' if started_first else 'start'} of one run ({name.upper()})"
        return {
            Metric(f"{name}_workflows_per_s", label, "workflows/s", True): per_s,
            Metric(f"{name}_steps_per_s", label, "steps/s", True): per_s * load.steps,
            Metric("start_ms", starting, "ms"): start,
        }

    return measure


def sequential(*, started_first: bool) -> Callable[[Trial, tuple[Load, Load]], Values]:
    """One workflow at a time through a short and a long chain; the line time/workflow = fixed
    + steps x per_step through the two gives one step's checkpoint and the fixed cost of a
    workflow (its start, claim and last commit)."""

    def measure(trial: Trial, loads: tuple[Load, Load]) -> Values:
        (short, long), ms = loads, []
        for load in loads:
            timing = timed(trial, load)
            taken = timing.run_seconds if started_first else timing.total_seconds
            ms.append(1000 * taken / load.workflows)
        per_step = (ms[1] - ms[0]) / (long.steps - short.steps)
        fixed = ms[0] - short.steps * per_step
        return {
            Metric("seq_short_ms", f"sequential ({short}, c=1)", "ms/workflow"): ms[0],
            Metric("seq_long_ms", f"sequential ({long}, c=1)", "ms/workflow"): ms[1],
            Metric("step_checkpoint_ms", "per-step checkpoint (fit)", "ms/step"): per_step,
            Metric("workflow_fixed_ms", "workflow start+finish (fit)", "ms/workflow"): fixed,
        }

    return measure


def floor(trial: Trial, commits: int) -> Values:
    """The store's own cost of a durable commit: single-row transactions, one at a time, on its
    durable settings, whatever --fast says. No engine takes part."""
    ms = 1000 * trial.store.commit_floor(commits) / commits
    label = f"store floor ({commits:,} single-row commits)"
    return {
        Metric("floor_commit_ms", label, "ms/commit"): ms,
        Metric("floor_commits_per_s", label, "commits/s", True): 1000 / ms,
    }

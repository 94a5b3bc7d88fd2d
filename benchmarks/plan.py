"""What a benchmark is made of, as data: workloads, their measures and targets, the figures
they yield, and one trial (a repetition of a workload by a runner on a store).

Everything else (the harness's loops, the report, the runners) imports this module and this
module imports none of them: the runners are typed here by their protocol only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from typing import Any, Generic, Protocol, TypeVar

from benchmarks.runners.protocol import BenchmarkError, Runner
from benchmarks.stores import Store

__all__ = [
    "STORE",
    "Bench",
    "Measure",
    "Metric",
    "Target",
    "Trial",
    "Values",
    "Workload",
    "at_least",
    "at_most",
    "number",
]

STORE = "store"  # the one cell of a figure of the store alone, which no runner measured


@dataclass(frozen=True, slots=True)
class Target:
    limit: float
    higher_is_better: bool

    def met_by(self, value: float) -> bool:
        return value >= self.limit if self.higher_is_better else value <= self.limit

    def __str__(self) -> str:
        return f"{'>=' if self.higher_is_better else '<='} {number(self.limit)}"


@dataclass(frozen=True, slots=True)
class Metric:
    """A figure a workload yields: its stable key (the results' and the targets'), how the
    table words it, its unit, and which way is better."""

    key: str
    label: str
    unit: str
    higher_is_better: bool = False


S = TypeVar("S")
Values = dict[str, float | None]  # by figure key; None: the runner cannot tell that one apart


class Measure(Protocol[S]):
    """What a workload measures and how; S is the type of the workload's size."""

    per_runner: bool  # False: it measures the store alone, once per repetition

    def once(self, trial: Trial, w: Workload[S]) -> Values:
        """One repetition by one runner (or of the store alone): values by figure key."""

    def metrics(self, w: Workload[S], found: Mapping[str, float]) -> list[Metric]:
        """Its figures, in table order; `found`, what the first repetition measured, is for a
        label that names a value."""

    def record(self, w: Workload[S]) -> dict[str, Any]:
        """Its size, as the results file's "sizes" records it."""


@dataclass(frozen=True, slots=True)
class Workload(Generic[S]):
    """One thing a benchmark measures, as data."""

    name: str  # for --only
    title: str  # in progress lines, the results' "runs" and labels: "W1", "queue hop"
    measure: Measure[S]
    size: S
    quick: S  # the size with --quick
    report: tuple[str, ...] = ()  # the keys of the measure's figures to show; all if empty

    def at(self, quick: bool) -> Workload[S]:
        return replace(self, size=self.quick) if quick else self

    def metrics(self, found: Mapping[str, float]) -> list[Metric]:
        metrics = self.measure.metrics(self, found)
        return [m for m in metrics if m.key in self.report] if self.report else metrics


@dataclass(frozen=True, slots=True)
class Bench:
    """An entry point: its workloads, durably's targets, the engines it compares."""

    name: str  # the results' "benchmark", and their file names
    doc: str  # the module's docstring; its first paragraph describes it in --help
    workloads: tuple[Workload[Any], ...]
    targets: Mapping[tuple[str, str], Target] = field(default_factory=dict)  # (key, store)
    engines: tuple[str, ...] = ("durably",)  # more than one: side by side, in processes
    before: Callable[[Store], None] | None = None  # a check on each store, before measuring

    @property
    def side_by_side(self) -> bool:
        return len(self.engines) > 1


def at_least(limit: float) -> Target:
    return Target(limit, higher_is_better=True)


def at_most(limit: float) -> Target:
    return Target(limit, higher_is_better=False)


@dataclass(frozen=True, slots=True)
class Trial:
    """One repetition of one workload by one runner on one store."""

    store: Store
    runner: Runner | None  # None: the workload measures the store alone
    workload: str  # its title
    repetition: int  # from 1
    runs: list[dict[str, Any]]  # every runner process's output, for the results file

    @property
    def engine(self) -> Runner:
        if self.runner is None:
            raise BenchmarkError(f"{self.workload} measures the store alone: it has no runner")
        return self.runner

    def fresh(self) -> AbstractContextManager[str]:
        """A new empty store for one measurement: its URL."""
        return self.store.fresh(STORE if self.runner is None else self.runner.name)

    def record(
        self, engine: str, command: str, options: Mapping[str, object], output: dict[str, Any]
    ) -> dict[str, Any]:
        """Keep a runner process's output for the results file; return it."""
        run: dict[str, Any] = {"store": self.store.label, "workload": self.workload}
        run |= {"repetition": self.repetition, "engine": engine, "command": command}
        run |= {"options": {name: str(value) for name, value in options.items()}}
        self.runs.append({**run, "output": output})
        return output


def number(value: float) -> str:
    if value == 0:
        return "0"
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.3f}" if value < 1 else f"{value:.2f}"

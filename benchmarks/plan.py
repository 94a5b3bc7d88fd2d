"""What a benchmark is, as data. A `Bench` (a name `python -m benchmarks` takes) is its
workloads, repetitions, engines and durably's targets; a `Workload` is a measure at a size
(full, and with --quick); a `Metric` is one figure a measure yields. A `Trial` is one
repetition of a workload by one runner on one store: what a measure is given."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

if TYPE_CHECKING:
    from benchmarks.runners.protocol import Load
    from benchmarks.stores import Store

STORE = "store"  # the cell of a figure of the store alone, which no runner measured
S = TypeVar("S")
T = TypeVar("T")
Fresh = Callable[[], AbstractContextManager[str]]  # a new empty store, for one measurement


class Runner(Protocol):
    """An engine as a trial runs it: InProcess (durably here) or a ProcessRunner."""

    name: str
    missing: str | None  # why it cannot run here, if it cannot

    def warm_up(self, fresh: Fresh) -> None: ...
    def throughput(self, trial: Trial, url: str, load: Load) -> float: ...


@dataclass(frozen=True, slots=True)
class Metric:
    """A figure: its key (the results' and the targets'), its label and unit in the table,
    which way is better, and whether it is its samples' 95th percentile (else their median)."""

    key: str
    label: str
    unit: str
    higher_is_better: bool = False
    p95: bool = False


Values = dict[Metric, float | list[float] | None]  # a sample, samples to pool, or None: n/a


@dataclass(frozen=True, slots=True)
class Workload(Generic[S]):
    """`measure`, one repetition by one runner (or the store alone) at a size: its values."""

    name: str
    measure: Callable[[Trial, S], Values]
    size: S
    quick: S
    store_alone: bool = False


@dataclass(frozen=True, slots=True)
class Bench:
    name: str
    about: str  # what it measures, for --list
    workloads: tuple[Workload[Any], ...]
    repeat: int = 3
    engines: tuple[str, ...] = ("durably",)  # more than one: side by side, in processes
    targets: Mapping[tuple[str, str], float] = field(default_factory=dict)  # (key, store)

    @property
    def side_by_side(self) -> bool:
        return len(self.engines) > 1


@dataclass(frozen=True, slots=True)
class Trial:
    """One repetition of one workload by one runner (None: the store alone) on one store."""

    store: Store
    runner: Runner | None
    workload: str
    repetition: int  # from 1
    runs: list[dict[str, Any]]  # every runner process's output, for the results file
    lasting: ExitStack
    kept: dict[str, Any]  # what `keep` made, by runner

    @property
    def engine(self) -> Runner:
        assert self.runner is not None, f"{self.workload} measures the store alone"
        return self.runner

    @property
    def name(self) -> str:
        return STORE if self.runner is None else self.runner.name

    def fresh(self) -> AbstractContextManager[str]:
        """A new empty store for one measurement: its URL."""
        return self.store.fresh(self.name)

    def keep(self, make: Callable[[], AbstractContextManager[T]]) -> T:
        """What `make` gives, made at the first repetition and kept for the workload's others."""
        if self.name not in self.kept:
            self.kept[self.name] = self.lasting.enter_context(make())
        kept: T = self.kept[self.name]
        return kept

    def record(self, command: str, options: Mapping[str, object], output: dict[str, Any]) -> None:
        """Keep a runner process's output for the results file."""
        run: dict[str, object] = {"store": self.store.label, "workload": self.workload}
        run |= {"engine": self.name, "repetition": self.repetition, "command": command}
        self.runs.append({**run, "options": dict(options), "output": output})

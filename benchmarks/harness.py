"""The benchmark harness: workloads as data, measured on every store asked for, --repeat
times, each repetition by every runner in turn (the first one alternating), then one table
and the results files (benchmarks.report).

An entry point (benchmarks.core, .compare, .scaling) is a `Bench`: its workloads, durably's
targets, and the engines it puts side by side. A `Workload` is a name, a `Measure` (what it
measures: one repetition by one runner gives values by figure key) and its size, full and
with --quick. Adding a workload is adding one to a Bench's tuple.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks.environment import busy_note, run_context
from benchmarks.plan import (
    STORE,
    Bench,
    Measure,
    Metric,
    Target,
    Trial,
    Values,
    Workload,
    at_least,
    at_most,
    number,
)
from benchmarks.report import Figure, Results, Row
from benchmarks.runners.inprocess import InProcess
from benchmarks.runners.processes import ProcessRunner
from benchmarks.runners.protocol import BenchmarkError, Runner
from benchmarks.stores import POSTGRES_URL, Store, open_store, postgres_problem

__all__ = ["Bench", "Measure", "Trial", "Values", "Workload", "at_least", "at_most", "main"]

OVER_FLOOR = Metric("step_over_floor", "per-step checkpoint / floor commit", "x")

# -- the command ---------------------------------------------------------------------------


def main(bench: Bench, argv: Sequence[str] | None = None) -> int:
    args = parse(bench, argv)
    every = [w.at(args.quick) for w in bench.workloads]
    runners: Sequence[Runner] = [InProcess()]
    if bench.side_by_side:
        runners = [ProcessRunner(name, fast=args.fast) for name in args.engines]
    results = Results(bench, run_context(), every, args.repeat, args.fast, runners)
    for runner in runners:
        if runner.missing is not None:
            results.note(f"{runner.name}: {runner.missing}")
    if busy := busy_note():
        results.note(busy)
    try:
        for name in args.stores:
            if name == "postgres" and (problem := postgres_problem(args.postgres_url)):
                results.note(
                    f"PostgreSQL rows skipped: {args.postgres_url} is unreachable ({problem})"
                )
                continue
            store = open_store(
                name, args.postgres_url, runner_processes=bench.side_by_side, fast=args.fast
            )
            session = Session(bench, store, runners, args.repeat, args.fast, results.runs)
            rows = session.measure_all([w for w in every if w.name in args.only])
            results.add(store, rows)
    except BenchmarkError as failure:
        print(failure.report(), file=sys.stderr)
        return 1
    if bench.side_by_side:
        results.write_side_by_side()
    results.show()
    return 0


def parse(bench: Bench, argv: Sequence[str] | None) -> argparse.Namespace:
    """--repeat, --quick, --stores, --postgres-url and --only; side by side, --engines and
    --fast too."""
    names = [w.name for w in bench.workloads]
    description = bench.doc.split("\n\n")[0]
    parser = argparse.ArgumentParser(
        prog=f"python -m benchmarks.{bench.name}", description=description
    )
    parser.add_argument("--repeat", type=int, default=3, help="repetitions per figure (default 3)")
    parser.add_argument("--quick", action="store_true", help="smaller workloads")
    parser.add_argument(
        "--stores", default="sqlite,postgres", help="comma-separated: sqlite,postgres"
    )
    parser.add_argument("--postgres-url", default=POSTGRES_URL, help="the PostgreSQL server to use")
    if bench.side_by_side:
        engines = ",".join(bench.engines)
        parser.add_argument("--engines", default=engines, help=f"comma-separated: {engines}")
        fast = "SQLite synchronous=NORMAL, PostgreSQL synchronous_commit=off"
        parser.add_argument("--fast", action="store_true", help=fast)
    parser.add_argument(
        "--only", default=",".join(names), help=f"comma-separated: {','.join(names)}"
    )
    args = parser.parse_args(argv)
    args.fast = getattr(args, "fast", False)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    for option, known in (
        ("stores", ("sqlite", "postgres")),
        ("engines", bench.engines),
        ("only", names),
    ):
        chosen = [item.strip() for item in getattr(args, option, "").split(",") if item.strip()]
        if unknown := sorted(set(chosen) - set(known)):
            parser.error(f"--{option}: unknown {', '.join(unknown)} (known: {', '.join(known)})")
        setattr(args, option, chosen)
    return args


# -- measuring -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Session:
    """Measuring on one store: what every measurement there shares."""

    bench: Bench
    store: Store
    runners: Sequence[Runner]  # those asked for, in the order given; some may be missing
    repeat: int
    fast: bool
    runs: list[dict[str, Any]]

    def measure_all(self, workloads: Sequence[Workload[Any]]) -> list[Row]:
        for runner in self.order(0):
            runner.warm_up(functools.partial(self.store.fresh, runner.name))
        if self.bench.before is not None:
            self.bench.before(self.store)
        rows = [row for w in workloads for row in self.measure(w)]
        return rows + self.over_floor(rows)

    def order(self, repetition: int) -> list[Runner]:
        """The runners that can run, the first one alternating from one repetition to the
        next, so that drift on the machine hits them alike."""
        able = [runner for runner in self.runners if runner.missing is None]
        return able if repetition % 2 == 0 else able[::-1]

    def measure(self, w: Workload[Any]) -> list[Row]:
        """--repeat repetitions of `w`, each by every runner in turn: one row per figure."""
        samples: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        found: dict[str, float] = {}
        for repetition in range(1, self.repeat + 1):
            runners = self.order(repetition - 1) if w.measure.per_runner else [None]
            for runner in runners:
                values = w.measure.once(
                    Trial(self.store, runner, w.title, repetition, self.runs), w
                )
                name = STORE if runner is None else runner.name
                for key, value in values.items():
                    if value is not None:
                        samples[key][name].append(value)
                        found.setdefault(key, value)
                shown = ", ".join(f"{k} {number(v)}" for k, v in values.items() if v is not None)
                self.progress(f"{w.title} {repetition}/{self.repeat} {name}: {shown}")
        return [self.row(metric, samples[metric.key]) for metric in w.metrics(found)]

    def row(self, metric: Metric, by_runner: Mapping[str, list[float]]) -> Row:
        """A figure of the store alone (at its durable settings, whatever --fast says), or
        one cell per engine: its figure, or why it has none."""
        if STORE in by_runner:
            return Row(
                metric, self.store.name, {STORE: Figure(metric, self.store.name, by_runner[STORE])}
            )
        asked = {runner.name: runner for runner in self.runners}
        cells: dict[str, Figure | str] = {}
        for name in self.bench.engines:
            if name not in asked:
                cells[name] = "not run"
            elif (missing := asked[name].missing) is not None:
                cells[name] = missing
            elif not by_runner.get(name):
                cells[name] = "n/a"  # the runner cannot tell this figure apart
            else:
                target = self.target(metric, name)
                cells[name] = Figure(metric, self.store.label, by_runner[name], target)
        return Row(metric, self.store.label, cells)

    def target(self, metric: Metric, runner: str) -> Target | None:
        """durably's target for the figure, in the durable mode only."""
        if self.fast or runner != "durably":
            return None
        return self.bench.targets.get((metric.key, self.store.name))

    def over_floor(self, rows: Sequence[Row]) -> list[Row]:
        """How many of the store's own commits one step's checkpoint costs, runner by runner
        (when both the sequential fit and the floor were measured)."""
        by_key = {row.metric.key: row for row in rows}
        fitted, floor = by_key.get("step_checkpoint_ms"), by_key.get("floor_commit_ms")
        commit = None if floor is None else floor.figure
        if fitted is None or commit is None:
            return []
        cells = fitted.cells.items()
        ratios = {
            name: [cell.median / commit.median] for name, cell in cells if isinstance(cell, Figure)
        }
        return [self.row(OVER_FLOOR, ratios)]

    def progress(self, message: str) -> None:
        print(f"  {self.store.label}: {message}", file=sys.stderr, flush=True)

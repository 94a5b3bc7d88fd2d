"""The harness: a bench measured on every store asked for, each workload --repeat times, each
repetition by every runner in turn (the first one alternating, so that drift on the machine
hits them alike), then the table and the results file (benchmarks.report).
"""

import functools
import sys
from argparse import Namespace
from collections import defaultdict
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, replace
from typing import Any

from benchmarks.plan import STORE, Bench, Metric, Runner, Trial, Workload
from benchmarks.report import Results, Row, busy_note, number, run_context
from benchmarks.runners.durably_runner import InProcess
from benchmarks.runners.processes import ProcessRunner
from benchmarks.runners.protocol import BenchmarkError
from benchmarks.stores import Store, postgres_problem


def run(bench: Bench, asked: Namespace) -> int:
    """Measure `bench` as the command asks; 1 if a runner failed (its stderr printed), else 0."""
    workloads = [replace(w, size=w.quick) if asked.quick else w for w in bench.workloads]
    fast, repeat = asked.fast and bench.side_by_side, asked.repeat or bench.repeat
    runners: list[Runner] = [InProcess()]
    if bench.side_by_side:
        names = [name for name in asked.engines or bench.engines if name in bench.engines]
        poll = asked.dbos_queue_poll_ms
        options = {"dbos": {} if poll is None else {"queue-poll-ms": poll}}
        runners = [ProcessRunner(n, fast, options.get(n, {})) for n in names]
    engines = {r.name: r.describe() for r in runners if isinstance(r, ProcessRunner)}
    sizes = {w.name: w.size for w in workloads} | {"repeat": repeat}
    record = {"benchmark": bench.name, **run_context(), "engines": engines, "sizes": sizes}
    results = Results(bench, record, fast)
    results.notes = [f"{r.name}: {r.missing}" for r in runners if r.missing] + [busy_note()]
    for name in asked.stores:
        if name == "postgres" and (problem := postgres_problem()):
            results.notes.append(f"PostgreSQL rows skipped: {problem}")
            continue
        store = Store(name, runner_processes=bench.side_by_side, fast=fast)
        session = Session(bench, store, runners, repeat, results.runs)
        try:
            results.rows += session.measure(workloads)
        except BenchmarkError as failure:
            print(f"benchmark failed: {failure}", file=sys.stderr)
            return 1
        results.durability[name] = store.settings()
        results.write()  # a later failure leaves these
    results.notes = [note for note in results.notes if note]
    results.notes.append(f"results: {results.write()}")
    results.show()
    return 0


@dataclass(frozen=True, slots=True)
class Session:
    """Measuring on one store: what every measurement there shares."""

    bench: Bench
    store: Store
    runners: Sequence[Runner]  # those asked for, in the order given; some may be missing
    repeat: int
    runs: list[dict[str, Any]]  # every runner process's output, for the results file

    def measure(self, workloads: Sequence[Workload[Any]]) -> list[Row]:
        able = [runner for runner in self.runners if runner.missing is None]
        for runner in able:
            runner.warm_up(functools.partial(self.store.fresh, runner.name))
        return [row for w in workloads for row in self.repetitions(w, able)]

    def repetitions(self, w: Workload[Any], able: list[Runner]) -> list[Row]:
        """--repeat repetitions of `w`, each by every runner in turn, the first one alternating
        from one repetition to the next: one row per figure."""
        samples: dict[Metric, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        pooled, kept = set[Metric](), dict[str, Any]()
        with ExitStack() as lasting:
            for repetition in range(1, self.repeat + 1):
                turn = able if repetition % 2 else able[::-1]
                for runner in [None] if w.store_alone else turn:
                    trial = Trial(self.store, runner, w.name, repetition, self.runs, lasting, kept)
                    values = w.measure(trial, w.size)
                    for metric, value in values.items():
                        pooled |= {metric} if isinstance(value, list) else set()
                        listed = value if isinstance(value, list) else [value]
                        samples[metric][trial.name] += [v for v in listed if v is not None]
                    shown = ", ".join(f"{m.key} {shown_value(v)}" for m, v in values.items())
                    where = f"  {self.store.label}: {w.name} {repetition}/{self.repeat}"
                    print(f"{where} {trial.name}: {shown}", file=sys.stderr, flush=True)
        return [self.row(metric, samples[metric], metric in pooled) for metric in samples]

    def row(self, metric: Metric, by_runner: dict[str, list[float]], pooled: bool) -> Row:
        """A figure of the store alone (at its durable settings, whatever --fast says), or one
        cell per engine: its samples, or why none; with durably's target in the durable mode."""
        if STORE in by_runner:
            return Row(metric, self.store.name, {STORE: by_runner[STORE]})
        asked = {runner.name: runner for runner in self.runners}
        cells: dict[str, list[float] | str] = {}
        for name in self.bench.engines:  # "n/a": the runner cannot tell this figure apart
            missing = asked[name].missing if name in asked else "not run"
            cells[name] = missing or by_runner.get(name) or "n/a"
        target = None if self.store.fast else self.bench.targets.get((metric.key, self.store.name))
        return Row(metric, self.store.label, cells, target, pooled)


def shown_value(value: float | list[float] | None) -> str:
    if isinstance(value, list):
        return f"[{len(value)} samples]"
    return "n/a" if value is None else number(value)

"""The harness: a bench measured on every store asked for, each workload --repeat times, each
repetition by every runner in turn (the first one alternating, so that drift on the machine
hits them alike); then what it found, as a `Row` per metric and store (every runner's
samples), shown in a table and written with the record around them to benchmarks/results/.
"""

import dataclasses
import functools
import json
import os
import platform
import statistics
import subprocess
import sys
from argparse import Namespace
from collections import defaultdict
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import durably
from benchmarks.plan import STORE, Bench, Metric, Runner, Trial, Workload
from benchmarks.runners.durably_runner import InProcess
from benchmarks.runners.processes import ProcessRunner
from benchmarks.runners.protocol import BenchmarkError
from benchmarks.stores import Store, postgres_problem

RESULTS = Path(__file__).parent / "results"


def number(value: float | list[float] | None) -> str:
    if value is None or isinstance(value, list):  # in the progress lines
        return "n/a" if value is None else f"[{len(value)} samples]"
    if abs(value) >= 100 or value == 0:
        return f"{value:,.0f}"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.{3 if abs(value) < 1 else 2}f}"


def median_or_p95(metric: Metric, samples: list[float]) -> float:
    if not metric.p95 or len(samples) < 2:
        return statistics.median(samples)
    return statistics.quantiles(samples, n=20, method="inclusive")[18]


@dataclass(frozen=True, slots=True)
class Row:
    """One metric on one store: each runner's samples, or why none; durably's target, if any."""

    metric: Metric
    store: str
    cells: dict[str, list[float] | str]  # by runner, or the store alone's
    target: float | None = None
    pooled: bool = False

    def value(self, runner: str) -> float | None:
        """The runner's figure (the store's, where the store alone was measured)."""
        samples = self.cells.get(runner, self.cells.get(STORE))
        return median_or_p95(self.metric, samples) if isinstance(samples, list) else None

    def cell(self, runner: str) -> str:
        """The runner's figure and the range of its samples, or why it has none."""
        if isinstance(samples := self.cells.get(runner, self.cells.get(STORE, "n/a")), str):
            return samples
        low, high, value = min(samples), max(samples), median_or_p95(self.metric, samples)
        ranged = low < high and not self.metric.p95
        return number(value) + (f" [{number(low)}..{number(high)}]" if ranged else "")

    def ratios(self) -> list[float]:
        """durably's figure over dbos's, in the metric's direction; then by repetition."""
        ours, theirs = self.cells.get("durably"), self.cells.get("dbos")
        if not isinstance(ours, list) or not isinstance(theirs, list) or min(ours + theirs) <= 0:
            return []  # nothing to divide (or a fit gone wrong)

        def better(a: float, b: float) -> float:
            return a / b if self.metric.higher_is_better else b / a

        same = len(ours) == len(theirs) and not self.pooled
        each = [better(a, b) for a, b in zip(ours, theirs, strict=True)] if same else []
        return [better(median_or_p95(self.metric, ours), median_or_p95(self.metric, theirs)), *each]

    def verdict(self) -> list[str]:
        """durably's target, and whether its figure meets it ("ok", "MISS")."""
        if self.target is None or (ours := self.value("durably")) is None:
            return ["", ""]
        higher = self.metric.higher_is_better
        met = ours >= self.target if higher else ours <= self.target
        return [f"{'>=' if higher else '<='} {number(self.target)}", "ok" if met else "MISS"]

    def line(self, bench: Bench) -> list[str]:
        """Its cells in the table: each engine's figure, the ratio, durably's target and verdict."""
        line = [self.metric.label, self.store, self.metric.unit]
        line += [self.cell(name) for name in bench.engines]
        if bench.side_by_side:
            whole, *each = self.ratios() or [0.0]
            spread = f" [{number(min(each))}..{number(max(each))}]" if len(each) > 1 else ""
            line.append(f"{whole:.2f}x{spread}" if whole else "")
        return line + (self.verdict() if bench.targets else [])

    def as_json(self) -> dict[str, Any]:
        row = {**dataclasses.asdict(self.metric), "store": self.store, "target": self.target}
        row |= {"pooled": self.pooled, "ratios": self.ratios(), "verdict": self.verdict()[1]}
        return row | {"values": {n: self.value(n) for n in self.cells}, "samples": self.cells}


def table(bench: Bench, rows: list[Row]) -> list[str]:
    """The rows in aligned columns under a header, numbers flush right."""
    header = ["workload", "store", "unit", *(f"{name} [range]" for name in bench.engines)]
    header += ["ratio [by repetition]"] if bench.side_by_side else []
    lines = [header + (["durably target", "met"] if bench.targets else [])]
    lines += [row.line(bench) for row in rows]
    wide = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    right = [i >= 3 for i in range(len(wide) - 1)] + [not bench.targets]
    shown = []
    for line in lines:
        cells = [t.rjust(w) if r else t.ljust(w) for t, w, r in zip(line, wide, right, strict=True)]
        shown.append("  ".join(cells).rstrip())
    return [shown[0], "  ".join("-" * width for width in wide), *shown[1:]]


def run_context() -> dict[str, Any]:
    """What was measured where, taken before measuring (the source may change meanwhile)."""
    changes = git("status", "--porcelain", "--", ".")
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    cpus = [line.split(":")[1].strip() for line in cpuinfo.splitlines() if "model name" in line]
    version = next((d.version for d in metadata.distributions(name="durably")), None)
    local = None if changes is None else bool(changes)
    source = {"version": version, "commit": git("rev-parse", "HEAD"), "local_changes": local}
    machine: dict[str, Any] = {"platform": platform.platform(), "cpus": os.cpu_count()}
    machine |= {"cpu": (cpus or [platform.processor()])[0], "load_average": os.getloadavg()}
    now = datetime.now(UTC).isoformat(timespec="seconds")
    return {"date": now, "python": platform.python_version(), "durably": source, "machine": machine}


def busy_note() -> str:
    """A warning when other work keeps the machine busy (the figures will be noisy)."""
    load, cpus = os.getloadavg()[0], os.cpu_count() or 1
    if load < 0.5 * cpus:
        return ""
    return f"the machine is busy (load average {load:.1f} on {cpus} CPUs): figures may be noisy"


def git(*args: str) -> str | None:
    """git's answer about the durably package's source, or None."""
    where = str(Path(durably.__file__).parent)
    try:
        done = subprocess.run(["git", "-C", where, *args], capture_output=True, text=True)
    except OSError:
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def run(bench: Bench, asked: Namespace) -> int:
    """Measure `bench` as the command asks; 1 if a runner failed (its stderr printed), else 0."""
    chosen = [w for w in bench.workloads if not asked.workloads or w.name in asked.workloads]
    workloads = [replace(w, size=w.quick) if asked.quick else w for w in chosen]
    if not workloads:
        return 0  # none of the workloads asked for is this bench's
    fast = asked.fast and bench.side_by_side
    runners: list[Runner] = [InProcess()]
    if bench.side_by_side:
        names = [name for name in asked.engines or bench.engines if name in bench.engines]
        poll = asked.dbos_queue_poll_ms
        options = {"dbos": {} if poll is None else {"queue_poll_ms": poll}}
        runners = [ProcessRunner(n, fast, options.get(n, {})) for n in names]
    results = Results(bench, runners, asked.repeat or bench.repeat, fast)
    engines = {r.name: r.describe() for r in runners if isinstance(r, ProcessRunner)}
    sizes = {w.name: w.size for w in workloads} | {"repeat": results.repeat}
    results.record = {"benchmark": bench.name, **run_context(), "engines": engines, "sizes": sizes}
    results.notes = [f"{r.name}: {r.missing}" for r in runners if r.missing] + [busy_note()]
    for name in asked.stores:
        if name == "postgres" and (problem := postgres_problem()):
            results.notes.append(f"PostgreSQL rows skipped: {problem}")
            continue
        store = Store(name, runner_processes=bench.side_by_side, fast=fast)
        try:
            results.measure(store, workloads)
        except BenchmarkError as failure:
            print(f"benchmark failed: {failure}", file=sys.stderr)
            return 1
        results.durability[name] = store.settings()
        results.write()  # a later failure leaves these
    results.notes = [note for note in results.notes if note]
    results.notes.append(f"results: {results.write()}")
    results.show()
    return 0


@dataclass(slots=True)
class Results:
    """A bench measured by the runners asked for: every row, and the record around them."""

    bench: Bench
    runners: list[Runner]
    repeat: int
    fast: bool
    record: dict[str, Any] = field(default_factory=dict)  # taken before measuring
    rows: list[Row] = field(default_factory=list)
    durability: dict[str, dict[str, Any]] = field(default_factory=dict)  # by store name
    runs: list[dict[str, Any]] = field(default_factory=list)  # every runner process's output
    notes: list[str] = field(default_factory=list)

    def measure(self, store: Store, workloads: Sequence[Workload[Any]]) -> None:
        able = [runner for runner in self.runners if runner.missing is None]
        for runner in able:
            runner.warm_up(functools.partial(store.fresh, runner.name))
        for w in workloads:
            self.repetitions(store, w, able)

    def repetitions(self, store: Store, w: Workload[Any], able: list[Runner]) -> None:
        """--repeat repetitions of `w`, by each runner in turn, the first one alternating."""
        samples: dict[Metric, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        pooled, kept = set[Metric](), dict[str, Any]()
        with ExitStack() as lasting:
            for repetition in range(1, self.repeat + 1):
                turn = able if repetition % 2 else able[::-1]
                for runner in [None] if w.store_alone else turn:
                    trial = Trial(store, runner, w.name, repetition, self.runs, lasting, kept)
                    values = w.measure(trial, w.size)
                    for metric, value in values.items():
                        pooled |= {metric} if isinstance(value, list) else set()
                        listed = value if isinstance(value, list) else [value]
                        samples[metric][trial.name] += [v for v in listed if v is not None]
                    shown = ", ".join(f"{m.key} {number(v)}" for m, v in values.items())
                    where = f"  {store.label}: {w.name} {repetition}/{self.repeat}"
                    print(f"{where} {trial.name}: {shown}", file=sys.stderr, flush=True)
        self.rows += [self.row(store, m, samples[m], m in pooled) for m in samples]

    def row(self, store: Store, metric: Metric, got: dict[str, list[float]], pooled: bool) -> Row:
        """The store alone's figure (durable, whatever --fast says), or each engine's."""
        if STORE in got:
            return Row(metric, store.name, {STORE: got[STORE]})
        asked = {runner.name: runner for runner in self.runners}
        cells: dict[str, list[float] | str] = {}
        for name in self.bench.engines:  # "n/a": the runner cannot tell this figure apart
            missing = asked[name].missing if name in asked else "not run"
            cells[name] = missing or got.get(name) or "n/a"
        target = None if store.fast else self.bench.targets.get((metric.key, store.name))
        return Row(metric, store.label, cells, target, pooled)

    def write(self) -> Path:
        """benchmarks/results/<bench>[-fast]-latest.json, replaced whole (never half-written)."""
        report = {**self.record, "load_average_after": os.getloadavg()}
        report |= {"durability": self.durability, "figures": [row.as_json() for row in self.rows]}
        report |= {"runs": self.runs, "notes": self.notes}
        RESULTS.mkdir(parents=True, exist_ok=True)
        path = RESULTS / f"{self.bench.name}{'-fast' if self.fast else ''}-latest.json"
        partial = path.with_name(path.name + ".tmp")
        partial.write_text(json.dumps(report, indent=1, default=str) + "\n")
        partial.replace(path)
        return path

    def show(self) -> None:
        """The table, then what it rests on: repetitions, targets missed, notes."""
        apart = [row for row in self.rows if self.bench.side_by_side and STORE in row.cells]
        print(f"\n{self.bench.name}")
        print("\n".join(table(self.bench, [row for row in self.rows if row not in apart])))
        for row in apart:
            print(f"{row.metric.label}, {row.store}: {row.cell(STORE)} {row.metric.unit}")
        missed = sum(row.verdict()[1] == "MISS" for row in self.rows)
        print(f"\nfrom {self.repeat} repetition(s)", end="")
        print(f"; {missed} durably target(s) missed" if self.bench.targets else "")
        if self.bench.side_by_side:
            print("ratio: how many times better durably is than dbos, in the row's direction")
        if self.fast:
            print("the faster durability mode (SQLite NORMAL, PostgreSQL off): no targets;")
            print("the floor is the durable one (SQLite FULL, PostgreSQL on)")
        print("\n".join(self.notes))

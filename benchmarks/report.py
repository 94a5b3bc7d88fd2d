"""What a bench found and how it is shown: a `Row` (one metric on one store, every runner's
samples), the table, and `Results`, with the record around them, in benchmarks/results/.
"""

import dataclasses
import json
import os
import platform
import statistics
import subprocess
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import durably
from benchmarks.plan import STORE, Bench, Metric

RESULTS = Path(__file__).parent / "results"


def number(value: float) -> str:
    if abs(value) >= 100 or value == 0:
        return f"{value:,.0f}"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.{3 if abs(value) < 1 else 2}f}"


def median_or_p95(metric: Metric, samples: list[float]) -> float:
    if not metric.p95 or len(samples) < 2:
        return statistics.median(samples)
    return statistics.quantiles(samples, n=20, method="inclusive")[18]


@dataclass(frozen=True, slots=True)
class Row:
    """One metric on one store: every runner's samples (one per repetition, or pooled over
    them), or why it has none ("not run", "n/a"); and durably's target, if any."""

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
        """How many times better durably is than dbos in the metric's direction, then the same
        repetition by repetition (where each has one sample per repetition); [] if not both."""
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
        """Its cells in the table: every engine's figure; side by side, the ratio (and the same
        repetition by repetition); durably's target and verdict, where the bench has targets."""
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
        return row | {
            "values": {name: self.value(name) for name in self.cells},
            "samples": self.cells,
        }


def table(bench: Bench, rows: list[Row]) -> list[str]:
    """The rows in aligned columns under a header, numbers flush right."""
    header = ["workload", "store", "unit"]
    if bench.side_by_side:
        header += [f"{name} [range]" for name in bench.engines] + ["ratio [by repetition]"]
    else:
        header.append("value [range]")
    lines = [header + (["durably target", "met"] if bench.targets else [])]
    lines += [row.line(bench) for row in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    right = [i >= 3 for i in range(len(widths) - 1)] + [not bench.targets]
    shown = [
        "  ".join(
            text.rjust(width) if flush else text.ljust(width)
            for text, width, flush in zip(line, widths, right, strict=True)
        ).rstrip()
        for line in lines
    ]
    return [shown[0], "  ".join("-" * width for width in widths), *shown[1:]]


def run_context() -> dict[str, Any]:
    """What was measured where, taken before measuring (the source may change meanwhile)."""
    changes = git("status", "--porcelain", "--", ".")
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    cpus = [line.split(":")[1].strip() for line in cpuinfo.splitlines() if "model name" in line]
    version = next((d.version for d in metadata.distributions(name="durably")), None)
    local = None if changes is None else bool(changes)
    source = {"version": version, "commit": git("rev-parse", "HEAD"), "local_changes": local}
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "durably": source,
        "machine": {
            "platform": platform.platform(),
            "cpu": (cpus or [platform.processor()])[0],
            "cpus": os.cpu_count(),
            "load_average": os.getloadavg(),
        },
    }


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


@dataclass(slots=True)
class Results:
    """Every row a bench measured, and the record around them."""

    bench: Bench
    record: dict[str, Any]  # machine, date, source, engines, sizes: taken before measuring
    fast: bool
    rows: list[Row] = field(default_factory=list)
    durability: dict[str, dict[str, Any]] = field(default_factory=dict)  # by store name
    runs: list[dict[str, Any]] = field(default_factory=list)  # every runner process's output
    notes: list[str] = field(default_factory=list)

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
        print(f"\nfrom {self.record['sizes']['repeat']} repetition(s)", end="")
        print(f"; {missed} durably target(s) missed" if self.bench.targets else "")
        if self.bench.side_by_side:
            print("ratio: how many times better durably is than dbos, in the row's direction")
        if self.fast:
            print("the faster durability mode (SQLite NORMAL, PostgreSQL off): no targets;")
            print("the floor is the durable one (SQLite FULL, PostgreSQL on)")
        print("\n".join(self.notes))

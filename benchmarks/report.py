"""What a bench found, and how it is shown: statistics of samples, a `Figure` (one runner's
samples of one metric on one store), a `Row` (one metric for every runner), the table, and
`Results`, every row with the record around them, written to benchmarks/results/.
"""

from __future__ import annotations

import dataclasses
import json
import operator
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.plan import STORE, Bench, Metric, Target

__all__ = ["RESULTS", "Figure", "Results", "Row", "number", "p95"]

RESULTS = Path(__file__).parent / "results"


def p95(values: Sequence[float]) -> float:
    if len(values) < 2:
        return values[0]
    return statistics.quantiles(values, n=20, method="inclusive")[18]


def number(value: float) -> str:
    if abs(value) >= 100 or value == 0:
        return f"{value:,.0f}"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.{3 if abs(value) < 1 else 2}f}"


@dataclass(frozen=True, slots=True)
class Figure:
    """One runner's samples of one metric on one store: one per repetition, or pooled."""

    metric: Metric
    samples: list[float]
    target: Target | None = None
    pooled: bool = False

    @property
    def value(self) -> float:
        return p95(self.samples) if self.metric.p95 else statistics.median(self.samples)

    def verdict(self) -> str:
        if (target := self.target) is None:
            return ""
        return "ok" if target.met_by(self.value) else "MISS"

    def target_text(self) -> str:
        if (target := self.target) is None:
            return ""
        return f"{'>=' if target.higher_is_better else '<='} {number(target.limit)}"

    def as_json(self) -> dict[str, Any]:
        return {
            "value": self.value,
            "min": min(self.samples),
            "max": max(self.samples),
            "samples": self.samples,
            "pooled": self.pooled,
            "target": self.target_text() or None,
            "verdict": self.verdict() or None,
        }


@dataclass(frozen=True, slots=True)
class Row:
    """One metric for every runner: its figure, or why there is none ("not run", "n/a")."""

    metric: Metric
    store: str
    cells: dict[str, Figure | str]

    def of(self, runner: str) -> Figure | None:
        """The runner's figure; where one runner (or the store alone) was measured, its one."""
        found = self.cells.get(runner) if len(self.cells) > 1 else next(iter(self.cells.values()))
        return found if isinstance(found, Figure) else None

    def ratio(self) -> tuple[float, list[float]] | None:
        """How many times better durably is than dbos in the metric's direction, and the same
        repetition by repetition (where both have one sample per repetition)."""
        ours, theirs = self.cells.get("durably"), self.cells.get("dbos")
        if not isinstance(ours, Figure) or not isinstance(theirs, Figure):
            return None
        if min(ours.samples + theirs.samples) <= 0:
            return None  # nothing to divide (or a fit gone wrong)

        def better(a: float, b: float) -> float:
            return a / b if self.metric.higher_is_better else b / a

        whole = better(ours.value, theirs.value)
        if len(ours.samples) != len(theirs.samples) or ours.pooled:
            return whole, []
        return whole, [better(a, b) for a, b in zip(ours.samples, theirs.samples, strict=True)]

    def as_json(self) -> dict[str, Any]:
        ratio = self.ratio()
        return {
            **dataclasses.asdict(self.metric),
            "store": self.store,
            "ratio": ratio and ratio[0],
            "ratio_by_repetition": ratio and ratio[1],
            "engines": {
                name: {"missing": cell} if isinstance(cell, str) else cell.as_json()
                for name, cell in self.cells.items()
            },
        }

    def cell(self, runner: str, spread: bool = False) -> str:
        """The runner's value (and the range of its repetitions' samples), or why it has none."""
        if isinstance(found := self.cells.get(runner, self.of(runner)), str):
            return found
        if found is None:
            return "n/a"
        low, high = min(found.samples), max(found.samples)
        ranged = spread and low < high and not found.metric.p95
        return number(found.value) + (f" [{number(low)}..{number(high)}]" if ranged else "")

    def ratio_text(self) -> str:
        if (ratio := self.ratio()) is None:
            return ""
        whole, each = ratio
        spread = f" [{number(min(each))}..{number(max(each))}]" if len(each) > 1 else ""
        return f"{whole:.2f}x{spread}"

    def ours(self, verdict: bool) -> str:
        """durably's verdict on its target, or the target; empty where it has none."""
        if (ours := self.of("durably")) is None:
            return ""
        return ours.verdict() if verdict else ours.target_text()


def table(bench: Bench, rows: list[Row]) -> list[str]:
    """The rows in aligned columns under a header, numbers flush right: every engine's value
    and the range of its repetitions; side by side, durably's over dbos's (and the same
    repetition by repetition); durably's target, where the bench has targets."""
    columns: list[tuple[str, Callable[[Row], str], bool]] = [  # header, cell, flush right
        ("workload", lambda row: row.metric.label, False),
        ("store", lambda row: row.store, False),
        ("unit", lambda row: row.metric.unit, False),
    ]
    if bench.side_by_side:
        for name in bench.engines:
            columns.append((f"{name} [range]", operator.methodcaller("cell", name, True), True))
        columns.append(("ratio [by repetition]", Row.ratio_text, True))
    else:
        columns.append(("value [range]", operator.methodcaller("cell", "durably", True), True))
    if bench.targets:
        columns.append(("durably target", operator.methodcaller("ours", False), True))
        columns.append(("met", operator.methodcaller("ours", True), False))
    cells = [[header for header, _, _ in columns]]
    cells += [[cell(row) for _, cell, _ in columns] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    lines = [
        "  ".join(
            text.rjust(width) if right else text.ljust(width)
            for text, width, (_, _, right) in zip(line, widths, columns, strict=True)
        ).rstrip()
        for line in cells
    ]
    return [lines[0], "  ".join("-" * width for width in widths), *lines[1:]]


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

    def write(self, more: dict[str, Any]) -> Path:
        """benchmarks/results/<bench>[-fast]-latest.json, replaced whole (never half-written)."""
        figures = [row.as_json() for row in self.rows]
        report = {**self.record, **more, "durability": self.durability, "figures": figures}
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
            print(f"{row.metric.label}, {row.store}: {row.cell(STORE, True)} {row.metric.unit}")
        missed = sum(row.ours(verdict=True) == "MISS" for row in self.rows)
        print(f"\nfrom {self.record['sizes']['repeat']} repetition(s)", end="")
        print(f"; {missed} durably target(s) missed" if self.bench.targets else "")
        if self.bench.side_by_side:
            print("ratio: how many times better durably is than dbos, in the row's direction")
        if self.fast:
            print("the faster durability mode (SQLite NORMAL, PostgreSQL off): no targets;")
            print("the floor is the durable one (SQLite FULL, PostgreSQL on)")
        print("\n".join(self.notes))

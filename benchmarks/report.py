"""What a benchmark found and how it is shown: a `Figure` (one runner's samples of one
metric on one store), a `Row` (one metric for every runner), and `Results`, every row with
the record around them: the table on stdout and the results files under benchmarks/results.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.environment import load_average
from benchmarks.plan import STORE, Bench, Metric, Target, Workload, number
from benchmarks.runners.processes import ProcessRunner
from benchmarks.runners.protocol import CONCURRENCY

if TYPE_CHECKING:
    from benchmarks.runners.protocol import Runner
    from benchmarks.stores import Store

__all__ = ["RESULTS", "STORE", "Figure", "Metric", "Results", "Row", "Target", "number"]

RESULTS = Path(__file__).parent / "results"


@dataclass(frozen=True, slots=True)
class Figure:
    """One runner's samples of one metric on one store, one per repetition."""

    metric: Metric
    store: str
    samples: list[float]
    target: Target | None = None

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def verdict(self) -> str:
        if self.target is None:
            return ""
        return "ok" if self.target.met_by(self.median) else "MISS"

    def as_json(self, *, cell: bool = False) -> dict[str, Any]:
        """On its own, or as a cell of a side-by-side row (named by the row, with its range)."""
        metric, samples = self.metric, self.samples
        named = {} if cell else {"key": metric.key, "workload": metric.label, "unit": metric.unit}
        spread = {"min": min(samples), "max": max(samples)} if cell else {}
        return {
            **named,
            "median": self.median,
            **spread,
            "samples": samples,
            "target": None if self.target is None else str(self.target),
            "verdict": self.verdict or None,
        }


@dataclass(frozen=True, slots=True)
class Row:
    """One metric for every runner: its figure, or why there is none ("not run", "n/a")."""

    metric: Metric
    store: str
    cells: dict[str, Figure | str]

    @property
    def figure(self) -> Figure | None:
        """The first runner's figure: the only one where one runner is measured."""
        return next((cell for cell in self.cells.values() if isinstance(cell, Figure)), None)

    def of(self, runner: str) -> Figure | None:
        found = self.cells.get(runner)
        return found if isinstance(found, Figure) else None

    def ratio(self) -> float | None:
        """How many times better durably is than dbos, in the metric's direction."""
        ours, theirs = self.of("durably"), self.of("dbos")
        if ours is None or theirs is None or ours.median <= 0 or theirs.median <= 0:
            return None  # nothing to divide (or a fit gone wrong)
        better = ours.median / theirs.median
        return better if self.metric.higher_is_better else 1 / better

    def as_json(self) -> dict[str, Any]:
        return {
            "key": self.metric.key,
            "workload": self.metric.label,
            "store": self.store,
            "unit": self.metric.unit,
            "higher_is_better": self.metric.higher_is_better,
            "ratio": self.ratio(),
            "engines": {
                name: {"missing": cell} if isinstance(cell, str) else cell.as_json(cell=True)
                for name, cell in self.cells.items()
            },
        }


# -- the table -----------------------------------------------------------------------------

Column = tuple[str, Callable[[Row], str], bool]  # header, cell, flush right


def single_columns(targets: bool) -> list[Column]:
    """One runner: median, min..max, and durably's target where the benchmark has targets."""
    columns: list[Column] = [
        ("workload", lambda row: row.metric.label, False),
        ("store", lambda row: row.store, False),
        ("median", lambda row: _median(row.figure), True),
        ("unit", lambda row: row.metric.unit, False),
        ("min..max", lambda row: _span(row.figure), True),
    ]
    if targets:
        columns.append(("target", lambda row: _target(row.figure), True))
        columns.append(("ok", lambda row: _verdict(row.figure), False))
    return columns


def side_by_side_columns(engines: Sequence[str]) -> list[Column]:
    """Every engine's median, durably's over the other's, and durably's target."""

    def engine(name: str) -> Column:
        return name, lambda row: _cell(row.cells[name]), True

    def ratio(row: Row) -> str:
        return "" if (found := row.ratio()) is None else f"{found:.2f}x"

    return [
        ("workload", lambda row: row.metric.label, False),
        ("store", lambda row: row.store, False),
        ("unit", lambda row: row.metric.unit, False),
        *(engine(name) for name in engines),
        ("ratio", ratio, True),
        ("durably target", lambda row: _target(row.of("durably")), True),
        ("met", lambda row: _verdict(row.of("durably")), False),
    ]


def print_table(rows: Sequence[Row], columns: Sequence[Column]) -> None:
    """Rows in aligned columns under a header; numbers flush right so that they line up."""
    table = [[header for header, _, _ in columns]]
    table += [[cell(row) for _, cell, _ in columns] for row in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(columns))]
    for n, line in enumerate(table):
        cells = [
            text.rjust(width) if right else text.ljust(width)
            for text, width, (_, _, right) in zip(line, widths, columns, strict=True)
        ]
        print("  ".join(cells).rstrip())
        if n == 0:
            print("  ".join("-" * width for width in widths))


def _cell(cell: Figure | str) -> str:
    return number(cell.median) if isinstance(cell, Figure) else cell


def _median(figure: Figure | None) -> str:
    return "n/a" if figure is None else number(figure.median)


def _span(figure: Figure | None) -> str:
    if figure is None or len(figure.samples) < 2:
        return ""
    return f"{number(min(figure.samples))}..{number(max(figure.samples))}"


def _target(figure: Figure | None) -> str:
    return "" if figure is None or figure.target is None else str(figure.target)


def _verdict(figure: Figure | None) -> str:
    return "" if figure is None else figure.verdict


# -- the record --------------------------------------------------------------------------


@dataclass(slots=True)
class Results:
    """Every row a command measured, and the record around them."""

    bench: Bench
    context: dict[str, Any]  # machine, date, source: taken before measuring
    every: Sequence[Workload[Any]]  # every workload at the size asked, run or not
    repeat: int
    fast: bool
    runners: Sequence[Runner]
    rows: list[Row] = field(default_factory=list)
    durability: dict[str, dict[str, Any]] = field(default_factory=dict)  # by store name
    runs: list[dict[str, Any]] = field(default_factory=list)  # every runner process's output
    notes: list[str] = field(default_factory=list)

    def note(self, note: str) -> None:
        self.notes.append(note)
        print(note, file=sys.stderr)

    def add(self, store: Store, rows: list[Row]) -> None:
        """A store's rows; one runner's are written at once, so that a failure on a later
        store leaves them."""
        self.rows += rows
        self.durability[store.name] = settings = store.settings()
        if not self.bench.side_by_side:
            figures = [figure.as_json() for row in rows if (figure := row.figure)]
            name = f"{self.bench.name}-{store.name}"
            path = self.write(name, {"store": store.name}, {"durability": settings}, figures)
            self.notes.append(f"{store.name}: results written to {path}")

    def write_side_by_side(self) -> None:
        """Every store's rows, engines side by side, the store's own figures apart."""
        rows, apart = [], []
        for row in self.rows:
            if STORE not in row.cells:
                rows.append(row.as_json())
            elif figure := row.figure:
                apart.append({**figure.as_json(), "store": figure.store})
        engines = {r.name: r.describe() for r in self.runners if isinstance(r, ProcessRunner)}
        mode = "fast" if self.fast else "durable"
        path = self.write(
            f"{self.bench.name}-fast" if self.fast else self.bench.name,
            {"mode": mode},
            {"engines": engines, "durability": self.durability},
            rows,
            {"floors": apart, "runs": self.runs, "notes": list(self.notes)},
        )
        self.notes.append(f"every sample: {path}")

    def write(
        self,
        name: str,
        scope: dict[str, Any],
        settings: dict[str, Any],
        figures: list[dict[str, Any]],
        more: dict[str, Any] | None = None,
    ) -> Path:
        """benchmarks/results/<name>-latest.json, replaced whole (never left half-written)."""
        sizes = {key: value for w in self.every for key, value in w.measure.record(w).items()}
        report = {
            "benchmark": self.bench.name,
            **scope,
            **self.context,
            "load_average_after": load_average(),
            **settings,
            "sizes": {**sizes, "concurrency": CONCURRENCY, "repeat": self.repeat},
            "figures": figures,
            **(more or {}),
        }
        RESULTS.mkdir(parents=True, exist_ok=True)
        path = RESULTS / f"{name}-latest.json"
        partial = path.with_name(path.name + ".tmp")
        partial.write_text(json.dumps(report, indent=2) + "\n")
        partial.replace(path)
        return path

    def show(self) -> None:
        """The table, then what it rests on: repetitions, targets missed, notes."""
        print()
        if not self.bench.side_by_side:
            print_table(self.rows, single_columns(targets=bool(self.bench.targets)))
        else:
            engines = [row for row in self.rows if STORE not in row.cells]
            print_table(engines, side_by_side_columns(self.bench.engines))
            for row in self.rows:
                if row.metric.key == "floor_commit_ms" and (floor := row.figure):
                    median, per_s = number(floor.median), f"{1000 / floor.median:,.0f}/s"
                    print(f"{row.metric.label}, {row.store}: {median} ms/commit ({per_s})")
        print(f"\nmedians of {self.repeat} repetition(s); {self.verdict()}")
        if self.bench.side_by_side:
            print("ratio: how many times better durably is than dbos, in each row's direction")
        if self.fast:
            print("the faster durability mode (SQLite NORMAL, PostgreSQL off): no targets;")
            print("the floor is the durable one (SQLite FULL, PostgreSQL on)")
        for note in self.notes:
            print(note)

    def verdict(self) -> str:
        if not self.bench.targets:
            return f"{os.cpu_count()} CPUs"
        missed = [
            row for row in self.rows if (ours := row.of("durably")) and ours.verdict == "MISS"
        ]
        return f"{len(missed)} {'durably ' if self.bench.side_by_side else ''}target(s) missed"

"""The core benchmark: how fast durably checkpoints trivial workflows, and how far that is
from what its store can commit.

On SQLite (a fresh file in a temp dir: WAL, synchronous=FULL, the default) and on PostgreSQL
(synchronous_commit=on, set per connection; a fresh schema per workload, dropped after) it
measures:

    W1        1,000 workflows x 3 trivial async steps, worker concurrency 32
    W2        200 workflows x 20 trivial async steps, worker concurrency 32
    latency   one workflow at a time (concurrency 1): 200 x 3 steps and 50 x 20 steps; the
              line time/workflow = fixed + steps x per_step through the two gives the cost of
              one step's checkpoint and the fixed cost of a workflow inside the worker (its
              claim and its final commit; app.start is timed on its own, during W1)
    floor     2,000 single-row INSERTs, each its own transaction, on the same store settings

All runs are started first (app.start); only `app.run_until_idle` is timed. Every figure is
the median of --repeat repetitions (default 3), each on a fresh store.

    python -m benchmarks.core                       # both stores, full sizes
    python -m benchmarks.core --quick --repeat 5    # smaller workloads
    python -m benchmarks.core --stores sqlite
    python -m benchmarks.core --postgres-url postgresql://user@host:5432/db

The table goes to stdout (progress to stderr); the figures, machine, Python version, date and
durability settings to benchmarks/results/core-<store>-latest.json. Without a reachable
PostgreSQL server ($DURABLY_BENCH_POSTGRES, default postgresql://postgres@127.0.0.1:5432/test)
its rows are skipped with a note.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import AbstractContextManager, closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import durably
from benchmarks.environment import busy_note, filesystem_of, load_average, run_context

__all__ = ["main"]

POSTGRES_URL = os.environ.get("DURABLY_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
RESULTS = Path(__file__).parent / "results"
CONCURRENCY = 32


# -- what to measure ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Load:
    workflows: int
    steps: int  # per workflow

    def __str__(self) -> str:
        return f"{self.workflows:,} wf x {self.steps} steps"


@dataclass(frozen=True, slots=True)
class Sizes:
    w1: Load
    w2: Load
    short: Load  # sequential latency, few steps
    long: Load  # sequential latency, many steps
    floor_commits: int


FULL = Sizes(Load(1000, 3), Load(200, 20), Load(200, 3), Load(50, 20), 2000)
QUICK = Sizes(Load(200, 3), Load(50, 20), Load(50, 3), Load(15, 20), 500)


@dataclass(frozen=True, slots=True)
class Target:
    limit: float
    higher_is_better: bool

    def met_by(self, value: float) -> bool:
        return value >= self.limit if self.higher_is_better else value <= self.limit

    def __str__(self) -> str:
        return f"{'>=' if self.higher_is_better else '<='} {_number(self.limit)}"


TARGETS: dict[tuple[str, str], Target] = {
    ("step_checkpoint_ms", "sqlite"): Target(0.30, higher_is_better=False),
    ("step_checkpoint_ms", "postgres"): Target(0.70, higher_is_better=False),
    ("w1_workflows_per_s", "sqlite"): Target(1_000, higher_is_better=True),
    ("w1_workflows_per_s", "postgres"): Target(700, higher_is_better=True),
    ("w2_steps_per_s", "sqlite"): Target(10_000, higher_is_better=True),
    ("w2_steps_per_s", "postgres"): Target(8_000, higher_is_better=True),
}


@dataclass(slots=True)
class Figure:
    key: str  # stable name in the JSON and the targets
    workload: str
    store: str
    unit: str
    samples: list[float]
    target: Target | None = field(default=None)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def verdict(self) -> str:
        if self.target is None:
            return ""
        return "ok" if self.target.met_by(self.median) else "MISS"

    def as_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "workload": self.workload,
            "unit": self.unit,
            "median": self.median,
            "samples": self.samples,
            "target": None if self.target is None else str(self.target),
            "verdict": self.verdict or None,
        }


def figure(key: str, workload: str, store: str, unit: str, samples: list[float]) -> Figure:
    return Figure(key, workload, store, unit, samples, TARGETS.get((key, store)))


# -- the stores ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Backend:
    name: str
    fresh: Callable[[], AbstractContextManager[str]]  # the URL of an empty durably store
    commit_floor: Callable[[int], float]  # seconds for n single-row commits, one at a time
    settings: Callable[[], dict[str, Any]]  # durability settings, for the record


def sqlite_backend() -> Backend:
    return Backend("sqlite", fresh_sqlite, sqlite_floor, sqlite_settings)


@contextmanager
def fresh_sqlite() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="durably-bench-") as tmp:
        yield f"sqlite:///{tmp}/bench.db?synchronous=FULL"


def sqlite_floor(commits: int) -> float:
    with (
        tempfile.TemporaryDirectory(prefix="durably-bench-") as tmp,
        closing(sqlite3.connect(Path(tmp) / "floor.db", isolation_level=None)) as db,
    ):
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = FULL")
        db.execute("CREATE TABLE floor (id INTEGER PRIMARY KEY, data TEXT NOT NULL)")
        began = time.perf_counter()
        for i in range(commits):
            db.execute("BEGIN IMMEDIATE")  # as the store's writes do
            db.execute("INSERT INTO floor (id, data) VALUES (?, ?)", (i, "x"))
            db.execute("COMMIT")
        return time.perf_counter() - began


def sqlite_settings() -> dict[str, Any]:
    with fresh_sqlite() as url:
        app = durably.App(url)
        path = app.store.url.removeprefix("sqlite:///")  # opening the store creates the file
        with closing(sqlite3.connect(path)) as db:
            journal_mode = db.execute("PRAGMA journal_mode").fetchone()[0]  # kept in the file
        app.close()
    return {
        "journal_mode": journal_mode,
        "synchronous": "FULL",
        "sqlite_version": sqlite3.sqlite_version,
        "filesystem": filesystem_of(tempfile.gettempdir()),
    }


def postgres_backend(url: str) -> Backend:
    return Backend(
        "postgres",
        lambda: fresh_postgres(url),
        lambda commits: postgres_floor(url, commits),
        lambda: postgres_settings(url),
    )


def postgres_problem(url: str) -> str | None:
    """None if the server answers, else why not."""
    try:
        import psycopg

        with psycopg.connect(url, connect_timeout=3):
            return None
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}".strip()


@contextmanager
def fresh_postgres(url: str) -> Iterator[str]:
    """The URL of a new schema on the server, dropped afterwards."""
    import psycopg
    from psycopg import sql

    schema = f"durably_bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(url, autocommit=True) as db:
        db.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    try:
        separator = "&" if "?" in url else "?"
        options = f"-csearch_path%3D{schema}%20-csynchronous_commit%3Don"
        yield f"{url}{separator}options={options}"
    finally:
        with psycopg.connect(url, autocommit=True) as db:
            db.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


def postgres_floor(url: str, commits: int) -> float:
    import psycopg

    with fresh_postgres(url) as schema_url, psycopg.connect(schema_url, autocommit=True) as db:
        db.execute("CREATE TABLE floor (id integer PRIMARY KEY, data text NOT NULL)")
        began = time.perf_counter()
        for i in range(commits):  # autocommit: one round trip, one WAL flush each
            db.execute("INSERT INTO floor (id, data) VALUES (%s, %s)", (i, "x"))
        return time.perf_counter() - began


def postgres_settings(url: str) -> dict[str, Any]:
    import psycopg

    from durably.stores.postgres import redact

    names = ["server_version", "synchronous_commit", "fsync", "wal_sync_method", "commit_delay"]
    with fresh_postgres(url) as schema_url, psycopg.connect(schema_url) as db:
        rows = {name: db.execute(f"SHOW {name}").fetchone() for name in names}
    return {"url": redact(url), **{name: row and row[0] for name, row in rows.items()}}


# -- the workloads -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Timing:
    start_seconds: float  # app.start of every run
    run_seconds: float  # app.run_until_idle until every run completed


class BenchmarkError(Exception):
    """The engine did not do what was measured: the figure would be meaningless."""


def chain_app(url: str, steps: int) -> tuple[durably.App, durably.Workflow]:
    """A fresh app with one workflow: `steps` trivial steps in a row, each adding one."""
    app = durably.App(url)

    @app.step
    async def add_one(x: int) -> int:
        return x + 1

    @app.workflow(name=f"chain_{steps}")
    async def chain(x: int) -> int:
        for _ in range(steps):
            x = await add_one(x)
        return x

    return app, chain


def time_load(url: str, load: Load, concurrency: int) -> Timing:
    app, chain = chain_app(url, load.steps)
    try:
        began = time.perf_counter()
        handles = [app.start(chain, i) for i in range(load.workflows)]
        started = time.perf_counter()
        finished = app.run_until_idle(concurrency=concurrency)
        ended = time.perf_counter()
        check_completed(app, handles, load, finished)
    finally:
        app.close()
    return Timing(started - began, ended - started)


def check_completed(
    app: durably.App, handles: Sequence[durably.RunHandle], load: Load, finished: int
) -> None:
    completed = app.runs(status=durably.RunStatus.COMPLETED, limit=load.workflows + 1)
    if finished != load.workflows or len(completed) != load.workflows:
        raise BenchmarkError(
            f"{load}: the worker finished {finished} runs and {len(completed)} completed"
        )
    for i in (0, len(handles) - 1):
        if (result := handles[i].result(timeout="1s")) != i + load.steps:
            raise BenchmarkError(f"{load}: run {i} returned {result}, not {i + load.steps}")


def measure_throughput(
    backend: Backend, label: str, load: Load, repeat: int, *, start_cost: bool = False
) -> list[Figure]:
    """Workflows/s and steps/s of `load` at concurrency 32 (and, if asked, app.start's cost)."""
    timings: list[Timing] = []
    for rep in range(repeat):
        with backend.fresh() as url:
            timings.append(time_load(url, load, CONCURRENCY))
        progress(
            backend,
            f"{label} {rep + 1}/{repeat}: {load.workflows / timings[-1].run_seconds:,.0f} wf/s",
        )
    workload, key, store = f"{label} ({load}, c={CONCURRENCY})", label.lower(), backend.name
    per_s = [load.workflows / timing.run_seconds for timing in timings]
    figures = [
        figure(f"{key}_workflows_per_s", workload, store, "workflows/s", per_s),
        figure(f"{key}_steps_per_s", workload, store, "steps/s", [r * load.steps for r in per_s]),
    ]
    if start_cost:
        start_ms = [1000 * timing.start_seconds / load.workflows for timing in timings]
        figures.append(figure("start_ms", f"app.start of one run ({label})", store, "ms", start_ms))
    return figures


def measure_latency(backend: Backend, short: Load, long: Load, repeat: int) -> list[Figure]:
    """Per-step and fixed cost of one workflow at a time, from a line through two loads."""
    short_ms: list[float] = []
    long_ms: list[float] = []
    step_ms: list[float] = []
    fixed_ms: list[float] = []
    for rep in range(repeat):
        short_ms.append(ms_per_workflow(backend, short))
        long_ms.append(ms_per_workflow(backend, long))
        per_step = (long_ms[-1] - short_ms[-1]) / (long.steps - short.steps)
        step_ms.append(per_step)
        fixed_ms.append(short_ms[-1] - short.steps * per_step)
        progress(
            backend,
            f"latency {rep + 1}/{repeat}: {per_step:.3f} ms/step, {fixed_ms[-1]:.3f} ms fixed",
        )
    name = backend.name
    return [
        figure("seq_short_ms", f"sequential ({short}, c=1)", name, "ms/workflow", short_ms),
        figure("seq_long_ms", f"sequential ({long}, c=1)", name, "ms/workflow", long_ms),
        figure("step_checkpoint_ms", "per-step checkpoint (fit)", name, "ms/step", step_ms),
        figure("workflow_fixed_ms", "workflow start+finish (fit)", name, "ms/workflow", fixed_ms),
    ]


def ms_per_workflow(backend: Backend, load: Load) -> float:
    with backend.fresh() as url:
        return 1000 * time_load(url, load, concurrency=1).run_seconds / load.workflows


def measure_floor(backend: Backend, commits: int, repeat: int) -> list[Figure]:
    """The store's own cost of a durable commit: single-row transactions, one at a time."""
    ms: list[float] = []
    for rep in range(repeat):
        ms.append(1000 * backend.commit_floor(commits) / commits)
        progress(backend, f"floor {rep + 1}/{repeat}: {ms[-1]:.3f} ms/commit")
    workload = f"store floor ({commits:,} single-row commits)"
    return [
        figure("floor_commit_ms", workload, backend.name, "ms/commit", ms),
        figure("floor_commits_per_s", workload, backend.name, "commits/s", [1000 / m for m in ms]),
    ]


def engine_over_floor(figures: Sequence[Figure], store: str) -> Figure:
    """How many store commits one step's checkpoint costs, at concurrency 1."""
    by_key = {f.key: f.median for f in figures}
    ratio = by_key["step_checkpoint_ms"] / by_key["floor_commit_ms"]
    return figure("step_over_floor", "per-step checkpoint / floor commit", store, "x", [ratio])


def warm_up(backend: Backend) -> None:
    """One tiny run first, so imports and type adapters are not timed."""
    with backend.fresh() as url:
        time_load(url, Load(4, 2), concurrency=2)


def measure_store(backend: Backend, sizes: Sizes, repeat: int) -> list[Figure]:
    warm_up(backend)
    figures = [
        *measure_throughput(backend, "W1", sizes.w1, repeat, start_cost=True),
        *measure_throughput(backend, "W2", sizes.w2, repeat),
        *measure_latency(backend, sizes.short, sizes.long, repeat),
        *measure_floor(backend, sizes.floor_commits, repeat),
    ]
    return [*figures, engine_over_floor(figures, backend.name)]


# -- reporting -----------------------------------------------------------------------------


def progress(backend: Backend, message: str) -> None:
    print(f"  {backend.name}: {message}", file=sys.stderr, flush=True)


def print_table(figures: Sequence[Figure]) -> None:
    header = ("workload", "store", "median", "unit", "min..max", "target", "ok")
    rows = [header] + [
        (
            f.workload,
            f.store,
            _number(f.median),
            f.unit,
            f"{_number(min(f.samples))}..{_number(max(f.samples))}" if len(f.samples) > 1 else "",
            "" if f.target is None else str(f.target),
            f.verdict,
        )
        for f in figures
    ]
    print_columns(rows, right={2, 4, 5})  # numbers line up on the right


def print_columns(rows: Sequence[Sequence[str]], right: Collection[int]) -> None:
    """Rows of cells in aligned columns, the first row a header; columns in `right` flush right."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for n, row in enumerate(rows):
        cells = [
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        print("  ".join(cells).rstrip())
        if n == 0:
            print("  ".join("-" * w for w in widths))


def write_json(
    store: str,
    context: dict[str, Any],
    figures: Sequence[Figure],
    settings: dict[str, Any],
    sizes: Sizes,
    repeat: int,
) -> Path:
    report = {
        "benchmark": "core",
        "store": store,
        **context,
        "load_average_after": load_average(),
        "durability": settings,
        "sizes": {
            "w1": str(sizes.w1),
            "w2": str(sizes.w2),
            "sequential": [str(sizes.short), str(sizes.long)],
            "floor_commits": sizes.floor_commits,
            "concurrency": CONCURRENCY,
            "repeat": repeat,
        },
        "figures": [f.as_json() for f in figures],
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"core-{store}-latest.json"
    partial = path.with_name(path.name + ".tmp")
    partial.write_text(json.dumps(report, indent=2) + "\n")
    partial.replace(path)
    return path


def _number(value: float) -> str:
    if value == 0:
        return "0"
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.3f}" if value < 1 else f"{value:.2f}"


# -- the command ---------------------------------------------------------------------------


def store_arguments(prog: str, description: str) -> argparse.ArgumentParser:
    """The options every per-store benchmark takes: --repeat, --quick, --stores, --postgres-url."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--repeat", type=int, default=3, help="repetitions per figure (default 3)")
    parser.add_argument("--quick", action="store_true", help="smaller workloads")
    parser.add_argument(
        "--stores", default="sqlite,postgres", help="comma-separated: sqlite,postgres"
    )
    parser.add_argument("--postgres-url", default=POSTGRES_URL, help="the PostgreSQL server to use")
    return parser


def parse_store_arguments(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None
) -> argparse.Namespace:
    args = parser.parse_args(argv)
    args.stores = [name.strip() for name in args.stores.split(",") if name.strip()]
    if unknown := set(args.stores) - {"sqlite", "postgres"}:
        parser.error(f"unknown store(s): {', '.join(sorted(unknown))}")
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    return args


def measure_each_store(
    args: argparse.Namespace,
    measure: Callable[[Backend], list[Figure]],
    write: Callable[[str, dict[str, Any], list[Figure], dict[str, Any]], Path],
) -> tuple[list[Figure], list[str]]:
    """Measure every store asked for (PostgreSQL skipped with a note if unreachable) and
    write each one's results; return all the figures and the notes to print."""
    context = run_context()
    figures: list[Figure] = []
    notes: list[str] = []
    if busy := busy_note():
        notes.append(busy)
        print(busy, file=sys.stderr)
    for name in args.stores:
        if name == "postgres" and (problem := postgres_problem(args.postgres_url)):
            notes.append(f"PostgreSQL rows skipped: {args.postgres_url} is unreachable ({problem})")
            print(notes[-1], file=sys.stderr)
            continue
        backend = sqlite_backend() if name == "sqlite" else postgres_backend(args.postgres_url)
        store_figures = measure(backend)
        path = write(name, context, store_figures, backend.settings())
        notes.append(f"{name}: results written to {path}")
        figures += store_figures
    return figures, notes


def main(argv: Sequence[str] | None = None) -> int:
    parser = store_arguments("python -m benchmarks.core", __doc__.split("\n\n")[0])
    args = parse_store_arguments(parser, argv)
    sizes = QUICK if args.quick else FULL
    figures, notes = measure_each_store(
        args,
        lambda backend: measure_store(backend, sizes, args.repeat),
        lambda store, context, found, settings: write_json(
            store, context, found, settings, sizes, args.repeat
        ),
    )
    print()
    print_table(figures)
    missed = [f for f in figures if f.verdict == "MISS"]
    print(f"\nmedians of {args.repeat} repetitions; {len(missed)} target(s) missed")
    for note in notes:
        print(note)
    return 0


if __name__ == "__main__":
    sys.exit(main())

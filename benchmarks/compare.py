"""The comparison benchmark: durably and DBOS Transact side by side, same machine, same run.

For each store, each workload and each repetition, every engine's runner (benchmarks/runners,
one module per engine, same protocol) runs in a fresh process on a fresh store: SQLite, a new
file in a temp dir (WAL, synchronous=FULL); PostgreSQL, a new database on the server
(synchronous_commit=on), dropped after. The engines take turns going first, one repetition to
the next, so that drift on the machine hits both alike. The workloads (full sizes):

    W1           1,000 workflows x 3 trivial async steps, concurrency 32: workflows/s
    W2           200 workflows x 20 steps, concurrency 32: steps/s
    sequential   200 x 3 and 50 x 20 at concurrency 1; the line time/workflow = fixed +
                 steps x per_step through the two gives one step's checkpoint and one
                 workflow's start+finish (its start, claim and last commit)
    W3           500 workflows x 10 steps that sleep 10 ms and apply a keyed side effect; the
                 worker is SIGKILLed once half the effects are applied and a new one recovers:
                 seconds from its spawn to its result line (every run ended), runs lost,
                 effects applied twice, and its time to ready
    queue hop    an idle worker, in the client's process or another: enqueue -> the first step
                 runs, 30 hops 50 ms apart: median and p95
    queue        1,000 one-step workflows enqueued as fast as the client can to a running
                 worker (concurrency 32), first enqueue to last completion: workflows/s
    cold start   import of the engine -> open on the store, ready to run work
    floor        the store's own commit floor (benchmarks.core): single-row transactions

Throughput and latency include starting the runs (app.start, or the engine's equivalent).
Every figure is the median of --repeat repetitions (default 3).

    python -m benchmarks.compare                          # both stores, full sizes (make bench)
    python -m benchmarks.compare --quick --repeat 1       # a few seconds per workload
    python -m benchmarks.compare --stores sqlite --engines durably --only w1,hop
    python -m benchmarks.compare --fast                   # SQLite NORMAL, PostgreSQL off

The table goes to stdout (progress to stderr); the machine, date, both engines' versions,
durability settings and every sample to benchmarks/results/compare-latest.json
(compare-fast-latest.json with --fast, whose rows have no targets). An engine that is not
installed gets a note in its cells; a runner that fails stops the benchmark with its stderr.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit, urlunsplit

from benchmarks import core
from benchmarks.core import Load, Target
from benchmarks.environment import busy_note, load_average, run_context
from benchmarks.runners import effects

__all__ = ["main"]

ROOT = Path(__file__).parent.parent
ENGINES = ("durably", "dbos")
WORKLOADS = ("w1", "w2", "seq", "w3", "hop", "queue", "cold", "floor")
CONCURRENCY = core.CONCURRENCY
RUN_LIMIT = 900.0  # seconds any one runner process may take
INSTALL_HINT = "pip install -e '.[bench]'"


# -- what to measure ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Sizes:
    core: core.Sizes  # W1, W2, the sequential pair, the floor's commits
    w3: Load
    w3_sleep_ms: int
    hops: int
    queue: int  # one-step workflows


FULL = Sizes(core.FULL, Load(500, 10), w3_sleep_ms=10, hops=30, queue=1000)
QUICK = Sizes(core.QUICK, Load(100, 10), w3_sleep_ms=10, hops=10, queue=200)


def at_most(limit: float) -> Target:
    return Target(limit, higher_is_better=False)


TARGETS: dict[tuple[str, str], Target] = {  # durably's, in the durable mode only
    **core.TARGETS,  # per-step checkpoint, W1, W2
    ("workflow_fixed_ms", "sqlite"): at_most(0.4),
    ("workflow_fixed_ms", "postgres"): at_most(1.0),
    ("hop_in_process_ms", "sqlite"): at_most(2),
    ("hop_in_process_ms", "postgres"): at_most(3),
    ("hop_cross_process_ms", "sqlite"): at_most(2),
    ("hop_cross_process_ms", "postgres"): at_most(3),
    ("w3_recovery_s", "sqlite"): at_most(2),
    ("w3_recovery_s", "postgres"): at_most(2),
    ("w3_lost_runs", "sqlite"): at_most(0),
    ("w3_lost_runs", "postgres"): at_most(0),
    ("cold_start_ms", "sqlite"): at_most(150),
    ("cold_start_ms", "postgres"): at_most(150),
}


@dataclass(frozen=True, slots=True)
class Spec:
    """How a figure reads in the table."""

    workload: str
    unit: str
    higher_is_better: bool


# -- engines and stores --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Engine:
    name: str
    version: str | None
    missing: str | None  # why it cannot run here; None if it can

    @property
    def runner(self) -> str:
        return f"benchmarks.runners.{self.name}_runner"


def find_engine(name: str) -> Engine:
    runner = f"benchmarks.runners.{name}_runner"
    if importlib.util.find_spec(name) is None:
        return Engine(name, None, f"not installed ({INSTALL_HINT})")
    try:
        version: str | None = metadata.version(name)
    except metadata.PackageNotFoundError:
        version = None
    if importlib.util.find_spec(runner) is None:
        return Engine(name, version, f"no runner ({runner.replace('.', '/')}.py)")
    return Engine(name, version, None)


@dataclass(frozen=True, slots=True)
class Store:
    name: str  # sqlite | postgres: the targets' key
    label: str  # in the table: the name, and the faster durability mode if asked
    fresh: Callable[[str], AbstractContextManager[str]]  # engine -> the URL of an empty store
    backend: core.Backend  # its commit floor and durability settings


def sqlite_store(fast: bool) -> Store:
    label = "sqlite (synchronous=NORMAL)" if fast else "sqlite"
    return Store("sqlite", label, fresh_sqlite, core.sqlite_backend())


def postgres_store(server: str, fast: bool) -> Store:
    label = "postgres (synchronous_commit=off)" if fast else "postgres"
    return Store("postgres", label, lambda _: fresh_database(server), core.postgres_backend(server))


@contextmanager
def fresh_sqlite(engine: str) -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="bench-compare-") as tmp:
        yield f"sqlite:///{tmp}/{engine}.db"  # tmp is absolute: sqlite:////tmp/...


@contextmanager
def fresh_database(server: str) -> Iterator[str]:
    """A new database on the server; dropped afterwards, with any the engine made beside it
    under the same name (a system database, say)."""
    import psycopg
    from psycopg import sql

    name = f"bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server, autocommit=True) as db:
        db.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield urlunsplit(urlsplit(server)._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(server, autocommit=True) as db:
            made = db.execute(
                "SELECT datname FROM pg_database WHERE datname LIKE %s", (f"{name}%",)
            ).fetchall()
            for (database,) in made:
                db.execute(
                    sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(database))
                )


def durability(store: Store, fast: bool) -> dict[str, Any]:
    """The store's settings as the runners use them (set per connection by each runner)."""
    settings = store.backend.settings()
    if store.name == "sqlite":
        return {**settings, "synchronous": "NORMAL" if fast else "FULL"}
    return {**settings, "synchronous_commit": "off" if fast else "on"}


# -- running the runners -------------------------------------------------------------------


class RunnerFailed(Exception):
    """A runner exited non-zero, or said something the protocol does not allow."""

    def __init__(self, argv: Sequence[str], why: str, stderr: str) -> None:
        super().__init__(why)
        self.argv, self.why, self.stderr = list(argv), why, stderr

    def report(self) -> str:
        return (
            f"benchmark failed: {' '.join(self.argv)}\n  {self.why}\n"
            f"--- its stderr ---\n{self.stderr.rstrip()}\n--- end of its stderr ---"
        )


def runner_argv(
    plan: Plan, engine: Engine, command: str, url: str, options: dict[str, object]
) -> list[str]:
    argv = [sys.executable, "-m", engine.runner, command, "--url", url]
    for name, value in options.items():
        argv += [f"--{name}", str(value)]
    return argv + (["--fast"] if plan.fast else [])


class Child:
    """A runner process whose stdout is read line by line as it comes (stderr to a file)."""

    def __init__(self, argv: list[str]) -> None:
        self.argv = argv
        self._stderr: IO[str] = tempfile.TemporaryFile("w+")  # noqa: SIM115 (see close)
        self.process = subprocess.Popen(
            argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=self._stderr, text=True
        )

    def json_line(self, key: str, limit: float) -> dict[str, Any]:
        """The first stdout line that is a JSON object with `key`, within `limit` seconds."""
        assert self.process.stdout is not None
        timer = threading.Timer(limit, self.process.kill)
        timer.start()
        try:
            for line in self.process.stdout:
                if (found := _json_object(line)) is not None and key in found:
                    return found
        finally:
            timer.cancel()
        code = self.process.wait()
        why = f"exited with {code} before printing {{{key!r}: ...}}"
        raise self.failed(f"{why} (killed if still running after {limit:g} s)")

    def finish(self, limit: float) -> None:
        try:
            code = self.process.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            self.kill()
            raise self.failed(f"did not exit within {limit:g} s of its result") from None
        if code != 0:
            raise self.failed(f"exited with {code}")

    def kill(self) -> None:
        self.process.kill()  # SIGKILL
        self.process.wait()

    def failed(self, why: str) -> RunnerFailed:
        self._stderr.seek(0)
        return RunnerFailed(self.argv, why, self._stderr.read())

    def close(self) -> None:
        if self.process.poll() is None:
            self.kill()
        if self.process.stdout is not None:
            self.process.stdout.close()
        self._stderr.close()


def _json_object(line: str) -> dict[str, Any] | None:
    try:
        found = json.loads(line)
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


@dataclass(slots=True)
class Plan:
    engines: list[Engine]  # those asked for, in the order given
    sizes: Sizes
    repeat: int
    fast: bool
    runs: list[dict[str, Any]] = field(default_factory=list)  # every runner's output
    at: tuple[str, int] = ("", 0)  # the workload and repetition under way, for `runs`

    def order(self, repetition: int) -> list[Engine]:
        """The engines that can run, the first one alternating between repetitions."""
        able = [engine for engine in self.engines if engine.missing is None]
        return able if repetition % 2 == 0 else able[::-1]

    def run(
        self, store: Store, engine: Engine, command: str, url: str, **options: object
    ) -> dict[str, Any]:
        """Run one runner command to its end; its JSON line."""
        argv = runner_argv(self, engine, command, url, options)
        try:
            done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=RUN_LIMIT)
        except subprocess.TimeoutExpired as exc:
            stderr = exc.stderr.decode() if isinstance(exc.stderr, bytes) else exc.stderr or ""
            raise RunnerFailed(argv, f"still running after {RUN_LIMIT:g} s", stderr) from None
        if done.returncode != 0:
            raise RunnerFailed(argv, f"exited with {done.returncode}", done.stderr)
        lines = done.stdout.strip().splitlines()
        output = _json_object(lines[-1]) if lines else None
        if output is None:
            raise RunnerFailed(argv, "its last stdout line is not a JSON object", done.stderr)
        return self.record(store, engine, command, options, output)

    def record(
        self,
        store: Store,
        engine: Engine,
        command: str,
        options: dict[str, object],
        output: dict[str, Any],
    ) -> dict[str, Any]:
        self.runs.append(
            {
                "store": store.label,
                "workload": self.at[0],
                "repetition": self.at[1],
                "engine": engine.name,
                "command": command,
                "options": {name: str(value) for name, value in options.items()},
                "output": output,
            }
        )
        return output


# -- repetitions and rows ------------------------------------------------------------------

Fresh = Callable[[], AbstractContextManager[str]]  # a new empty store of the engine's: its URL
Samples = dict[str, dict[str, list[float]]]  # figure key -> engine -> one value per repetition


def repeated(
    plan: Plan, store: Store, label: str, once: Callable[[Engine, Fresh], dict[str, float | None]]
) -> Samples:
    """`once` for every repetition and engine, the engines taking turns to go first."""
    samples: Samples = defaultdict(lambda: defaultdict(list))
    for repetition in range(plan.repeat):
        for engine in plan.order(repetition):
            plan.at = (label, repetition + 1)
            values = once(engine, functools.partial(store.fresh, engine.name))
            for key, value in values.items():
                if value is not None:  # the engine cannot tell this figure apart
                    samples[key][engine.name].append(value)
            shown = ", ".join(f"{k} {core._number(v)}" for k, v in values.items() if v is not None)
            progress(store, f"{label} {repetition + 1}/{plan.repeat} {engine.name}: {shown}")
    return samples


@dataclass(slots=True)
class Row:
    """One figure for every engine: its samples (a core.Figure) or why there are none."""

    key: str
    spec: Spec
    store: str
    cells: dict[str, core.Figure | str]

    def ratio(self) -> float | None:
        """How many times better durably is than dbos, in the figure's direction."""
        ours, theirs = self.cells.get("durably"), self.cells.get("dbos")
        if not isinstance(ours, core.Figure) or not isinstance(theirs, core.Figure):
            return None
        if ours.median <= 0 or theirs.median <= 0:  # nothing to divide (or a fit gone wrong)
            return None
        better = ours.median / theirs.median
        return better if self.spec.higher_is_better else 1 / better

    @property
    def durably(self) -> core.Figure | None:
        found = self.cells.get("durably")
        return found if isinstance(found, core.Figure) else None

    def as_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "workload": self.spec.workload,
            "store": self.store,
            "unit": self.spec.unit,
            "higher_is_better": self.spec.higher_is_better,
            "ratio": self.ratio(),
            "engines": {engine: cell_json(cell) for engine, cell in self.cells.items()},
        }


def cell_json(cell: core.Figure | str) -> dict[str, Any]:
    if isinstance(cell, str):
        return {"missing": cell}
    return {
        "median": cell.median,
        "min": min(cell.samples),
        "max": max(cell.samples),
        "samples": cell.samples,
        "target": None if cell.target is None else str(cell.target),
        "verdict": cell.verdict or None,
    }


def rows(plan: Plan, store: Store, samples: Samples, specs: dict[str, Spec]) -> list[Row]:
    return [row(plan, store, key, spec, samples.get(key, {})) for key, spec in specs.items()]


def row(plan: Plan, store: Store, key: str, spec: Spec, by_engine: dict[str, list[float]]) -> Row:
    asked = {engine.name: engine for engine in plan.engines}
    cells: dict[str, core.Figure | str] = {}
    for name in ENGINES:
        if name not in asked:
            cells[name] = "not run"
        elif (missing := asked[name].missing) is not None:
            cells[name] = missing
        elif not by_engine.get(name):
            cells[name] = "n/a"  # the engine's runner cannot tell this figure apart
        else:
            target = None if plan.fast or name != "durably" else TARGETS.get((key, store.name))
            cells[name] = core.Figure(
                key, spec.workload, store.label, spec.unit, by_engine[name], target
            )
    return Row(key, spec, store.label, cells)


# -- the workloads -------------------------------------------------------------------------


def run_throughput(
    plan: Plan, store: Store, engine: Engine, url: str, load: Load, concurrency: int
) -> dict[str, Any]:
    output = plan.run(
        store,
        engine,
        "throughput",
        url,
        workflows=load.workflows,
        steps=load.steps,
        concurrency=concurrency,
    )
    if output.get("completed") != load.workflows:
        raise RunnerFailed([engine.runner, "throughput"], f"completed: {output}", "")
    return output


def measure_w1(plan: Plan, store: Store) -> list[Row]:
    load = plan.sizes.core.w1

    def once(engine: Engine, fresh: Fresh) -> dict[str, float | None]:
        with fresh() as url:
            output = run_throughput(plan, store, engine, url, load, CONCURRENCY)
        start = output["start_seconds"]
        return {
            "w1_workflows_per_s": load.workflows / output["total_seconds"],
            "start_ms": None if start is None else 1000 * start / load.workflows,
        }

    workload = f"W1 ({load}, c={CONCURRENCY})"
    return rows(
        plan,
        store,
        repeated(plan, store, "W1", once),
        {
            "w1_workflows_per_s": Spec(workload, "workflows/s", higher_is_better=True),
            "start_ms": Spec("start of one run (during W1)", "ms", higher_is_better=False),
        },
    )


def measure_w2(plan: Plan, store: Store) -> list[Row]:
    load = plan.sizes.core.w2

    def once(engine: Engine, fresh: Fresh) -> dict[str, float | None]:
        with fresh() as url:
            output = run_throughput(plan, store, engine, url, load, CONCURRENCY)
        return {"w2_steps_per_s": load.workflows * load.steps / output["total_seconds"]}

    spec = Spec(f"W2 ({load}, c={CONCURRENCY})", "steps/s", higher_is_better=True)
    return rows(plan, store, repeated(plan, store, "W2", once), {"w2_steps_per_s": spec})


def measure_sequential(plan: Plan, store: Store) -> list[Row]:
    """Per-step and fixed cost, one workflow at a time, from a line through two loads."""
    short, long = plan.sizes.core.short, plan.sizes.core.long

    def once(engine: Engine, fresh: Fresh) -> dict[str, float | None]:
        ms = []
        for load in (short, long):
            with fresh() as url:
                output = run_throughput(plan, store, engine, url, load, concurrency=1)
            ms.append(1000 * output["total_seconds"] / load.workflows)
        per_step = (ms[1] - ms[0]) / (long.steps - short.steps)
        return {
            "seq_short_ms": ms[0],
            "seq_long_ms": ms[1],
            "step_checkpoint_ms": per_step,
            "workflow_fixed_ms": ms[0] - short.steps * per_step,
        }

    lower = False
    return rows(
        plan,
        store,
        repeated(plan, store, "sequential", once),
        {
            "seq_short_ms": Spec(f"sequential ({short}, c=1)", "ms/workflow", lower),
            "seq_long_ms": Spec(f"sequential ({long}, c=1)", "ms/workflow", lower),
            "step_checkpoint_ms": Spec("per-step checkpoint (fit)", "ms/step", lower),
            "workflow_fixed_ms": Spec("workflow start+finish (fit)", "ms/workflow", lower),
        },
    )


W3_START_LIMIT = 600.0  # seconds to start every run durably
W3_HALF_LIMIT = 600.0  # seconds to apply half of the effects
W3_RECOVER_LIMIT = 900.0  # seconds from the new process's spawn to its result


def measure_w3(plan: Plan, store: Store) -> list[Row]:
    load, sleep_ms = plan.sizes.w3, plan.sizes.w3_sleep_ms

    def once(engine: Engine, fresh: Fresh) -> dict[str, float | None]:
        with fresh() as url, tempfile.TemporaryDirectory(prefix="bench-effects-") as tmp:
            sink = Path(tmp) / "effects.db"
            effects.create(sink)
            options: dict[str, object] = {
                "workflows": load.workflows,
                "steps": load.steps,
                "sleep-ms": sleep_ms,
                "concurrency": CONCURRENCY,
                "effects": sink,
            }
            at_kill = work_until_half(plan, engine, url, options, sink, load)
            began = time.perf_counter()
            output = recover(plan, store, engine, url, options)
            recovery = time.perf_counter() - began
            output["effects_at_kill"] = at_kill
            output["effects_applied"] = applied = effects.applied(sink)
            duplicates = effects.duplicates(sink)
        if output["completed"] == load.workflows and applied != load.workflows * load.steps:
            why = f"every run completed, yet {applied} of {load.workflows * load.steps} effects"
            raise RunnerFailed([engine.runner, "w3-recover"], why, "")
        return {
            "w3_recovery_s": recovery,
            "w3_lost_runs": load.workflows - output["completed"],
            "w3_duplicate_effects": duplicates,
            "w3_ready_s": output["ready_seconds"],
        }

    lower = False
    workload = f"W3 ({load}, {sleep_ms} ms each, SIGKILL at 50%)"
    return rows(
        plan,
        store,
        repeated(plan, store, "W3", once),
        {
            "w3_recovery_s": Spec(f"{workload}: recovery", "s", lower),
            "w3_lost_runs": Spec("W3: runs lost", "runs", lower),
            "w3_duplicate_effects": Spec("W3: effects applied twice", "effects", lower),
            "w3_ready_s": Spec("W3: new process ready", "s", lower),
        },
    )


def work_until_half(
    plan: Plan, engine: Engine, url: str, options: dict[str, object], sink: Path, load: Load
) -> int:
    """Run w3-work until half of the effects are applied, then SIGKILL it; effects by then."""
    child = Child(runner_argv(plan, engine, "w3-work", url, options))
    half = load.workflows * load.steps // 2
    try:
        started = child.json_line("started", W3_START_LIMIT)
        if started["started"] != load.workflows:
            raise child.failed(f"started {started['started']} runs, not {load.workflows}")
        deadline = time.monotonic() + W3_HALF_LIMIT
        while (applied := effects.applied(sink)) < half:
            if child.process.poll() is not None:
                raise child.failed(f"exited with {child.process.returncode} before being killed")
            if time.monotonic() > deadline:
                raise child.failed(f"{applied} of {half} effects after {W3_HALF_LIMIT:g} s")
            time.sleep(0.002)
        child.kill()
        return applied
    finally:
        child.close()


def recover(
    plan: Plan, store: Store, engine: Engine, url: str, options: dict[str, object]
) -> dict[str, Any]:
    """w3-recover's result line, once it has exited cleanly."""
    child = Child(runner_argv(plan, engine, "w3-recover", url, options))
    try:
        output = child.json_line("completed", W3_RECOVER_LIMIT)
        child.finish(limit=60)
    finally:
        child.close()
    return plan.record(store, engine, "w3-recover", options, output)


def measure_hop(plan: Plan, store: Store) -> list[Row]:
    hops = plan.sizes.hops
    modes = ("in-process", "cross-process")

    def once(engine: Engine, fresh: Fresh) -> dict[str, float | None]:
        values: dict[str, float | None] = {}
        for mode in modes:
            with fresh() as url:
                output = plan.run(store, engine, "queue-hop", url, hops=hops, mode=mode)
            hop_ms = output["hop_ms"]
            if len(hop_ms) != hops:
                raise RunnerFailed([engine.runner, "queue-hop"], f"{len(hop_ms)} hops", "")
            key = f"hop_{mode.replace('-', '_')}"
            values[f"{key}_ms"] = statistics.median(hop_ms)
            values[f"{key}_p95_ms"] = p95(hop_ms)
        return values

    specs: dict[str, Spec] = {}
    for mode in modes:
        key, workload = f"hop_{mode.replace('-', '_')}", f"queue hop, idle, {mode} ({hops} hops)"
        specs[f"{key}_ms"] = Spec(workload, "ms (median)", higher_is_better=False)
        specs[f"{key}_p95_ms"] = Spec(workload, "ms (p95)", higher_is_better=False)
    return rows(plan, store, repeated(plan, store, "queue hop", once), specs)


def p95(values: Sequence[float]) -> float:
    return (
        statistics.quantiles(values, n=20, method="inclusive")[18] if len(values) > 1 else values[0]
    )


def measure_queue(plan: Plan, store: Store) -> list[Row]:
    workflows = plan.sizes.queue

    def once(engine: Engine, fresh: Fresh) -> dict[str, float | None]:
        with fresh() as url:
            output = plan.run(
                store, engine, "queue-throughput", url, workflows=workflows, concurrency=CONCURRENCY
            )
        if output.get("completed") != workflows:
            raise RunnerFailed([engine.runner, "queue-throughput"], f"completed: {output}", "")
        return {"queue_workflows_per_s": workflows / output["total_seconds"]}

    spec = Spec(
        f"queue ({workflows:,} one-step wf, c={CONCURRENCY})", "workflows/s", higher_is_better=True
    )
    return rows(plan, store, repeated(plan, store, "queue", once), {"queue_workflows_per_s": spec})


def measure_cold_start(plan: Plan, store: Store) -> list[Row]:
    def once(engine: Engine, fresh: Fresh) -> dict[str, float | None]:
        with fresh() as url:
            output = plan.run(store, engine, "cold-start", url)
        return {"cold_start_ms": 1000 * output["ready_seconds"]}

    spec = Spec("cold start (import -> ready)", "ms", higher_is_better=False)
    return rows(plan, store, repeated(plan, store, "cold start", once), {"cold_start_ms": spec})


MEASURES: dict[str, Callable[[Plan, Store], list[Row]]] = {
    "w1": measure_w1,
    "w2": measure_w2,
    "seq": measure_sequential,
    "w3": measure_w3,
    "hop": measure_hop,
    "queue": measure_queue,
    "cold": measure_cold_start,
}


def over_floor(
    plan: Plan, store: Store, figures: Sequence[Row], floors: Sequence[core.Figure]
) -> Row:
    """How many of the store's own commits one step's checkpoint costs, engine by engine."""
    fitted = next(f for f in figures if f.key == "step_checkpoint_ms")
    floor = next(f for f in floors if f.key == "floor_commit_ms")
    samples = {
        engine: [cell.median / floor.median]
        for engine, cell in fitted.cells.items()
        if isinstance(cell, core.Figure)
    }
    spec = Spec("per-step checkpoint / floor commit", "x", higher_is_better=False)
    return row(plan, store, "step_over_floor", spec, samples)


def warm_up(plan: Plan, store: Store) -> None:
    """One cold start per engine, not recorded: bytecode compiled, files in the page cache."""
    for engine in plan.order(0):
        with store.fresh(engine.name) as url:
            subprocess.run(
                runner_argv(plan, engine, "cold-start", url, {}),
                cwd=ROOT,
                capture_output=True,
                timeout=RUN_LIMIT,
            )


def measure_store(
    plan: Plan, store: Store, only: Sequence[str]
) -> tuple[list[Row], list[core.Figure]]:
    warm_up(plan, store)
    figures = [
        row
        for name in WORKLOADS
        if name in only and name in MEASURES
        for row in MEASURES[name](plan, store)
    ]
    if "floor" not in only:
        return figures, []
    floors = core.measure_floor(store.backend, plan.sizes.core.floor_commits, plan.repeat)
    if "seq" in only:
        figures.append(over_floor(plan, store, figures, floors))
    return figures, floors


# -- reporting -----------------------------------------------------------------------------


def progress(store: Store, message: str) -> None:
    print(f"  {store.label}: {message}", file=sys.stderr, flush=True)


def print_table(figures: Sequence[Row]) -> None:
    header = ("workload", "store", "unit", *ENGINES, "ratio", "durably target", "met")
    table: list[Sequence[str]] = [header]
    for f in figures:
        ratio, ours = f.ratio(), f.durably
        target = None if ours is None else ours.target
        table.append(
            (
                f.spec.workload,
                f.store,
                f.spec.unit,
                *(cell_text(f.cells[engine]) for engine in ENGINES),
                "" if ratio is None else f"{ratio:.2f}x",
                "" if target is None else str(target),
                "" if ours is None else ours.verdict,
            )
        )
    core.print_columns(table, right={3, 4, 5, 6})


def cell_text(cell: core.Figure | str) -> str:
    return core._number(cell.median) if isinstance(cell, core.Figure) else cell


def print_floors(floors: Sequence[core.Figure]) -> None:
    for f in floors:
        if f.key == "floor_commit_ms":
            per_s = 1000 / f.median
            print(f"{f.workload}, {f.store}: {core._number(f.median)} ms/commit ({per_s:,.0f}/s)")


def write_json(
    plan: Plan,
    context: dict[str, Any],
    figures: Sequence[Row],
    floors: Sequence[core.Figure],
    settings: dict[str, Any],
    notes: Sequence[str],
) -> Path:
    sizes = plan.sizes
    report = {
        "benchmark": "compare",
        "mode": "fast" if plan.fast else "durable",
        **context,
        "load_average_after": load_average(),
        "engines": {
            engine.name: {
                "version": engine.version,
                "runner": engine.runner,
                "missing": engine.missing,
            }
            for engine in plan.engines
        },
        "durability": settings,
        "sizes": {
            "w1": str(sizes.core.w1),
            "w2": str(sizes.core.w2),
            "sequential": [str(sizes.core.short), str(sizes.core.long)],
            "w3": f"{sizes.w3}, {sizes.w3_sleep_ms} ms sleep per step",
            "hops": sizes.hops,
            "queue": sizes.queue,
            "floor_commits": sizes.core.floor_commits,
            "concurrency": CONCURRENCY,
            "repeat": plan.repeat,
        },
        "figures": [f.as_json() for f in figures],
        "floors": [{**f.as_json(), "store": f.store} for f in floors],
        "runs": plan.runs,
        "notes": list(notes),
    }
    core.RESULTS.mkdir(parents=True, exist_ok=True)
    path = core.RESULTS / ("compare-fast-latest.json" if plan.fast else "compare-latest.json")
    partial = path.with_name(path.name + ".tmp")
    partial.write_text(json.dumps(report, indent=2) + "\n")
    partial.replace(path)
    return path


# -- the command ---------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = core.store_arguments("python -m benchmarks.compare", __doc__.split("\n\n")[0])
    parser.add_argument(
        "--engines", default=",".join(ENGINES), help="comma-separated: durably,dbos"
    )
    parser.add_argument(
        "--fast",
        action="store_true",
        help="SQLite synchronous=NORMAL, PostgreSQL synchronous_commit=off",
    )
    parser.add_argument(
        "--only", default=",".join(WORKLOADS), help=f"comma-separated: {','.join(WORKLOADS)}"
    )
    args = core.parse_store_arguments(parser, argv)
    for name, known in (("engines", ENGINES), ("only", WORKLOADS)):
        chosen = [item.strip() for item in getattr(args, name).split(",") if item.strip()]
        if unknown := sorted(set(chosen) - set(known)):
            parser.error(f"--{name}: unknown {', '.join(unknown)} (known: {', '.join(known)})")
        setattr(args, name, chosen)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    plan = Plan(
        [find_engine(name) for name in args.engines],
        QUICK if args.quick else FULL,
        args.repeat,
        args.fast,
    )
    context = run_context()
    notes = [f"{e.name}: {e.missing}" for e in plan.engines if e.missing is not None]
    if busy := busy_note():
        notes.append(busy)
    for note in notes:
        print(note, file=sys.stderr)
    figures: list[Row] = []
    floors: list[core.Figure] = []
    settings: dict[str, Any] = {}
    try:
        for name in args.stores:
            if name == "postgres" and (problem := core.postgres_problem(args.postgres_url)):
                notes.append(
                    f"PostgreSQL rows skipped: {args.postgres_url} is unreachable ({problem})"
                )
                print(notes[-1], file=sys.stderr)
                continue
            store = (
                sqlite_store(args.fast)
                if name == "sqlite"
                else postgres_store(args.postgres_url, args.fast)
            )
            store_figures, store_floors = measure_store(plan, store, args.only)
            figures += store_figures
            floors += store_floors
            settings[name] = durability(store, args.fast)
    except RunnerFailed as failure:
        print(failure.report(), file=sys.stderr)
        return 1
    path = write_json(plan, context, figures, floors, settings, notes)
    print()
    print_table(figures)
    print_floors(floors)
    missed = [f for f in figures if f.durably is not None and f.durably.verdict == "MISS"]
    print(f"\nmedians of {plan.repeat} repetition(s); {len(missed)} durably target(s) missed")
    print("ratio: how many times better durably is than dbos, in each row's direction")
    if plan.fast:
        print("the faster durability mode (SQLite NORMAL, PostgreSQL off): no targets;")
        print("the floor is the durable one (SQLite FULL, PostgreSQL on)")
    for note in notes:
        print(note)
    print(f"every sample: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The scaling benchmark: whether durably's costs stay flat as histories, stores and the number
of worker processes grow.

On SQLite (a fresh file in a temp dir: WAL, synchronous=FULL) and on PostgreSQL
(synchronous_commit=on; a fresh schema per measurement, dropped after), as benchmarks.core
sets them up, it measures (full sizes; --quick shrinks each):

    history    a workflow of 10, 100, 1,000 and 10,000 trivial async steps, run alone
               (app.run_until_idle, concurrency 1); the shorter ones as many times as make
               1,000 steps, one after the other. Per step: the time from the first to the
               last step_started event of each run (durably's own timestamps, read from the
               history), over the steps in between, summed over the runs; each interval
               holds one step body and its one checkpoint commit. Flatness: the ratio of the
               10,000-step per-step cost to the 10-step one, and within the 10,000-step run,
               the per-step cost of its last 1,000 steps over that of its first 1,000 (the
               same run, so drift between runs does not enter). Its run_until_idle is timed
               whole too (worker start and stop, claim, steps, final commit).
    pickup     a workflow of 10,000 + 100 steps run by a `durably worker` child process
               (lease 1s), whose step 10,001 SIGKILLs the process in its body, after its
               start was committed: the run holds 10,000 completed steps (20,003 events) and
               an attempt of unknown outcome. Once the dead worker's lease has expired, a
               worker in this process (run_until_idle, concurrency 1) takes the run over.
               Timed: its store.claim call (the takeover, loading the whole history); the
               replay, from that call's return until the body of step 10,001 starts again
               (folding the history, replaying 10,000 steps, committing the new attempt's
               start); both together from the worker's start; and the 100 remaining steps,
               per step as in `history`.
    stores     a store holding 0, 10,000 or 100,000 finished runs of 3 completed steps (9
               events each), or a backlog of 100,000 pending runs of a workflow the worker
               does not know. The rows are copies of a run durably made in the same store,
               bulk-inserted under fresh ids at earlier times (each fill is counted and
               sampled back through store.get_run / store.history; once per store, copies
               of a run stopped after its third step are replayed by a worker, which must
               finish them without running a step). On each store: the idle queue hop, from
               app.start to the body of the run's first step starting (time.time() in both,
               a worker of this app idle in a thread; median of 50 hops); then store.claim
               of one due run (start a run, claim with limit 32 as an idle worker does,
               repeat: median of 200 claims).
    processes  1, 2 and 4 `durably worker` processes (concurrency 32 each) on one store, with
               2,000 workflows x 3 trivial steps started beforehand: from spawning the first
               process until no run is pending or running (the store polled every 10 ms),
               nothing subtracted. Startup, from a process's spawn until it logs that it has
               started (Python up, app imported, store opened), is reported on its own.

Every figure is the median of --repeat repetitions (default 3), each on a fresh store; the
medians over hops and claims are taken within each repetition. On PostgreSQL the filled
tables are vacuumed and analysed before timing (as autovacuum would have done to a store that
grew that large); SQLite gets no ANALYZE, as durably never runs one.

    python -m benchmarks.scaling                        # both stores, full sizes
    python -m benchmarks.scaling --quick --repeat 1     # small sizes
    python -m benchmarks.scaling --stores sqlite
    python -m benchmarks.scaling --postgres-url postgresql://user@host:5432/db

The table goes to stdout (progress to stderr); the figures, machine, Python version, date
and durability settings to benchmarks/results/scaling-<store>-latest.json.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Protocol, cast

import durably
from benchmarks.core import (
    CONCURRENCY,
    RESULTS,
    Backend,
    BenchmarkError,
    Figure,
    Load,
    chain_app,
    check_completed,
    figure,
    measure_each_store,
    parse_store_arguments,
    print_columns,
    progress,
    store_arguments,
    warm_up,
)
from benchmarks.core import _number as number
from benchmarks.environment import load_average
from durably.stores import Claim, Store, open_store
from durably.stores.rows import EVENT_COLUMNS, RUN_COLUMNS, event_of, run_of
from durably.stores.sqlite import SQLiteStore

__all__ = ["main", "worker_app"]

ROOT = Path(__file__).resolve().parent.parent
WORKER_APP = "benchmarks.scaling_app:app"  # what the `durably worker` processes run
STOP_AT = "DURABLY_BENCH_STOP_AT"  # env: the long_chain step input that kills the process
READY = "started (concurrency"  # what a worker logs once it has opened its store
CHILD_TIMEOUT = 600.0  # seconds; a worker process taking longer is a failure
HISTORY_STEPS_MIN = 1_000  # shorter histories are run this many steps' worth, one at a time


# -- what to measure ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Sizes:
    histories: tuple[int, ...]  # steps of the one workflow run alone, ascending
    pickup_done: int  # completed steps when the first worker dies
    pickup_left: int  # steps after those
    finished: tuple[int, ...]  # finished runs in the store while claims are timed
    backlog: int  # pending runs of a workflow the worker does not know
    hops: int
    claims: int
    processes: tuple[int, ...]
    load: Load  # started before the worker processes spawn


FULL = Sizes(
    histories=(10, 100, 1_000, 10_000),
    pickup_done=10_000,
    pickup_left=100,
    finished=(0, 10_000, 100_000),
    backlog=100_000,
    hops=50,
    claims=200,
    processes=(1, 2, 4),
    load=Load(2_000, 3),
)
QUICK = Sizes(
    histories=(10, 100, 1_000),
    pickup_done=1_000,
    pickup_left=20,
    finished=(0, 2_000, 10_000),
    backlog=10_000,
    hops=20,
    claims=50,
    processes=(1, 2, 4),
    load=Load(300, 3),
)

Rows = Iterable[tuple[str, str, str, list[float]]]  # key, workload, unit, samples


def figures_of(store: str, rows: Rows) -> list[Figure]:
    return [figure(key, workload, store, unit, samples) for key, workload, unit, samples in rows]


# -- long histories -------------------------------------------------------------------------


def measure_histories(backend: Backend, sizes: Sizes, repeat: int) -> list[Figure]:
    """Per-step cost of a workflow run alone, for each history length."""
    per_step: dict[int, list[float]] = {steps: [] for steps in sizes.histories}
    smallest, largest = sizes.histories[0], sizes.histories[-1]
    whole: list[float] = []
    ratios: list[float] = []
    drifts: list[float] = []
    for rep in range(repeat):
        for steps in sizes.histories:
            history = time_history(backend, steps, runs=-(-HISTORY_STEPS_MIN // steps))
            per_step[steps].append(history.step_ms)
        whole.append(history.run_seconds)  # of the largest, run last, alone
        drifts.append(history.drift)
        ratios.append(per_step[largest][-1] / per_step[smallest][-1])
        costs = ", ".join(f"{steps:,}: {ms[-1]:.3f}" for steps, ms in per_step.items())
        progress(backend, f"history {rep + 1}/{repeat}: ms/step {costs}")
    tenth = f"{largest // 10:,}"
    return figures_of(
        backend.name,
        [
            *((f"history_{n}_step_ms", f"history: 1 wf x {n:,} steps, per step", "ms/step", ms)
              for n, ms in per_step.items()),
            ("history_step_ratio", f"history: per step, {largest:,} / {smallest} steps", "x",
             ratios),
            ("history_drift", f"history: {largest:,} steps, last {tenth} / first {tenth}", "x",
             drifts),
            (f"history_{largest}_run_s", f"history: 1 wf x {largest:,} steps, whole run", "s",
             whole),
        ],
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class History:
    step_ms: float  # over every step of every run
    run_seconds: float  # run_until_idle of all the runs
    drift: float  # per-step cost over the last tenth of the last run / over its first tenth


def time_history(backend: Backend, steps: int, runs: int) -> History:
    """`runs` workflows of `steps` steps, one at a time (concurrency 1), on a fresh store."""
    with backend.fresh() as url:
        app, chain = chain_app(url, steps)
        try:
            handles = [app.start(chain, i) for i in range(runs)]
            began = time.perf_counter()
            finished = app.run_until_idle(concurrency=1)
            seconds = time.perf_counter() - began
            check_completed(app, handles, Load(runs, steps), finished)
            starts = [step_starts(app.history(handle.id)) for handle in handles]
        finally:
            app.close()
    total = sum((each[-1] - each[0]).total_seconds() for each in starts)
    last, tenth = starts[-1], max(1, steps // 10)
    return History(
        step_ms=1000 * total / sum(len(each) - 1 for each in starts),
        run_seconds=seconds,
        drift=ms_per_step(last[-tenth - 1 :]) / ms_per_step(last[: tenth + 1]),
    )


def step_starts(events: Sequence[durably.Event], *, after_seq: int = 0) -> list[datetime]:
    """When each step_started event after `after_seq` was written (durably's clock)."""
    starts = [
        event.at
        for event in events
        if event.kind is durably.EventKind.STEP_STARTED and event.seq > after_seq
    ]
    if len(starts) < 2:
        raise BenchmarkError(f"{len(starts)} step(s) started after event #{after_seq}")
    return starts


def ms_per_step(starts: Sequence[datetime]) -> float:
    return 1000 * (starts[-1] - starts[0]).total_seconds() / (len(starts) - 1)


# -- picking up a long history --------------------------------------------------------------


def add_long_chain(
    app: durably.App, *, stop_at: int | None, on_stop: Callable[[], None]
) -> durably.Workflow:
    """Register long_chain(x, steps): `steps` trivial steps in a row, each adding one; the step
    given x == stop_at calls on_stop() first."""

    @app.step
    async def add_one_or_stop(x: int) -> int:
        if x == stop_at:
            on_stop()
        return x + 1

    @app.workflow(name="long_chain")
    async def long_chain(x: int, steps: int) -> int:
        for _ in range(steps):
            x = await add_one_or_stop(x)
        return x

    return long_chain


def worker_app(url: str, *, stop_at: int | None) -> durably.App:
    """The app of the `durably worker` processes: core's chain of 3 steps (chain_3), and
    long_chain, whose step given x == stop_at kills the process as a crash would."""
    app, _ = chain_app(url, 3)
    add_long_chain(app, stop_at=stop_at, on_stop=lambda: os.kill(os.getpid(), signal.SIGKILL))
    return app


class ClaimTimer:
    """A store whose claim calls are timed; every other call passes straight through."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.calls: list[tuple[float, float, int]] = []  # perf_counter at call, at return; runs

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def claim(self, *args: Any, **kwargs: Any) -> list[Claim]:
        began = time.perf_counter()
        claims = self._store.claim(*args, **kwargs)
        self.calls.append((began, time.perf_counter(), len(claims)))
        return claims


@dataclass(frozen=True, slots=True)
class Pickup:
    claim_ms: float  # the store.claim that took the run over
    replay_ms: float  # from that claim's return to the next new step's body
    total_ms: float  # from the worker's start to the next new step's body
    step_ms: float  # per remaining step
    events: int  # the run held when the new worker took it over


def measure_pickup(backend: Backend, sizes: Sizes, repeat: int) -> list[Figure]:
    """A worker taking over a run with a long history after its first worker died."""
    done, left = sizes.pickup_done, sizes.pickup_left
    pickups: list[Pickup] = []
    for rep in range(repeat):
        with backend.fresh() as url:
            pickups.append(time_pickup(url, done, left))
        last = pickups[-1]
        progress(
            backend,
            f"pickup {rep + 1}/{repeat}: claim {last.claim_ms:.1f} ms, replay "
            f"{last.replay_ms:.1f} ms, then {last.step_ms:.3f} ms/step",
        )
    where, events = f"pickup after {done:,} steps", pickups[0].events
    return figures_of(
        backend.name,
        [
            ("pickup_claim_ms", f"{where}: claim ({events:,} events)", "ms",
             [p.claim_ms for p in pickups]),
            ("pickup_replay_ms", f"{where}: replay to the next step", "ms",
             [p.replay_ms for p in pickups]),
            ("pickup_total_ms", f"{where}: worker start to the next step", "ms",
             [p.total_ms for p in pickups]),
            ("pickup_step_ms", f"{where}: {left} more steps, per step", "ms/step",
             [p.step_ms for p in pickups]),
        ],
    )  # fmt: skip


def time_pickup(url: str, done: int, left: int) -> Pickup:
    timer = ClaimTimer(open_store(url))
    app = durably.App(cast(Store, timer))
    reached: list[float] = []
    chain = add_long_chain(app, stop_at=done, on_stop=lambda: reached.append(time.perf_counter()))
    try:
        handle = app.start(chain, 0, done + left)
        crash_worker(url, stop_at=done)
        events = wait_for_dead_lease(app, handle.id, done)
        timer.calls.clear()
        began = time.perf_counter()
        finished = app.run_until_idle(concurrency=1)
        check_completed(app, [handle], Load(1, done + left), finished)
        history = app.history(handle.id)
    finally:
        app.close()
    taken = [(start, end) for start, end, runs in timer.calls if runs]
    takeovers = [e for e in history if e.kind is durably.EventKind.CLAIMED and e.seq > events]
    if len(taken) != 1 or len(reached) != 1 or len(takeovers) != 1:
        raise BenchmarkError(
            f"pickup: {len(taken)} claims took the run, step {done + 1} ran {len(reached)} "
            f"times here, {len(takeovers)} claims recorded"
        )
    if "took_over_from" not in (takeovers[0].data or ""):
        raise BenchmarkError(f"pickup: the claim was no takeover: {takeovers[0].data}")
    (claim_began, claim_ended), resumed = taken[0], reached[0]
    return Pickup(
        claim_ms=1000 * (claim_ended - claim_began),
        replay_ms=1000 * (resumed - claim_ended),
        total_ms=1000 * (resumed - began),
        step_ms=ms_per_step(step_starts(history, after_seq=takeovers[0].seq)),
        events=events,
    )


def crash_worker(url: str, *, stop_at: int) -> None:
    """Run a `durably worker` process until the step given x == stop_at kills it."""
    child = spawn_worker(url, "--concurrency", "1", "--lease", "1s", stop_at=stop_at)
    try:
        code = child.process.wait(timeout=CHILD_TIMEOUT)
    except subprocess.TimeoutExpired:
        child.process.kill()
        child.process.wait()
        raise BenchmarkError(f"the crashing worker ran past {CHILD_TIMEOUT:g}s") from None
    if code != -signal.SIGKILL:
        raise BenchmarkError(f"the crashing worker exited {code}: {child.tail()}")


def wait_for_dead_lease(app: durably.App, run_id: str, done: int) -> int:
    """Check the dead worker left `done` completed steps, wait until its lease has expired,
    and return how many events the run holds."""
    record, events = app.get_run(run_id), app.history(run_id)
    completed = sum(1 for event in events if event.kind is durably.EventKind.STEP_COMPLETED)
    if record.status is not durably.RunStatus.RUNNING or completed != done:
        raise BenchmarkError(f"the dead worker left a {record.status} run, {completed} steps done")
    assert record.available_at is not None  # a running run's lease expiry
    time.sleep(max(0.0, (record.available_at - app.clock.now()).total_seconds()) + 0.05)
    return len(events)


# -- worker processes -----------------------------------------------------------------------


@dataclass(slots=True)
class Child:
    """A `durably worker` process and what it logged."""

    process: subprocess.Popen[str]
    spawned_at: float  # perf_counter
    ready_at: float | None = None  # when it logged that it started
    log: list[str] = field(default_factory=list)

    def read_log(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            if self.ready_at is None and READY in line:
                self.ready_at = time.perf_counter()
            self.log.append(line.rstrip())

    def tail(self) -> str:
        return " | ".join(self.log[-5:]) or "(nothing logged)"


def spawn_worker(url: str, *options: str, stop_at: int | None = None) -> Child:
    """`durably worker benchmarks.scaling_app:app OPTIONS` on the store at `url`."""
    env = {**os.environ, "DURABLY_STORE": url}
    if stop_at is not None:
        env[STOP_AT] = str(stop_at)
    command = [sys.executable, "-m", "durably", "worker", WORKER_APP, *options]
    spawned_at = time.perf_counter()
    process = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    child = Child(process, spawned_at)
    threading.Thread(target=child.read_log, name=f"log-{process.pid}", daemon=True).start()
    return child


def measure_processes(backend: Backend, sizes: Sizes, repeat: int) -> list[Figure]:
    """Wall time of N worker processes draining runs started beforehand, and their startup."""
    seconds: dict[int, list[float]] = {count: [] for count in sizes.processes}
    startups: dict[int, list[float]] = {count: [] for count in sizes.processes}
    for rep in range(repeat):
        for count in sizes.processes:
            with backend.fresh() as url:
                total, started = time_processes(url, count, sizes.load)
            seconds[count].append(total)
            startups[count].append(statistics.median(started))
        times = ", ".join(f"{count}: {s[-1]:.2f}s" for count, s in seconds.items())
        progress(backend, f"processes {rep + 1}/{repeat}: {times}")
    label = {count: f"{count} worker process{'es' * (count > 1)}" for count in sizes.processes}
    return figures_of(
        backend.name,
        [
            row
            for count in sizes.processes
            for row in (
                (f"processes_{count}_s", f"{label[count]}: {sizes.load}, spawn to done", "s",
                 seconds[count]),
                (f"processes_{count}_startup_s", f"{label[count]}: startup (spawn to ready)",
                 "s", startups[count]),
            )
        ],
    )  # fmt: skip


def time_processes(url: str, count: int, load: Load) -> tuple[float, list[float]]:
    """(seconds from spawning `count` workers until every run ended, each one's startup)."""
    app, chain = chain_app(url, load.steps)
    try:
        handles = [app.start(chain, i) for i in range(load.workflows)]
        began = time.perf_counter()
        children = [spawn_worker(url, "--concurrency", str(CONCURRENCY)) for _ in range(count)]
        try:
            done_at = wait_until_done(app.store, children)
        finally:
            stop_workers(children)
        check_completed(app, handles, load, load.workflows)
    finally:
        app.close()
    startups = [c.ready_at - c.spawned_at for c in children if c.ready_at is not None]
    if len(startups) != count:
        raise BenchmarkError(f"{count - len(startups)} worker(s) never logged {READY!r}")
    return done_at - began, startups


def wait_until_done(store: Store, children: Sequence[Child], poll: float = 0.01) -> float:
    """perf_counter once no run is pending or running."""
    deadline = time.monotonic() + CHILD_TIMEOUT
    while True:
        pending = store.runs(status=durably.RunStatus.PENDING, limit=1)
        if not pending and not store.runs(status=durably.RunStatus.RUNNING, limit=1):
            return time.perf_counter()
        for child in children:
            if child.process.poll() is not None:
                raise BenchmarkError(f"a worker exited {child.process.returncode}: {child.tail()}")
        if time.monotonic() > deadline:
            raise BenchmarkError(f"the workers ran past {CHILD_TIMEOUT:g}s")
        time.sleep(poll)


def stop_workers(children: Sequence[Child]) -> None:
    """SIGTERM each worker and wait for it; a worker that fails to stop cleanly is an error."""
    for child in children:
        if child.process.poll() is None:
            child.process.send_signal(signal.SIGTERM)
    failed: list[str] = []
    for child in children:
        try:
            code = child.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.process.kill()
            code = child.process.wait()
        if code != 0:
            failed.append(f"exit {code}: {child.tail()}")
    if failed:
        raise BenchmarkError(f"worker(s) did not stop cleanly: {'; '.join(failed)}")


# -- big stores: copies of real runs, bulk-inserted ----------------------------------------

RUN_FIELDS = RUN_COLUMNS.split(", ")
EVENT_FIELDS = ["run_id", *EVENT_COLUMNS.split(", ")]  # the INSERT order of rows.event_row
COPY_SPACING = 0.01  # seconds between the copies' times, all before the run they copy

Row = tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Template:
    """A run durably wrote, as raw rows: durably_runs in RUN_FIELDS order and its
    durably_events in EVENT_FIELDS order."""

    run: Row
    events: tuple[Row, ...]

    @property
    def id(self) -> str:
        return str(self.run[RUN_FIELDS.index("id")])

    def copy_run(self, run_id: str, earlier: float) -> Row:
        """The run's row under another id, `earlier` seconds before."""
        row = list(self.run)
        row[RUN_FIELDS.index("id")] = run_id
        for name in ("created_at", "updated_at", "available_at"):
            i = RUN_FIELDS.index(name)
            row[i] = None if row[i] is None else row[i] - earlier
        return tuple(row)

    def copy_events(self, run_id: str, earlier: float) -> Iterator[Row]:
        """Its events under another id (idempotency keys hold the run id), `earlier` seconds
        before."""
        at, data = EVENT_FIELDS.index("at"), EVENT_FIELDS.index("data")
        for event in self.events:
            row = list(event)
            row[EVENT_FIELDS.index("run_id")] = run_id
            row[at] -= earlier
            row[data] = None if row[data] is None else row[data].replace(self.id, run_id)
            yield tuple(row)

    def released(self) -> Template:
        """The run as a stopping worker leaves it after the last step: `released` instead of
        `run_completed`, pending and due again, no result."""
        *kept, last = self.events
        kind, at = EVENT_FIELDS.index("kind"), EVENT_FIELDS.index("at")
        if last[kind] != durably.EventKind.RUN_COMPLETED:
            raise BenchmarkError(f"the template run ends with {last[kind]}, not run_completed")
        event = list(last)
        event[kind], event[EVENT_FIELDS.index("data")] = str(durably.EventKind.RELEASED), None
        run = dict(zip(RUN_FIELDS, self.run, strict=True))
        run.update(
            status=str(durably.RunStatus.PENDING),
            result=None,
            available_at=last[at],
            lease_owner=None,
        )
        return Template(tuple(run.values()), (*kept, tuple(event)))


class Loader(Protocol):
    """Raw access to a store's tables, for templates and bulk copies."""

    def template(self, run_id: str) -> Template: ...

    def load(self, runs: Iterable[Row], events: Iterable[Row]) -> None: ...

    def count(self, table: str) -> int: ...

    def close(self) -> None: ...


class SQLiteLoader:
    def __init__(self, path: str) -> None:
        self._db = sqlite3.connect(path, isolation_level=None, timeout=30)

    def template(self, run_id: str) -> Template:
        run = self._db.execute(
            f"SELECT {RUN_COLUMNS} FROM durably_runs WHERE id = ?", (run_id,)
        ).fetchone()
        events = self._db.execute(
            f"SELECT {', '.join(EVENT_FIELDS)} FROM durably_events WHERE run_id = ? ORDER BY seq",
            (run_id,),
        ).fetchall()
        return Template(tuple(run), tuple(tuple(event) for event in events))

    def load(self, runs: Iterable[Row], events: Iterable[Row]) -> None:
        """One transaction, then a WAL checkpoint so the timing starts from a settled file."""
        self._db.execute("BEGIN IMMEDIATE")
        self._db.executemany(_insert("durably_runs", RUN_FIELDS, "?"), runs)
        self._db.executemany(_insert("durably_events", EVENT_FIELDS, "?"), events)
        self._db.execute("COMMIT")
        self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def count(self, table: str) -> int:
        return int(self._db.execute(f"SELECT count(*) FROM {table}").fetchone()[0])

    def close(self) -> None:
        self._db.close()


class PostgresLoader:
    def __init__(self, url: str) -> None:
        import psycopg

        self._db = psycopg.connect(url, autocommit=True)

    def template(self, run_id: str) -> Template:
        run = self._db.execute(
            f"SELECT {RUN_COLUMNS} FROM durably_runs WHERE id = %s", (run_id,)
        ).fetchone()
        events = self._db.execute(
            f"SELECT {', '.join(EVENT_FIELDS)} FROM durably_events WHERE run_id = %s ORDER BY seq",
            (run_id,),
        ).fetchall()
        assert run is not None
        return Template(tuple(run), tuple(tuple(event) for event in events))

    def load(self, runs: Iterable[Row], events: Iterable[Row]) -> None:
        """COPY in one transaction, then VACUUM ANALYZE, as autovacuum would do by and by."""
        with self._db.transaction(), self._db.cursor() as cursor:
            for table, fields, rows in (
                ("durably_runs", RUN_FIELDS, runs),
                ("durably_events", EVENT_FIELDS, events),
            ):
                with cursor.copy(f"COPY {table} ({', '.join(fields)}) FROM STDIN") as copy:
                    for row in rows:
                        copy.write_row(row)
        self._db.execute("VACUUM (ANALYZE) durably_runs, durably_events")

    def count(self, table: str) -> int:
        row = self._db.execute(f"SELECT count(*) FROM {table}").fetchone()
        assert row is not None
        return int(row[0])

    def close(self) -> None:
        self._db.close()


def _insert(table: str, fields: Sequence[str], mark: str) -> str:
    return f"INSERT INTO {table} ({', '.join(fields)}) VALUES ({', '.join([mark] * len(fields))})"


@contextmanager
def loader_for(app: durably.App, url: str) -> Iterator[Loader]:
    store = app.store
    loader: Loader
    loader = SQLiteLoader(store.path) if isinstance(store, SQLiteStore) else PostgresLoader(url)
    try:
        yield loader
    finally:
        loader.close()


def finished_template(app: durably.App, chain: durably.Workflow, loader: Loader) -> Template:
    """A run of 3 steps, run to its end by durably in this store."""
    handle = app.start(chain, 0)  # check_completed wants run i to start with i
    check_completed(app, [handle], Load(1, 3), app.run_until_idle(concurrency=1))
    return loader.template(handle.id)


def pending_template(url: str, loader: Loader) -> Template:
    """A pending run of `elsewhere`, started by durably in this store."""
    other = durably.App(url)

    @other.workflow(name="elsewhere")
    async def elsewhere(x: int) -> int:
        return x

    try:
        return loader.template(other.start(elsewhere, 7).id)
    finally:
        other.close()


def fill(
    app: durably.App, chain: durably.Workflow, url: str, *, finished: int, pending: int
) -> None:
    """Give the store `finished` finished runs of `chain` (3 steps) and `pending` pending runs
    of a workflow `app` does not know: one of each made by durably, the rest copies of it."""
    copies: list[tuple[Template, list[str]]] = []
    with loader_for(app, url) as loader:
        if finished:
            copies.append((finished_template(app, chain, loader), _ids(finished - 1)))
        if pending:
            copies.append((pending_template(url, loader), _ids(pending - 1)))
        loader.load(
            (t.copy_run(run_id, earlier) for t, ids in copies for run_id, earlier in _spaced(ids)),
            (
                row
                for t, ids in copies
                for run_id, earlier in _spaced(ids)
                for row in t.copy_events(run_id, earlier)
            ),
        )
        runs, events = loader.count("durably_runs"), loader.count("durably_events")
    want = (
        sum(len(ids) + 1 for _, ids in copies),
        sum(len(t.events) * (len(ids) + 1) for t, ids in copies),
    )
    if (runs, events) != want:
        raise BenchmarkError(f"the filled store holds {runs} runs and {events} events")
    for template, ids in copies:  # the oldest copy, the newest, and some between
        for run_id, earlier in list(_spaced(ids))[:: max(1, (len(ids) - 1) // 3)]:
            check_copy(app.store, template, run_id, earlier)


def _ids(count: int) -> list[str]:
    return [uuid.uuid4().hex for _ in range(count)]


def _spaced(ids: Sequence[str]) -> Iterator[tuple[str, float]]:
    """Each id with how much earlier than the template its copy is; the first is the oldest."""
    for n, run_id in enumerate(ids):
        yield run_id, COPY_SPACING * (len(ids) - n)


def check_copy(store: Store, template: Template, run_id: str, earlier: float) -> None:
    """The store reads the copy back as the run it copies, with its id and times."""
    want_run = run_of(template.copy_run(run_id, earlier))
    want_events = [event_of(row[1:]) for row in template.copy_events(run_id, earlier)]
    if store.get_run(run_id) != want_run or store.history(run_id) != want_events:
        raise BenchmarkError(f"the copy {run_id} reads back unlike the run it copies")


def check_replay(backend: Backend) -> None:
    """Copies of a run stopped after its third step: a worker finishes each with the result
    of the run copied, running no step again (one claim and the end are all it adds)."""
    with backend.fresh() as url:
        app, chain = chain_app(url, 3)
        try:
            with loader_for(app, url) as loader:
                template = finished_template(app, chain, loader)
                stopped, ids = template.released(), _ids(3)
                loader.load(
                    [stopped.copy_run(i, earlier) for i, earlier in _spaced(ids)],
                    [row for i, earlier in _spaced(ids) for row in stopped.copy_events(i, earlier)],
                )
            for run_id, earlier in _spaced(ids):
                check_copy(app.store, stopped, run_id, earlier)
            if (finished := app.run_until_idle(concurrency=1)) != len(ids):
                raise BenchmarkError(f"the worker finished {finished} of {len(ids)} copies")
            result = app.get_run(template.id).result
            for run_id in ids:
                added = [e.kind for e in app.history(run_id)][len(stopped.events) :]
                if app.get_run(run_id).result != result or added != ["claimed", "run_completed"]:
                    raise BenchmarkError(f"the copy {run_id} replayed into {added}")
        finally:
            app.close()
    progress(backend, "copied runs read back and replay as durably wrote them")


# -- big stores: claims and queue hops ------------------------------------------------------


def add_hop(
    app: durably.App, stamps: dict[int, float], arrived: threading.Event
) -> durably.Workflow:
    """Register hop(i): one step, which notes when its body starts (time.time())."""

    @app.step
    async def stamp(i: int) -> int:
        stamps[i] = time.time()
        arrived.set()
        return i

    @app.workflow(name="hop")
    async def hop(i: int) -> int:
        i = await stamp(i)
        return i

    return hop


@contextmanager
def worker_in_thread(app: durably.App) -> Iterator[durably.Worker]:
    """A worker of `app` serving in a thread of its own until the block ends."""
    worker = app.worker(concurrency=CONCURRENCY)
    loop = asyncio.new_event_loop()
    failures: list[BaseException] = []

    def serve() -> None:
        try:
            loop.run_until_complete(worker.serve())
        except BaseException as exc:
            failures.append(exc)

    thread = threading.Thread(target=serve, name="scaling-worker")
    thread.start()
    try:
        yield worker
    finally:
        loop.call_soon_threadsafe(worker.stop)
        thread.join(timeout=60)
        if not thread.is_alive():
            loop.close()
    if thread.is_alive() or failures:
        raise BenchmarkError(f"the worker thread did not stop cleanly: {failures}")


def time_hops(app: durably.App, count: int) -> list[float]:
    """Milliseconds from app.start to the first step's body, one run at a time, the worker
    idle in between."""
    stamps: dict[int, float] = {}
    arrived = threading.Event()
    hop = add_hop(app, stamps, arrived)
    hops: list[float] = []
    with worker_in_thread(app):
        for i in range(-1, count):  # -1: a first hop, untimed, once the worker serves
            arrived.clear()
            began = time.time()
            handle = app.start(hop, i)
            if not arrived.wait(timeout=30) or handle.result(timeout="30s") != i:
                raise BenchmarkError(f"hop {i} did not arrive")
            if i >= 0:
                hops.append(1000 * (stamps[i] - began))
            time.sleep(0.01)  # the worker goes back to waiting for work
    return hops


def time_claims(app: durably.App, chain: durably.Workflow, count: int) -> list[float]:
    """Milliseconds of store.claim of the one due run, as an idle worker claims."""
    store, names, lease = app.store, app.workflow_names(), timedelta(seconds=30)
    claims: list[float] = []
    for i in range(count):
        handle = app.start(chain, i)
        now = app.clock.now()
        began = time.perf_counter()
        taken = store.claim("scaling-benchmark", names, now=now, lease=lease, limit=CONCURRENCY)
        claims.append(1000 * (time.perf_counter() - began))
        if [claim.run_id for claim in taken] != [handle.id]:
            raise BenchmarkError(f"claim {i} took {[c.run_id for c in taken]}, not {handle.id}")
    return claims


@dataclass(frozen=True, slots=True)
class StoreCase:
    key: str
    label: str
    finished: int
    pending: int


def store_cases(sizes: Sizes) -> list[StoreCase]:
    return [
        *(StoreCase(f"{n}_finished", f"{n:,} finished runs", n, 0) for n in sizes.finished),
        StoreCase(
            f"{sizes.backlog}_pending_elsewhere",
            f"{sizes.backlog:,} pending runs of another workflow",
            0,
            sizes.backlog,
        ),
    ]


def measure_stores(backend: Backend, sizes: Sizes, repeat: int) -> list[Figure]:
    """Claim latency and queue hop on stores already holding many runs."""
    cases = store_cases(sizes)
    hops: dict[str, list[float]] = {case.key: [] for case in cases}
    claims: dict[str, list[float]] = {case.key: [] for case in cases}
    for rep in range(repeat):
        for case in cases:
            hop_ms, claim_ms = time_store_case(backend, case, sizes)
            hops[case.key].append(statistics.median(hop_ms))
            claims[case.key].append(statistics.median(claim_ms))
            progress(
                backend,
                f"store {rep + 1}/{repeat}, {case.label}: hop {hops[case.key][-1]:.2f} ms "
                f"(max {max(hop_ms):.1f}), claim {claims[case.key][-1]:.2f} ms "
                f"(max {max(claim_ms):.1f})",
            )
    return figures_of(
        backend.name,
        [
            row
            for case in cases
            for row in (
                (f"claim_ms_{case.key}", f"claim, store with {case.label}", "ms",
                 claims[case.key]),
                (f"hop_ms_{case.key}", f"queue hop, store with {case.label}", "ms",
                 hops[case.key]),
            )
        ],
    )  # fmt: skip


def time_store_case(
    backend: Backend, case: StoreCase, sizes: Sizes
) -> tuple[list[float], list[float]]:
    """(queue hops, claims) in milliseconds, on a fresh store filled for `case`."""
    with backend.fresh() as url:
        app, chain = chain_app(url, 3)
        try:
            fill(app, chain, url, finished=case.finished, pending=case.pending)
            hops = time_hops(app, sizes.hops)
            return hops, time_claims(app, chain, sizes.claims)
        finally:
            app.close()


# -- reporting ------------------------------------------------------------------------------


def measure_store(backend: Backend, sizes: Sizes, repeat: int) -> list[Figure]:
    warm_up(backend)
    check_replay(backend)
    return [
        *measure_histories(backend, sizes, repeat),
        *measure_pickup(backend, sizes, repeat),
        *measure_stores(backend, sizes, repeat),
        *measure_processes(backend, sizes, repeat),
    ]


def write_json(
    store: str,
    context: dict[str, Any],
    figures: Sequence[Figure],
    settings: dict[str, Any],
    sizes: Sizes,
    repeat: int,
) -> Path:
    report = {
        "benchmark": "scaling",
        "store": store,
        **context,
        "load_average_after": load_average(),
        "durability": settings,
        "sizes": {**asdict(sizes), "concurrency": CONCURRENCY, "repeat": repeat},
        "figures": [f.as_json() for f in figures],
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"scaling-{store}-latest.json"
    partial = path.with_name(path.name + ".tmp")
    partial.write_text(json.dumps(report, indent=2) + "\n")
    partial.replace(path)
    return path


def print_table(figures: Sequence[Figure]) -> None:
    """workload | store | median | unit | min..max, one row per figure."""
    header = ("workload", "store", "median", "unit", "min..max")
    spans = [
        f"{number(min(f.samples))}..{number(max(f.samples))}" if len(f.samples) > 1 else ""
        for f in figures
    ]
    rows = [
        (f.workload, f.store, number(f.median), f.unit, span)
        for f, span in zip(figures, spans, strict=True)
    ]
    print_columns([header, *rows], right={2, 4})


# -- the command ---------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = store_arguments("python -m benchmarks.scaling", __doc__.split("\n\n")[0])
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
    print(f"\nmedians of {args.repeat} repetition(s); {os.cpu_count()} CPUs")
    for note in notes:
        print(note)
    return 0


if __name__ == "__main__":
    sys.exit(main())

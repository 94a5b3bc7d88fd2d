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
    python -m benchmarks.scaling --stores sqlite --only history,pickup
    python -m benchmarks.scaling --postgres-url postgresql://user@host:5432/db

The table goes to stdout (progress to stderr); the figures, machine, Python version, date
and durability settings to benchmarks/results/scaling-<store>-latest.json.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

import durably
from benchmarks import harness
from benchmarks.fill import check_replay, fill
from benchmarks.harness import Bench, Trial, Values, Workload
from benchmarks.report import Metric
from benchmarks.runners.inprocess import (
    BackgroundWorker,
    add_hop,
    chain_app,
    check_completed,
    time_hops,
)
from benchmarks.runners.processes import Child
from benchmarks.runners.protocol import CONCURRENCY, BenchmarkError, Load
from durably.stores import Claim, Store, open_store

__all__ = ["BENCH", "STOP_AT", "main", "worker_app"]

WORKER_APP = "benchmarks.scaling_app:app"  # what the `durably worker` processes run
STOP_AT = "DURABLY_BENCH_STOP_AT"  # env: the long_chain step input that kills the process
READY = "started (concurrency"  # what a worker logs once it has opened its store
CHILD_TIMEOUT = 600.0  # seconds; a worker process taking longer is a failure
HISTORY_STEPS_MIN = 1_000  # shorter histories are run this many steps' worth, one at a time


# -- long histories -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Histories:
    """`history` above; the size is the history lengths, ascending."""

    per_runner = True

    def once(self, trial: Trial, w: Workload[tuple[int, ...]]) -> Values:
        per_step: dict[int, float] = {}
        for steps in w.size:
            history = time_history(trial, steps, runs=-(-HISTORY_STEPS_MIN // steps))
            per_step[steps] = history.step_ms
        smallest, largest = w.size[0], w.size[-1]
        return {
            **{f"history_{n}_step_ms": ms for n, ms in per_step.items()},
            "history_step_ratio": per_step[largest] / per_step[smallest],
            "history_drift": history.drift,  # of the largest, run last, alone
            f"history_{largest}_run_s": history.run_seconds,
        }

    def metrics(self, w: Workload[tuple[int, ...]], found: Mapping[str, float]) -> list[Metric]:
        smallest, largest = w.size[0], w.size[-1]
        one, tenth = "history: 1 wf x {:,} steps".format, f"{largest // 10:,}"
        drift = f"history: {largest:,} steps, last {tenth} / first {tenth}"
        return [
            *(Metric(f"history_{n}_step_ms", f"{one(n)}, per step", "ms/step") for n in w.size),
            Metric("history_step_ratio", f"history: per step, {largest:,} / {smallest} steps", "x"),
            Metric("history_drift", drift, "x"),
            Metric(f"history_{largest}_run_s", f"{one(largest)}, whole run", "s"),
        ]

    def record(self, w: Workload[tuple[int, ...]]) -> dict[str, Any]:
        return {"histories": list(w.size)}


@dataclass(frozen=True, slots=True)
class History:
    step_ms: float  # over every step of every run
    run_seconds: float  # run_until_idle of all the runs
    drift: float  # per-step cost over the last tenth of the last run / over its first tenth


def time_history(trial: Trial, steps: int, runs: int) -> History:
    """`runs` workflows of `steps` steps, one at a time (concurrency 1), on a fresh store."""
    with trial.fresh() as url:
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


@dataclass(frozen=True, slots=True)
class Pickup:
    """`pickup` above; the size is (steps completed when the first worker dies, steps left)."""

    per_runner = True

    def once(self, trial: Trial, w: Workload[tuple[int, int]]) -> Values:
        with trial.fresh() as url:
            return time_pickup(url, *w.size)

    def metrics(self, w: Workload[tuple[int, int]], found: Mapping[str, float]) -> list[Metric]:
        (done, left), events = w.size, int(found.get("pickup_events", 0))
        where = f"pickup after {done:,} steps"
        return [
            Metric("pickup_claim_ms", f"{where}: claim ({events:,} events)", "ms"),
            Metric("pickup_replay_ms", f"{where}: replay to the next step", "ms"),
            Metric("pickup_total_ms", f"{where}: worker start to the next step", "ms"),
            Metric("pickup_step_ms", f"{where}: {left} more steps, per step", "ms/step"),
        ]

    def record(self, w: Workload[tuple[int, int]]) -> dict[str, Any]:
        return {"pickup_done": w.size[0], "pickup_left": w.size[1]}


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
    """The app of the `durably worker` processes: the chain of 3 steps (chain_3), and
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


def time_pickup(url: str, done: int, left: int) -> Values:
    """A worker here taking over the run a `durably worker` died in (step done + 1)."""
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
    return {
        "pickup_claim_ms": 1000 * (claim_ended - claim_began),
        "pickup_replay_ms": 1000 * (resumed - claim_ended),
        "pickup_total_ms": 1000 * (resumed - began),
        "pickup_step_ms": ms_per_step(step_starts(history, after_seq=takeovers[0].seq)),
        "pickup_events": events,  # the run's, when taken over: for the label
    }


def crash_worker(url: str, *, stop_at: int) -> None:
    """Run a `durably worker` process until the step given x == stop_at kills it."""
    child = spawn_worker(url, "--concurrency", "1", "--lease", "1s", stop_at=stop_at)
    try:
        if (code := child.wait(CHILD_TIMEOUT)) != -signal.SIGKILL:
            raise BenchmarkError(f"the crashing worker exited {code}: {child.tail()}")
    finally:
        child.close()


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


# -- big stores: claims and queue hops ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StoreSizes:
    finished: tuple[int, ...]  # finished runs in the store while claims are timed
    backlog: int  # pending runs of a workflow the worker does not know
    hops: int
    claims: int


@dataclass(frozen=True, slots=True)
class StoreCase:
    key: str
    label: str
    finished: int
    pending: int


def store_cases(sizes: StoreSizes) -> list[StoreCase]:
    backlog = sizes.backlog
    return [
        *(StoreCase(f"{n}_finished", f"{n:,} finished runs", n, 0) for n in sizes.finished),
        StoreCase(
            f"{backlog}_pending_elsewhere",
            f"{backlog:,} pending runs of another workflow",
            0,
            backlog,
        ),
    ]


@dataclass(frozen=True, slots=True)
class BigStores:
    """`stores` above: a claim and a queue hop on stores already holding many runs."""

    per_runner = True

    def once(self, trial: Trial, w: Workload[StoreSizes]) -> Values:
        values: Values = {}
        for case in store_cases(w.size):
            with trial.fresh() as url:
                hop_ms, claim_ms = time_store_case(url, case, w.size)
            values[f"claim_ms_{case.key}"] = statistics.median(claim_ms)
            values[f"hop_ms_{case.key}"] = statistics.median(hop_ms)
        return values

    def metrics(self, w: Workload[StoreSizes], found: Mapping[str, float]) -> list[Metric]:
        return [
            metric
            for case in store_cases(w.size)
            for metric in (
                Metric(f"claim_ms_{case.key}", f"claim, store with {case.label}", "ms"),
                Metric(f"hop_ms_{case.key}", f"queue hop, store with {case.label}", "ms"),
            )
        ]

    def record(self, w: Workload[StoreSizes]) -> dict[str, Any]:
        sizes = w.size
        return {
            "finished": list(sizes.finished),
            "backlog": sizes.backlog,
            "hops": sizes.hops,
            "claims": sizes.claims,
        }


def time_store_case(
    url: str, case: StoreCase, sizes: StoreSizes
) -> tuple[list[float], list[float]]:
    """(queue hops, claims) in milliseconds, on a fresh store filled for `case`."""
    app, chain = chain_app(url, 3)
    try:
        fill(app, chain, url, finished=case.finished, pending=case.pending)
        hop = add_hop(app)
        with BackgroundWorker(app.worker(concurrency=CONCURRENCY)):  # idle in a thread
            hops = time_hops(app, hop, sizes.hops, idle=0.01)
        return hops, time_claims(app, chain, sizes.claims)
    finally:
        app.close()


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


# -- worker processes -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Processes:
    """`processes` above; the size is (the numbers of processes, the load started first)."""

    per_runner = True

    def once(self, trial: Trial, w: Workload[tuple[tuple[int, ...], Load]]) -> Values:
        counts, load = w.size
        values: Values = {}
        for count in counts:
            with trial.fresh() as url:
                total, started = time_processes(url, count, load)
            values[f"processes_{count}_s"] = total
            values[f"processes_{count}_startup_s"] = statistics.median(started)
        return values

    def metrics(
        self, w: Workload[tuple[tuple[int, ...], Load]], found: Mapping[str, float]
    ) -> list[Metric]:
        counts, load = w.size
        metrics = []
        for n in counts:
            label = f"{n} worker process{'es' * (n > 1)}"
            metrics.append(Metric(f"processes_{n}_s", f"{label}: {load}, spawn to done", "s"))
            metrics.append(
                Metric(f"processes_{n}_startup_s", f"{label}: startup (spawn to ready)", "s")
            )
        return metrics

    def record(self, w: Workload[tuple[tuple[int, ...], Load]]) -> dict[str, Any]:
        counts, load = w.size
        return {
            "processes": list(counts),
            "load": {"workflows": load.workflows, "steps": load.steps},
        }


def spawn_worker(url: str, *options: str, stop_at: int | None = None) -> Child:
    """`durably worker benchmarks.scaling_app:app OPTIONS` on the store at `url`."""
    env = {"DURABLY_STORE": url} | ({} if stop_at is None else {STOP_AT: str(stop_at)})
    argv = [sys.executable, "-m", "durably", "worker", WORKER_APP, *options]
    return Child(argv, env=env, ready=READY, stdout=False)


def time_processes(url: str, count: int, load: Load) -> tuple[float, list[float]]:
    """(seconds from spawning `count` workers until every run ended, each one's startup)."""
    app, chain = chain_app(url, load.steps)
    try:
        handles = [app.start(chain, i) for i in range(load.workflows)]
        began = time.perf_counter()
        children = [spawn_worker(url, "--concurrency", str(load.concurrency)) for _ in range(count)]
        try:
            done_at = wait_until_done(app.store, children)
            wait_until_ready(children)  # SIGTERM before its handler is in would kill one
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
    """perf_counter once no run is pending or running (the store polled every `poll` s)."""
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


def wait_until_ready(children: Sequence[Child], poll: float = 0.01) -> None:
    """Until every worker has logged that it started (or has exited): one that starts after
    the runs are done has its startup measured too, and is stopped cleanly."""
    deadline = time.monotonic() + CHILD_TIMEOUT
    while any(c.ready_at is None and c.process.poll() is None for c in children):
        if time.monotonic() > deadline:
            raise BenchmarkError(f"a worker did not start within {CHILD_TIMEOUT:g}s")
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
            child.kill()
            code = child.process.returncode
        if code != 0:
            failed.append(f"exit {code}: {child.tail()}")
        child.close()
    if failed:
        raise BenchmarkError(f"worker(s) did not stop cleanly: {'; '.join(failed)}")


# -- the registry --------------------------------------------------------------------------

BENCH = Bench(
    "scaling",
    __doc__,
    (
        Workload("history", "history", Histories(), (10, 100, 1_000, 10_000), (10, 100, 1_000)),
        Workload("pickup", "pickup", Pickup(), (10_000, 100), quick=(1_000, 20)),
        Workload(
            "stores",
            "stores",
            BigStores(),
            StoreSizes((0, 10_000, 100_000), backlog=100_000, hops=50, claims=200),
            StoreSizes((0, 2_000, 10_000), backlog=10_000, hops=20, claims=50),
        ),
        Workload(
            "processes",
            "processes",
            Processes(),
            ((1, 2, 4), Load(2_000, 3)),
            quick=((1, 2, 4), Load(300, 3)),
        ),
    ),
    before=check_replay,
)


def main(argv: Sequence[str] | None = None) -> int:
    return harness.main(BENCH, argv)


if __name__ == "__main__":
    sys.exit(main())

"""What durably costs, durably in this process on fresh stores (and `durably worker`
processes): W1 and the per-step fit beside runs that sleep, timers due at once, W1 with
schedules not due and with retention deleting old runs, a fan-out (each two variants in turns,
and their change); long histories, a takeover, claims on filled stores, worker processes.
"""

import json
import signal
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import cast

import durably
from benchmarks.plan import Metric, Trial, Values
from benchmarks.runners.durably_runner import (
    ClaimCall,
    ClaimTimer,
    bench_app,
    check_completed,
    run_chain,
    wait_ended,
)
from benchmarks.runners.processes import durably_worker, supervised, workers
from benchmarks.runners.protocol import CLAIMS, STOP_AT, BenchmarkError, Load
from benchmarks.stores import LEASE, fill, vacuum
from durably.stores import Store, open_store
from durably.testing import FakeClock

Variant = tuple[str, str, Callable[[], float]]  # its figure's key, its label, its measure
W1 = Load(1_000, 3)
CLAIMED_AT = FakeClock().now()  # when the claims' backlogs are due, and claimed
W1_LABEL = f"W1 ({W1}, c={W1.concurrency})"
SHORT, LONG = Load(100, 3, concurrency=1), Load(30, 20, concurrency=1)


def versus(trial: Trial, label: str, unit: str, first: Variant, second: Variant) -> Values:
    """Two variants, taking turns going first; and the second's change against the first, in %."""
    order = (first, second) if trial.repetition % 2 else (second, first)
    got = {key: measure() for key, _, measure in order}
    a, b, higher = got[first[0]], got[second[0]], unit.endswith("/s")
    change = Metric(f"{second[0]}_change", f"{label}, {second[1]}, against {first[1]}", "%")
    values: Values = {
        Metric(k, f"{label}, {what}", unit, higher): got[k] for k, what, _ in (first, second)
    }
    return values | {change: 100 * (b - a) / a}


def w1_per_s(url: str, setup: Callable[[durably.App], object] = id) -> float:
    return W1.workflows / run_chain(url, W1, setup)[1]


def step_ms(url: str) -> float:
    """The per-step fit: the slope of ms per workflow over steps, one workflow at a time."""
    short, long = (run_chain(url, load)[1] / load.workflows for load in (SHORT, LONG))
    return 1000 * (long - short) / (LONG.steps - SHORT.steps)


def sleepers(url: str, count: int, seconds: float, clock: FakeClock | None = None) -> durably.App:
    """An app with `count` runs of sleeper(seconds), started and run to their timers."""
    app = durably.App(url, clock=clock)

    @app.workflow(name="sleeper")
    async def sleeper(seconds: float) -> str:
        await durably.sleep(seconds)
        return "woke"

    for first in range(0, count, 1_000):
        app.start_many([durably.Start("sleeper", (seconds,))] * min(1_000, count - first))
    app.run_until_idle(concurrency=256)
    pending = app.client.runs(status=durably.RunStatus.PENDING, limit=count + 1).runs
    if len(pending) != count:
        raise BenchmarkError(f"{len(pending)} runs sleep, not {count}")
    return app


@contextmanager
def parked(trial: Trial, count: int) -> Iterator[tuple[str, str, float]]:
    """An empty store; one where `count` runs sleep a day (vacuumed); the seconds parking took."""
    with trial.fresh() as empty, trial.fresh() as crowded:
        began = time.perf_counter()
        sleepers(crowded, count, 86_400.0).close()
        park_s = time.perf_counter() - began
        vacuum(crowded)
        yield empty, crowded, park_s


def beside(trial: Trial, count: int) -> Values:
    """W1 and the per-step fit, empty and beside sleepers (parked at the first repetition)."""
    empty, crowded, park_s = trial.keep(lambda: parked(trial, count))
    where, fit = f"beside {count:,} asleep", "per-step checkpoint (fit)"
    parking = Metric("park_s", f"parking {count:,} runs that sleep a day", "s")
    empty_w1 = ("w1_empty_per_s", "empty store", lambda: w1_per_s(empty))
    crowded_w1 = ("w1_sleepers_per_s", where, lambda: w1_per_s(crowded))
    empty_step = ("step_empty_ms", "empty store", lambda: step_ms(empty))
    crowded_step = ("step_sleepers_ms", where, lambda: step_ms(crowded))
    return {
        parking: park_s if trial.repetition == 1 else None,
        **versus(trial, W1_LABEL, "workflows/s", empty_w1, crowded_w1),
        **versus(trial, fit, "ms/step", empty_step, crowded_step),
    }


def due(trial: Trial, count: int) -> Values:
    """`count` runs sleep until one moment (a fake clock); after it, one worker ends them all."""
    clock = FakeClock()
    with trial.fresh() as url:
        app = sleepers(url, count, 3600.0, clock)
        clock.advance(timedelta(hours=1))
        began = time.perf_counter()
        if (ended := app.run_until_idle(concurrency=256)) != count:
            raise BenchmarkError(f"{ended} runs woke and ended, not {count}")
        elapsed = time.perf_counter() - began
        app.close()
    label = f"{count:,} timers due at once: all fired and ended"
    per_s = Metric("due_per_s", label, "runs/s", True)
    return {Metric("due_s", label, "s"): elapsed, per_s: count / elapsed}


def schedules(trial: Trial, count: int) -> Values:
    """W1 by an app with `count` more workflows, unscheduled or each scheduled hourly (not due)."""

    def measure(scheduled: int) -> float:
        def setup(app: durably.App) -> None:
            for n in range(count):  # the same workflows either way: only the schedules differ

                async def report() -> None: ...

                workflow = app.workflow(name=f"report_{n}")(report)
                if n < scheduled:
                    app.schedule(cron=f"{n % 60} * * * *", name=f"hourly-{n}")(workflow)
            app.run_until_idle()  # registers the schedules (once per worker), starts nothing

        with trial.fresh() as url:
            return w1_per_s(url, setup)

    none = ("w1_unscheduled_per_s", f"{count} more workflows, none scheduled", lambda: measure(0))
    hourly = ("w1_scheduled_per_s", "each scheduled hourly", lambda: measure(count))
    return versus(trial, W1_LABEL, "workflows/s", none, hourly)


def retention(trial: Trial, old: int) -> Values:
    """W1 beside `old` runs ended two days ago, kept, or deleted by retention 1d (each on a new
    fill); then the deletion of the rest, timed."""
    rest: dict[str, float] = {}  # what the worker left, and how long deleting it took

    def measure(days: int | None) -> float:
        with trial.fresh() as url:
            store = open_store(url)
            fill(store, "old", old, datetime.now(UTC) - timedelta(days=2), "ended")
            vacuum(url)

            def setup(app: durably.App) -> None:
                app.retention = None if days is None else timedelta(days=days)

            per_s = w1_per_s(url, setup)
            began, cutoff, count = time.perf_counter(), datetime.now(UTC) - timedelta(days=1), 0
            while days and (deleted := store.prune(cutoff, limit=500)):
                count += deleted
            if days:
                rest.update(runs=count, seconds=time.perf_counter() - began)
            store.close()
            return per_s

    kept = ("w1_kept_per_s", f"{old:,} old runs kept", lambda: measure(None))
    pruned = ("w1_retention_per_s", "deleted (retention 1d)", lambda: measure(1))
    return versus(trial, W1_LABEL, "workflows/s", kept, pruned) | {
        Metric("pruned_rest", "old runs left after W1 with retention", "runs"): rest["runs"],
        Metric("prune_rest_s", "old runs left after W1: all deleted in", "s"): rest["seconds"],
    }


def fanout(trial: Trial, width: int) -> Values:
    """One workflow of `width` steps gathered (durably.gather), and one calling them in a row."""

    def one(gathered: bool) -> float:
        with trial.fresh() as url:
            app = bench_app(url)
            began = time.perf_counter()
            handle = app.start("fanout", width, gathered)
            app.run_until_idle()
            seconds = time.perf_counter() - began
            if handle.result(timeout=0) != width * (width + 1) // 2:
                raise BenchmarkError(f"fanout (gathered: {gathered}): a wrong sum")
            app.close()
            return seconds

    gathered = ("fanout_s", "gathered", lambda: one(True))
    return versus(
        trial, f"1 wf, {width:,} steps", "s", gathered, ("chain_s", "in a row", lambda: one(False))
    )


def step_starts(history: Sequence[durably.Event]) -> list[datetime]:
    """When each step_started event was written (durably's clock)."""
    return [event.at for event in history if event.kind is durably.EventKind.STEP_STARTED]


def histories(trial: Trial, lengths: tuple[int, ...]) -> Values:
    """Workflows of each length run alone (as many as make 1,000 steps): ms per step between the
    first and last step_started; the longest's last tenth over its first (no drift between runs)."""
    values: Values = {}
    for steps in lengths:
        runs = -(-1_000 // steps)
        with trial.fresh() as url:
            app = bench_app(url)
            handles = [app.start("chain", i, steps) for i in range(runs)]
            check_completed(app, handles, Load(runs, steps), app.run_until_idle(concurrency=1))
            starts = [step_starts(app.client.history(handle.id)) for handle in handles]
            app.close()
        total = sum((each[-1] - each[0]).total_seconds() for each in starts)
        label = f"history: 1 wf x {steps:,} steps, per step"
        per_step = 1000 * total / sum(len(each) - 1 for each in starts)
        values[Metric(f"history_{steps}_step_ms", label, "ms/step")] = per_step
    last, n = starts[-1], max(1, lengths[-1] // 10)  # the longest, run last, alone
    drift = (last[-1] - last[-n - 1]) / (last[n] - last[0])
    label = f"history: {lengths[-1]:,} steps, last {n:,} / first {n:,}"
    return values | {Metric("history_drift", label, "x"): drift}


def pickup(trial: Trial, done: int) -> Values:
    """A `durably worker` (lease 1s) SIGKILLs itself in step done + 1; once the lease expires a
    worker here takes over: its claim (the whole history), and the replay to that step's body."""
    reached: list[float] = []
    with trial.fresh() as url:
        timer = ClaimTimer(open_store(url))
        app = bench_app(cast(Store, timer), done, lambda: reached.append(time.perf_counter()))
        handle = app.start("chain", 0, done + 1)
        options = ("--concurrency", "1", "--lease", "1s")
        with durably_worker(url, *options, env={STOP_AT: str(done)}) as crashing:
            if (code := crashing.wait()) != -signal.SIGKILL:
                raise crashing.failed(f"the crashing worker exited {code}")
        run, history = app.client.get(handle.id), app.client.history(handle.id)
        if run.status is not durably.RunStatus.RUNNING or len(step_starts(history)) != done + 1:
            raise BenchmarkError(f"the dead worker left a {run.status} run")
        assert run.available_at is not None  # when its lease expires
        time.sleep(max(0.0, (run.available_at - app.clock.now()).total_seconds()) + 0.05)
        timer.calls.clear()
        check_completed(app, [handle], Load(1, done + 1), app.run_until_idle(concurrency=1))
        after = app.client.history(handle.id)[len(history) :]
        app.close()
    taken = [(call.began, call.ended) for call in timer.calls if call.got]
    claimed = [event for event in after if event.kind is durably.EventKind.CLAIMED]
    took_over = any("took_over_from" in (event.data or "") for event in claimed)
    if len(taken) != 1 or len(reached) != 1 or len(claimed) != 1 or not took_over:
        raise BenchmarkError(f"pickup: {len(taken)} claims took the run, none a takeover")
    (claim_began, claim_ended), where = taken[0], f"pickup after {done:,} steps"
    claim_ms, replay_ms = 1000 * (claim_ended - claim_began), 1000 * (reached[0] - claim_ended)
    return {
        Metric("pickup_claim_ms", f"{where}: claim", "ms"): claim_ms,
        Metric("pickup_replay_ms", f"{where}: replay to the next step", "ms"): replay_ms,
    }


# What the timed claims serve, as a worker's claim names it: "job" at its current version
# (the runs `fill` makes have none recorded, as runs started by name from outside have).
SERVES = {"job": ["v1"]}


@dataclass(frozen=True, slots=True)
class Backlog:
    """What a store holds while `claims` claims of `take` runs of "job" are timed."""

    due: int  # runs of job due now, priorities 0..10
    claims: int
    take: int = 32
    sleeping: int = 0  # runs of job of priority 10, due in a day
    finished: int = 0  # runs of job completed after three steps (9 events each)
    elsewhere: int = 0  # runs due now of a workflow no worker knows


def claims(trial: Trial, size: Backlog) -> Values:
    """Claims straight on the store, as an idle worker's, from a backlog (vacuumed): each."""
    with trial.fresh() as url:
        store = backlog(url, size)
        samples = [claim_ms(store, size) for _ in range(size.claims)]
        store.close()
    kinds = [(size.due, "due"), (size.sleeping, "sleeping a day"), (size.finished, "finished")]
    held = [f"{n:,} {kind}" for n, kind in [*kinds, (size.elsewhere, "due elsewhere")] if n]
    key = "_".join(f"{n}_{kind.split()[0]}" for n, kind in [*kinds, (size.elsewhere, "elsewhere")])
    return {Metric(f"claim_ms_{key}", f"claim of {size.take}, {', '.join(held)}", "ms"): samples}


def backlog(url: str, size: Backlog) -> Store:
    """The store at `url`, opened, with the backlog made in it (vacuumed)."""
    now, store = CLAIMED_AT, open_store(url)  # the runs elsewhere first in claim order
    fill(store, "job", size.finished, now - timedelta(hours=1), "ended")
    fill(store, "elsewhere", size.elsewhere, now - timedelta(hours=1))
    fill(store, "job", size.sleeping, now, "asleep")
    fill(store, "job", size.due, now)
    vacuum(url)
    return store


def claim_ms(store: Store, size: Backlog) -> float:
    """Milliseconds one claim of `size.take` due runs of "job" took, as an idle worker's."""
    began = time.perf_counter()
    if len(store.claim("bench", SERVES, now=CLAIMED_AT, lease=LEASE, limit=size.take)) < size.take:
        raise BenchmarkError(f"a claim took fewer than {size.take} runs")
    return 1000 * (time.perf_counter() - began)


def processes(trial: Trial, size: tuple[tuple[int, ...], Load]) -> Values:
    """For each count N, `durably worker --processes N` (one supervisor; 1: the worker alone)
    on a fresh store: once every worker serves, the load started in batches (start_many) and
    run to its end. Each worker's claims are timed in its process (ClaimTimer), from the first
    claim that took a run to the last: their median, how many there were, and how many came
    back empty (the runs left were all leased, or on PostgreSQL locked by another claim):
    where the workers contend for the same runs. A claim asking for more than its worker's
    concurrency, or getting more than it asked, fails the benchmark (a worker asks for its free
    slots: Worker._claim)."""
    (counts, load), values = size, cast(Values, {})
    for count in counts:
        with trial.fresh() as url, tempfile.TemporaryDirectory() as written:
            app = bench_app(url)
            app.store  # noqa: B018 (created before the workers open it)
            began = time.perf_counter()
            options = ("--concurrency", str(load.concurrency))
            with supervised(url, count, *options, env={CLAIMS: written}) as supervisor:
                ready, began = time.perf_counter() - began, time.perf_counter()

                def alive() -> None:
                    if supervisor.process.poll() is not None:
                        raise supervisor.failed("it exited")

                handles = start_chains(app, load)
                wait_ended(app, alive)
                seconds = time.perf_counter() - began
            check_completed(app, handles, load, load.workflows)
            app.close()
            # each process that imported the app wrote its claims: the supervisor, none
            by_process = [json.loads(each.read_text()) for each in Path(written).glob("*.json")]
            if len(workers := [calls for calls in by_process if calls]) != count:
                raise BenchmarkError(f"{len(workers)} worker(s) wrote their claims, not {count}")
            calls = [ClaimCall(*call) for each in workers for call in each]
        values |= claimed(count, load, calls, seconds, ready)
    return values


def start_chains(app: durably.App, load: Load) -> list[durably.RunHandle]:
    """The load's runs, started in batches of 500: chain(i, steps) for each i."""
    handles: list[durably.RunHandle] = []
    for first in range(0, load.workflows, 500):
        batch = range(first, min(load.workflows, first + 500))
        handles += app.start_many([durably.Start("chain", (i, load.steps)) for i in batch])
    return handles


def claimed(count: int, load: Load, calls: list[ClaimCall], seconds: float, ready: float) -> Values:
    """The figures of `count` worker processes that ran `load` in `seconds`."""
    if bad := [c for c in calls if not 0 <= c.got <= c.asked <= load.concurrency]:
        raise BenchmarkError(f"a claim asked for more than its concurrency, or got more: {bad[0]}")
    took = [c.at for c in calls if c.got]
    handing = [c for c in calls if min(took) <= c.at <= max(took)]  # from the first run's claim
    empty = 100 * sum(1 for c in handing if not c.got) / len(handing)
    claim_ms = statistics.median(1000 * (c.ended - c.began) for c in handing)
    where = f"{count} worker process(es) x {load.concurrency}, {load}"
    key = f"processes_{count}x{load.concurrency}"
    return {
        Metric(f"{key}_per_s", where, "workflows/s", True): load.workflows / seconds,
        Metric(f"{key}_claim_ms", f"{where}: median claim", "ms"): claim_ms,
        Metric(f"{key}_claims", f"{where}: claims to the last run's", "claims"): len(handing),
        Metric(f"{key}_empty_pct", f"{where}: of those, empty", "%"): empty,
        Metric(f"{key}_ready_s", f"{where}: spawn to every worker serving", "s"): ready,
    }


def starts_beside(trial: Trial, size: tuple[Load, int]) -> Values:
    """`app.start` from this process, one every 5 ms, `starts` of them, while a `durably worker`
    process runs `load` (started beforehand) on the same store: how long each start took (on
    SQLite, its wait for the write lock behind the worker's commits and claims)."""
    load, starts = size
    with trial.fresh() as url:
        app = bench_app(url)
        start_chains(app, load)
        took: list[float] = []
        with workers(url, 1, "--concurrency", str(load.concurrency)):
            time.sleep(0.2)  # the worker at full speed
            for n in range(starts):
                began = time.perf_counter()
                app.start("chain", load.workflows + n, load.steps)
                took.append(1000 * (time.perf_counter() - began))
                time.sleep(0.005)
            left = app.client.runs(status=durably.RunStatus.PENDING, limit=1).runs
        app.close()
    if not left:
        raise BenchmarkError(f"the worker ran out of {load} before {starts} starts were made")
    where = f"{starts} starts, one every 5 ms, beside a worker process running {load}"
    return {
        Metric("starts_beside_ms", f"{where}: app.start", "ms (median)"): took,
        Metric("starts_beside_p95_ms", f"{where}: app.start", "ms (p95)", p95=True): took,
        Metric("starts_beside_max_ms", f"{where}: the slowest", "ms"): max(took),
    }

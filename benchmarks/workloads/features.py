"""What durably's features cost, durably in this process on fresh stores: W1 and the per-step
fit beside runs that sleep, timers due at once, W1 with schedules that are not due and with
retention deleting old runs, a claim from a prioritized backlog, and a fan-out. Where a
repetition measures two variants, they take turns going first, and their change is a figure.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TypeVar

import durably
from benchmarks.plan import Metric, Trial, Values
from benchmarks.runners.durably_runner import run_chain
from benchmarks.runners.protocol import BenchmarkError, Load
from benchmarks.stores import claimed, fill, vacuum
from durably.stores import open_store
from durably.testing import FakeClock

T = TypeVar("T")
W1 = Load(1_000, 3)
W1_LABEL = f"W1 ({W1}, c={W1.concurrency})"
SHORT, LONG = Load(100, 3, concurrency=1), Load(30, 20, concurrency=1)


def in_turns(trial: Trial, first: Callable[[], T], second: Callable[[], T]) -> tuple[T, T]:
    """Both measured, the first one going first in odd repetitions."""
    if trial.repetition % 2:
        return first(), second()
    later = second()
    return first(), later


def change(key: str, label: str, value: float, base: float) -> Values:
    return {Metric(key, label, "%"): 100 * (value - base) / base}


def w1_per_s(url: str, setup: Callable[[durably.App], object] | None = None) -> float:
    return W1.workflows / run_chain(url, W1, setup)[1]


def step_ms(url: str) -> float:
    """The per-step fit: the slope of ms per workflow over steps, one workflow at a time."""
    short, long = (run_chain(url, load)[1] / load.workflows for load in (SHORT, LONG))
    return 1000 * (long - short) / (LONG.steps - SHORT.steps)


def sleeper_app(url: str, clock: FakeClock | None = None) -> durably.App:
    app = durably.App(url, clock=clock)

    @app.workflow(name="sleeper")
    async def sleeper(seconds: float) -> str:
        await durably.sleep(seconds)
        return "woke"

    return app


def park(url: str, count: int, seconds: float, clock: FakeClock | None = None) -> float:
    """Start `count` runs that sleep `seconds` (start_many, 1,000 at a time) and run each to
    its timer: pending, with a due time, holding no worker. The seconds it took."""
    app = sleeper_app(url, clock)
    began = time.perf_counter()
    for first in range(0, count, 1_000):
        app.start_many([durably.Start("sleeper", (seconds,))] * min(1_000, count - first))
    app.run_until_idle(concurrency=256)
    elapsed = time.perf_counter() - began
    if (
        len(pending := app.client.runs(status=durably.RunStatus.PENDING, limit=count + 1).runs)
        != count
    ):
        raise BenchmarkError(f"{len(pending)} runs sleep, not {count}")
    app.close()
    return elapsed


@contextmanager
def parked(trial: Trial, sleepers: int) -> Iterator[tuple[str, str, float]]:
    """An empty store; one where `sleepers` runs sleep a day (vacuumed after, as autovacuum
    would do); the seconds parking took."""
    with trial.fresh() as empty, trial.fresh() as crowded:
        park_s = park(crowded, sleepers, 86_400.0)
        vacuum(crowded)
        yield empty, crowded, park_s


def beside(trial: Trial, sleepers: int) -> Values:
    """W1 and the per-step fit on an empty store and beside sleepers (parked once, at the first
    repetition)."""
    empty, crowded, park_s = trial.keep(lambda: parked(trial, sleepers))
    w1 = in_turns(trial, lambda: w1_per_s(empty), lambda: w1_per_s(crowded))
    step = in_turns(trial, lambda: step_ms(empty), lambda: step_ms(crowded))
    where = f"beside {sleepers:,} asleep"
    return {
        Metric("park_s", f"parking {sleepers:,} runs that sleep a day", "s"): (
            park_s if trial.repetition == 1 else None
        ),
        Metric("w1_empty_per_s", f"{W1_LABEL}, empty store", "workflows/s", True): w1[0],
        Metric("w1_sleepers_per_s", f"{W1_LABEL}, {where}", "workflows/s", True): w1[1],
        **change("w1_change", f"W1 {where}, against empty", w1[1], w1[0]),
        Metric("step_empty_ms", "per-step checkpoint (fit), empty store", "ms/step"): step[0],
        Metric("step_sleepers_ms", f"per-step checkpoint (fit), {where}", "ms/step"): step[1],
        **change("step_change", f"per step {where}, against empty", step[1], step[0]),
    }


def due(trial: Trial, count: int) -> Values:
    """`count` runs sleep until one moment (a fake clock: nobody waits for it); the clock
    passes it, and a worker (concurrency 256) fires every timer and ends every run."""
    clock = FakeClock()
    with trial.fresh() as url:
        park(url, count, 3600.0, clock)
        clock.advance(timedelta(hours=1))
        app = sleeper_app(url, clock)
        began = time.perf_counter()
        if (ended := app.run_until_idle(concurrency=256)) != count:
            raise BenchmarkError(f"{ended} runs woke and ended, not {count}")
        elapsed = time.perf_counter() - began
        app.close()
    label = f"{count:,} timers due at once: all fired and ended"
    return {
        Metric("due_s", label, "s"): elapsed,
        Metric("due_per_s", label, "runs/s", True): count / elapsed,
    }


def schedules(trial: Trial, count: int) -> Values:
    """W1 by an app with `count` more workflows, none scheduled, and each scheduled hourly
    (registered before the clock starts; not due while W1 runs)."""

    def w1(scheduled: int) -> float:
        def setup(app: durably.App) -> None:
            for n in range(count):  # the same workflows either way: only the schedules differ

                async def report() -> None: ...

                workflow = app.workflow(name=f"report_{n}")(report)
                if n < scheduled:
                    app.schedule(cron=f"{n % 60} * * * *", name=f"hourly-{n}")(workflow)
            app.run_until_idle()  # registers the schedules (once per worker), starts nothing

        with trial.fresh() as url:
            return w1_per_s(url, setup)

    without, with_them = in_turns(trial, lambda: w1(0), lambda: w1(count))
    label = f"{W1_LABEL}, {count} more workflows"
    return {
        Metric("w1_unscheduled_per_s", f"{label}, none scheduled", "workflows/s", True): without,
        Metric("w1_scheduled_per_s", f"{label}, each hourly", "workflows/s", True): with_them,
        **change("schedules_change", "W1 with the schedules, against none", with_them, without),
    }


def retention(trial: Trial, old: int) -> Values:
    """W1 beside `old` runs ended two days ago, by an app that keeps them and by one with
    retention 1d, whose worker deletes them (500 a transaction, between claims), each on a
    freshly filled store; then the deletion of the rest, timed."""
    rest: dict[str, float] = {}  # what the worker left, and how long deleting it took

    def w1(days: int | None) -> float:
        with trial.fresh() as url:
            store = open_store(url)
            fill(store, "old", old, at=datetime.now(UTC) - timedelta(days=2), ended=True)
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

    kept, deleting = in_turns(trial, lambda: w1(None), lambda: w1(1))
    label = f"{W1_LABEL}, {old:,} old runs"
    return {
        Metric("w1_kept_per_s", f"{label} kept", "workflows/s", True): kept,
        Metric(
            "w1_retention_per_s", f"{label} deleted (retention 1d)", "workflows/s", True
        ): deleting,
        **change("retention_change", "W1 with retention, against kept", deleting, kept),
        Metric("pruned_rest", "old runs left after W1 with retention", "runs"): rest["runs"],
        Metric("prune_rest_s", "old runs left after W1: all deleted in", "s"): rest["seconds"],
    }


@dataclass(frozen=True, slots=True)
class Backlog:
    due: int  # runs due now, priorities 0..10
    sleeping: int  # runs of priority 10, due in a day
    claims: int  # claims of 32 runs, timed


def priorities(trial: Trial, size: Backlog) -> Values:
    """One claim of 32 runs, straight on the store (no worker), from a backlog of due runs
    beside sleeping ones (the PostgreSQL store vacuumed after the fill); every claim."""
    now, samples = FakeClock().now(), []
    with trial.fresh() as url:
        store = open_store(url)
        fill(store, "job", size.sleeping, at=now, later=timedelta(days=1), priority=lambda n: 10)
        fill(store, "job", size.due, at=now, priority=lambda n: n % 11)
        vacuum(url)
        for _ in range(size.claims):
            ms, taken = claimed(store, ["job"], now)
            if len(taken) != 32:
                raise BenchmarkError("a claim took fewer than 32 runs")
            samples.append(ms)
        store.close()
    label = f"claim of 32 from {size.due:,} due runs, {size.sleeping:,} sleeping"
    return {Metric(f"claim_ms_{size.due}_due_{size.sleeping}_sleeping", label, "ms"): samples}


def fanout(trial: Trial, width: int) -> Values:
    """One workflow gathering `width` steps (durably.gather, the worker's concurrency at once)
    and one calling them one after another: seconds, and the gather's speed-up."""

    def one(workflow: str) -> float:
        with trial.fresh() as url:
            app = durably.App(url)

            @app.step(name="part")
            async def part(n: int) -> int:
                return n * 2

            @app.workflow(name="fanout")
            async def gathered(width: int) -> int:
                return sum(await durably.gather(*(part(i) for i in range(width))))

            @app.workflow(name="chain")
            async def chained(width: int) -> int:
                return sum([await part(i) for i in range(width)])

            began = time.perf_counter()
            handle = app.start(workflow, width)
            app.run_until_idle()
            seconds = time.perf_counter() - began
            if handle.result(timeout=0) != width * (width - 1):
                raise BenchmarkError(f"{workflow}: a wrong sum")
            app.close()
            return seconds

    gather_s, chain_s = in_turns(trial, lambda: one("fanout"), lambda: one("chain"))
    return {
        Metric("fanout_s", f"1 wf gathering {width:,} steps", "s"): gather_s,
        Metric("chain_s", f"1 wf calling {width:,} steps in a row", "s"): chain_s,
        Metric("fanout_speedup", "the gather's speed-up over the chain", "x", True): chain_s
        / gather_s,
    }

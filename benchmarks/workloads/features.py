"""What durably's features cost, durably in this process on fresh stores: W1 and the per-step
fit beside runs that sleep, timers due at once, W1 with schedules not due and with retention
deleting old runs, and a fan-out; each two variants in turns, and their change.
"""

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import durably
from benchmarks.plan import Metric, Trial, Values
from benchmarks.runners.durably_runner import bench_app, run_chain
from benchmarks.runners.protocol import BenchmarkError, Load
from benchmarks.stores import fill, vacuum
from durably.stores import open_store
from durably.testing import FakeClock

Variant = tuple[str, str, Callable[[], float]]  # its figure's key, its label, its measure
W1 = Load(1_000, 3)
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


def w1_per_s(url: str, setup: Callable[[durably.App], object] | None = None) -> float:
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
    return {
        Metric("due_s", label, "s"): elapsed,
        Metric("due_per_s", label, "runs/s", True): count / elapsed,
    }


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

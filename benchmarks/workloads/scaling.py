"""Whether durably's costs stay flat as histories, stores and the number of worker processes
grow: durably in this process, and `durably worker` processes; and
claims straight on stores filled with runs of every kind (scaling, priorities).
"""

import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

import durably
from benchmarks.plan import Metric, Trial, Values
from benchmarks.runners.durably_runner import STOP_AT, bench_app, check_completed, wait_ended
from benchmarks.runners.processes import durably_worker, workers
from benchmarks.runners.protocol import BenchmarkError, Load
from benchmarks.stores import LEASE, fill, vacuum
from durably.stores import Claim, Store, open_store
from durably.testing import FakeClock


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


class ClaimTimer:
    """A store whose claim calls are timed; every other call passes straight through."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.calls: list[tuple[float, float, int]] = []  # perf_counter at call, at return; runs

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def claim(self, *args: Any, **kwargs: Any) -> list[Claim]:
        began = time.perf_counter()
        claims = self.store.claim(*args, **kwargs)
        self.calls.append((began, time.perf_counter(), len(claims)))
        return claims


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
    taken = [(start, end) for start, end, runs in timer.calls if runs]
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
    now, samples = FakeClock().now(), []
    with trial.fresh() as url:  # the runs elsewhere first in claim order
        store = open_store(url)
        fill(store, "job", size.finished, at=now - timedelta(hours=1), ended=True)
        fill(store, "elsewhere", size.elsewhere, at=now - timedelta(hours=1))
        fill(store, "job", size.sleeping, at=now, later=timedelta(days=1), priority=lambda n: 10)
        fill(store, "job", size.due, at=now, priority=lambda n: n % 11)
        vacuum(url)
        for _ in range(size.claims):
            began = time.perf_counter()
            if (
                len(store.claim("bench", ["job"], now=now, lease=LEASE, limit=size.take))
                < size.take
            ):
                raise BenchmarkError(f"a claim took fewer than {size.take} runs")
            samples.append(1000 * (time.perf_counter() - began))
        store.close()
    kinds = [(size.due, "due"), (size.sleeping, "sleeping a day"), (size.finished, "finished")]
    held = [f"{n:,} {kind}" for n, kind in [*kinds, (size.elsewhere, "due elsewhere")] if n]
    key = "_".join(f"{n}_{kind.split()[0]}" for n, kind in [*kinds, (size.elsewhere, "elsewhere")])
    return {Metric(f"claim_ms_{key}", f"claim of {size.take}, {', '.join(held)}", "ms"): samples}


def processes(trial: Trial, size: tuple[tuple[int, ...], Load]) -> Values:
    """`durably worker` processes on one store, the load started first: spawn to all ended."""
    (counts, load), values = size, cast(Values, {})
    for count in counts:
        with trial.fresh() as url:
            app = bench_app(url)
            handles = [app.start("chain", i, load.steps) for i in range(load.workflows)]
            began = time.perf_counter()
            with workers(url, count, "--concurrency", str(load.concurrency)) as started:

                def alive() -> None:
                    if any(child.process.poll() is not None for child in started):
                        raise BenchmarkError("a worker process exited")

                wait_ended(app, alive)
                seconds = time.perf_counter() - began
            check_completed(app, handles, load, load.workflows)
            app.close()
        label = f"{count} worker process(es): {load}, spawn to done"
        values[Metric(f"processes_{count}_s", label, "s")] = seconds
    return values

"""Whether durably's costs stay flat as histories, stores and the number of worker processes
grow: durably in this process, and `durably worker` processes of benchmarks.worker_app.
"""

from __future__ import annotations

import signal
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

import durably
from benchmarks.plan import Metric, Trial, Values
from benchmarks.runners.durably_runner import (
    STOP_AT,
    BackgroundWorker,
    add_hop,
    add_long_chain,
    chain_app,
    check_completed,
    time_hops,
)
from benchmarks.runners.processes import durably_worker, workers
from benchmarks.runners.protocol import BenchmarkError, Load
from benchmarks.stores import fill, vacuum
from durably.stores import Claim, Store, open_store

__all__ = ["StoreSizes", "big_stores", "histories", "pickup", "processes"]


def step_starts(history: Sequence[durably.Event], after: int = 0) -> list[datetime]:
    """When each step_started event after event #`after` was written (durably's clock)."""
    kind = durably.EventKind.STEP_STARTED
    return [event.at for event in history if event.kind is kind and event.seq > after]


def ms_per_step(starts: Sequence[datetime]) -> float:
    if len(starts) < 2:
        raise BenchmarkError(f"{len(starts)} step(s) started")
    return 1000 * (starts[-1] - starts[0]).total_seconds() / (len(starts) - 1)


def histories(trial: Trial, lengths: tuple[int, ...]) -> Values:
    """Workflows of each length run alone (concurrency 1; the shorter as many times as make
    1,000 steps): per step, the time from the first to the last step_started event over the
    steps between; the longest's over the shortest's; its last tenth over its first tenth (the
    same run: no drift between runs); and its run_until_idle, whole."""
    values: Values = {}
    per_step: dict[int, float] = {}
    for steps in lengths:
        runs = -(-1_000 // steps)
        with trial.fresh() as url:
            app, chain = chain_app(url, steps)
            handles = [app.start(chain, i) for i in range(runs)]
            began = time.perf_counter()
            finished = app.run_until_idle(concurrency=1)
            seconds = time.perf_counter() - began
            check_completed(app, handles, Load(runs, steps), finished)
            starts = [step_starts(app.client.history(handle.id)) for handle in handles]
            app.close()
        total = sum((each[-1] - each[0]).total_seconds() for each in starts)
        per_step[steps] = 1000 * total / sum(len(each) - 1 for each in starts)
        label = f"history: 1 wf x {steps:,} steps, per step"
        values[Metric(f"history_{steps}_step_ms", label, "ms/step")] = per_step[steps]
    last, n = starts[-1], max(1, lengths[-1] // 10)  # the longest, run last, alone
    drift = ms_per_step(last[-n - 1 :]) / ms_per_step(last[: n + 1])
    tenth, longest = f"{n:,}", f"{lengths[-1]:,}"
    ratio = per_step[lengths[-1]] / per_step[lengths[0]]
    return values | {
        Metric("history_ratio", f"history: per step, {longest} / {lengths[0]} steps", "x"): ratio,
        Metric(
            "history_drift", f"history: {longest} steps, last {tenth} / first {tenth}", "x"
        ): drift,
        Metric("history_run_s", f"history: 1 wf x {longest} steps, whole run", "s"): seconds,
    }


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


def pickup(trial: Trial, size: tuple[int, int]) -> Values:
    """A `durably worker` (lease 1s) SIGKILLs itself in the body of step done + 1; once its
    lease has expired a worker here takes the run over: its claim (loading the whole history),
    the replay until that step's body starts again, both from the worker's start, and the steps
    left, per step."""
    (done, left), reached = size, []
    with trial.fresh() as url:
        timer = ClaimTimer(open_store(url))
        app = durably.App(cast(Store, timer))
        chain = add_long_chain(app, done, lambda: reached.append(time.perf_counter()))
        handle = app.start(chain, 0, done + left)
        crashing = durably_worker(
            url, "--concurrency", "1", "--lease", "1s", env={STOP_AT: str(done)}
        )
        if (code := crashing.wait()) != -signal.SIGKILL:
            raise crashing.failed(f"the crashing worker exited {code}")
        crashing.close()
        run, history = app.client.get(handle.id), app.client.history(handle.id)
        if run.status is not durably.RunStatus.RUNNING or len(step_starts(history)) != done + 1:
            raise BenchmarkError(f"the dead worker left a {run.status} run")
        assert run.available_at is not None  # when its lease expires
        time.sleep(max(0.0, (run.available_at - app.clock.now()).total_seconds()) + 0.05)
        timer.calls.clear()
        began = time.perf_counter()
        check_completed(app, [handle], Load(1, done + left), app.run_until_idle(concurrency=1))
        after = app.client.history(handle.id)[len(history) :]
        app.close()
    taken = [(start, end) for start, end, runs in timer.calls if runs]
    claimed = [event for event in after if event.kind is durably.EventKind.CLAIMED]
    took_over = any("took_over_from" in (event.data or "") for event in claimed)
    if len(taken) != 1 or len(reached) != 1 or len(claimed) != 1 or not took_over:
        raise BenchmarkError(f"pickup: {len(taken)} claims took the run, none a takeover")
    (claim_began, claim_ended), resumed = taken[0], reached[0]
    where = f"pickup after {done:,} steps"
    return {
        Metric("pickup_events", f"{where}: events taken over", "events"): len(history),
        Metric("pickup_claim_ms", f"{where}: claim", "ms"): 1000 * (claim_ended - claim_began),
        Metric("pickup_replay_ms", f"{where}: replay to the next step", "ms"): 1000
        * (resumed - claim_ended),
        Metric("pickup_total_ms", f"{where}: worker start to the next step", "ms"): 1000
        * (resumed - began),
        Metric("pickup_step_ms", f"{where}: {left} more steps, per step", "ms/step"): ms_per_step(
            step_starts(after)
        ),
    }


@dataclass(frozen=True, slots=True)
class StoreSizes:
    finished: tuple[int, ...]  # finished runs in the store while claims are timed
    backlog: int  # pending runs of a workflow the worker does not know
    hops: int
    claims: int

    def cases(self) -> list[tuple[str, str, int, int]]:
        """(key, label, finished runs, pending runs elsewhere) of each store measured."""
        backlog = f"{self.backlog:,} pending runs of another workflow"
        elsewhere = (f"{self.backlog}_pending_elsewhere", backlog, 0, self.backlog)
        return [(f"{n}_finished", f"{n:,} finished runs", n, 0) for n in self.finished] + [
            elsewhere
        ]


def big_stores(trial: Trial, sizes: StoreSizes) -> Values:
    """On a store holding finished runs (3 steps, 9 events each) or a backlog of pending runs
    of a workflow no worker knows: the idle queue hop (a worker in a thread), and store.claim
    of the one due run as an idle worker claims; medians over the repetition's hops, claims."""
    values: Values = {}
    for key, label, finished, pending in sizes.cases():
        with trial.fresh() as url:
            app, chain = chain_app(url, 3)
            hop, ago = add_hop(app), app.clock.now() - timedelta(hours=1)
            fill(app.store, chain.name, finished, at=ago, ended=True)
            fill(app.store, "elsewhere", pending, at=ago)
            vacuum(url)
            with BackgroundWorker(app.worker(concurrency=32)):
                hops = time_hops(app, hop, sizes.hops, 0.01)
            claims, names, lease = [], app.workflow_names(), timedelta(seconds=30)
            for i in range(sizes.claims):
                handle = app.start(chain, i)
                began, now = time.perf_counter(), app.clock.now()
                taken = app.store.claim("bench", names, now=now, lease=lease, limit=32)
                claims.append(1000 * (time.perf_counter() - began))
                if [claim.run_id for claim in taken] != [handle.id]:
                    raise BenchmarkError(f"claim {i} took {len(taken)} runs, not {handle.id}")
            values[Metric(f"claim_ms_{key}", f"claim, store with {label}", "ms")] = (
                statistics.median(claims)
            )
            values[Metric(f"hop_ms_{key}", f"queue hop, store with {label}", "ms")] = (
                statistics.median(hops)
            )
            app.close()
    return values


def processes(trial: Trial, size: tuple[tuple[int, ...], Load]) -> Values:
    """`durably worker` processes on one store, the load started first: from spawning them
    until no run is pending or running (the store polled every 10 ms), and each one's startup
    (spawn to its log line that it started)."""
    (counts, load), left = size, (durably.RunStatus.PENDING, durably.RunStatus.RUNNING)
    values: Values = {}
    for count in counts:
        with trial.fresh() as url:
            app, chain = chain_app(url, load.steps)
            handles = [app.start(chain, i) for i in range(load.workflows)]
            began, deadline = time.perf_counter(), time.monotonic() + 600
            with workers(url, count, "--concurrency", str(load.concurrency)) as started:
                while any(app.client.runs(status=status, limit=1).runs for status in left):
                    if any(c.process.poll() is not None for c in started):
                        raise BenchmarkError(f"one of {count} workers exited")
                    if time.monotonic() > deadline:
                        raise BenchmarkError(f"{count} workers ran past 600 s")
                    time.sleep(0.01)
                seconds = time.perf_counter() - began
            check_completed(app, handles, load, load.workflows)
            app.close()
        startup = statistics.median(c.ready_at - c.spawned_at for c in started if c.ready_at)
        label = f"{count} worker process(es)"
        values[Metric(f"processes_{count}_s", f"{label}: {load}, spawn to done", "s")] = seconds
        values[Metric(f"processes_{count}_startup_s", f"{label}: startup", "s")] = startup
    return values

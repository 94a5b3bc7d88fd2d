"""durably in this process: the runner adapter `InProcess`, the chain workflow every durably
measurement runs, the check that it ran, and a worker serving in a thread.

Only durably and the standard library: benchmarks.runners.durably_runner imports this too,
after its cold-start clock has started.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import durably
from benchmarks.runners.protocol import BenchmarkError, Fresh, Load, Timing

if TYPE_CHECKING:
    from benchmarks.runners.protocol import Recorder

__all__ = [
    "BackgroundWorker",
    "InProcess",
    "add_hop",
    "chain_app",
    "check_completed",
    "run_chain",
    "time_hops",
]

WARM_UP = Load(4, 2, concurrency=2)


class InProcess:
    """durably run by the harness's own interpreter: runs are started first (app.start), then
    app.run_until_idle runs them; a Timing tells the two apart."""

    name = "durably"
    missing: str | None = None

    def warm_up(self, fresh: Fresh) -> None:
        """One tiny run, so that imports and type adapters are not timed."""
        with fresh() as url:
            run_chain(url, WARM_UP)

    def throughput(self, trial: Recorder, url: str, load: Load) -> Timing:
        return run_chain(url, load)


def run_chain(url: str, load: Load) -> Timing:
    """Start every run of `load` on a fresh app, then run them all (app.run_until_idle)."""
    app, chain = chain_app(url, load.steps)
    try:
        began = time.perf_counter()
        handles = [app.start(chain, i) for i in range(load.workflows)]
        started = time.perf_counter()
        finished = app.run_until_idle(concurrency=load.concurrency)
        ended = time.perf_counter()
        check_completed(app, handles, load, finished)
    finally:
        app.close()
    return Timing(start_seconds=started - began, total_seconds=ended - began)


def chain_app(url: str, steps: int) -> tuple[durably.App, durably.Workflow]:
    """A fresh app with one workflow, chain_<steps>(x): `steps` trivial steps in a row, each
    adding one."""
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


def check_completed(
    app: durably.App, handles: Sequence[durably.RunHandle], load: Load, finished: int
) -> None:
    """Every run of `load` (run i started with i) completed, the first and last with i + steps."""
    completed = app.runs(status=durably.RunStatus.COMPLETED, limit=load.workflows + 1)
    if finished != load.workflows or len(completed) != load.workflows:
        raise BenchmarkError(
            f"{load}: the worker finished {finished} runs and {len(completed)} completed"
        )
    for i in (0, len(handles) - 1):
        if (result := handles[i].result(timeout="1s")) != i + load.steps:
            raise BenchmarkError(f"{load}: run {i} returned {result}, not {i + load.steps}")


def add_hop(app: durably.App) -> durably.Workflow:
    """Register hop(t0): one step, which returns how long ago (time.time()) t0 was."""

    @app.step
    async def since(t0: float) -> float:
        return time.time() - t0

    @app.workflow(name="hop")
    async def hop(t0: float) -> float:
        elapsed: float = await since(t0)
        return elapsed

    return hop


def time_hops(app: durably.App, hop: durably.Workflow, count: int, idle: float) -> list[float]:
    """Milliseconds from app.start to the body of the run's first step, one run at a time,
    each after the worker has idled `idle` seconds; one hop first, untimed, once it serves."""
    hops: list[float] = []
    for i in range(-1, count):
        t0 = time.time()
        elapsed = app.start(hop, t0).result(timeout="60s")
        if not isinstance(elapsed, float) or not 0 <= elapsed < 60:
            raise BenchmarkError(f"a hop returned {elapsed!r}, not the seconds since its start")
        if i >= 0:
            hops.append(1000 * elapsed)
        time.sleep(idle)  # the worker goes back to waiting for work
    return hops


class BackgroundWorker:
    """A worker serving in a thread of this process (asyncio.run(worker.serve())) for the
    length of a `with` block; a worker that dies is a BenchmarkError."""

    def __init__(self, worker: durably.Worker) -> None:
        self.worker = worker
        self._loop: asyncio.AbstractEventLoop | None = None
        self._serving = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="bench-worker", daemon=True)

    def _main(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # reported by check(), in the caller's thread
            self._error = exc
            self._serving.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._serving.set()
        await self.worker.serve()

    def check(self) -> None:
        """Raise if the worker died."""
        if self._error is not None:
            raise BenchmarkError(f"the worker died: {self._error!r}") from self._error

    def __enter__(self) -> BackgroundWorker:
        self._thread.start()
        self._serving.wait()
        self.check()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self.worker.stop)
        self._thread.join(timeout=30)
        if self._thread.is_alive():
            raise BenchmarkError("the worker did not stop within 30 s of worker.stop()")
        self.check()

"""durably as every benchmark drives it: `InProcess` (durably in the harness's own process),
the app its measurements run (bench_app), and the runner process's commands
(benchmarks.runners.protocol), each as a durably user writes it. throughput starts every run
(app.start) and runs them (app.run_until_idle); w3-work starts every run, then a worker named
"w3-worker" runs them until SIGKILL, and w3-recover starts a worker under that name in a
thread; queue-hop and queue-throughput call app.start here, the worker serving in a thread
(in-process) or as a `durably worker` process (cross-process); roundtrip waits on
app.start(...).result() here, the worker a `durably worker` process polling once a minute, so
that only its wake-ups move a run; starts (durably's own) times --workflows starts on an empty
store by --mode loop (app.start), batch (start_many of 100) or threads (8 calling app.start);
debounce times --starts debounced starts (a window of a minute) by --mode one-key, keys (100)
or threads (8 on one key). queue-drain and small-key (the queues benchmark) start a backlog
first (start_many), on a queue the app declares, then run it.
The clock of cold-start starts before anything is imported.
"""

# ruff: noqa: E402  (the clock starts before the imports)

from __future__ import annotations

import time

LOADED = time.perf_counter()

import asyncio
import atexit
import functools
import json
import os
import signal
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import durably
from benchmarks.runners import protocol
from benchmarks.runners.protocol import BenchmarkError, Figures, Load, emit, main

if TYPE_CHECKING:
    from benchmarks.plan import Fresh, Trial
    from durably.stores import Store

LEFT = (durably.RunStatus.PENDING, durably.RunStatus.RUNNING)  # a run not ended yet


class InProcess:
    """durably in the harness's process: runs started first, only app.run_until_idle timed."""

    name = "durably"
    missing: str | None = None

    def warm_up(self, fresh: Fresh) -> None:
        with fresh() as url:  # imports and type adapters, not timed
            run_chain(url, Load(4, 2, concurrency=2))

    def throughput(self, trial: Trial, url: str, load: Load) -> float:
        return run_chain(url, load)[1]


def bench_app(
    store: str | Store | None, stop_at: int | None = None, on_stop: Callable[[], object] = sys.exit
) -> durably.App:
    """A fresh app (on $DURABLY_STORE if `store` is None) with chain(x, steps) (its step given
    x == stop_at calls on_stop() first), fanout(width, gathered), hop(t0) and W3's w3(...)."""
    app = durably.App(store)

    @app.step
    async def add_one(x: int) -> int:
        if x == stop_at:
            on_stop()
        return x + 1

    @app.workflow(name="chain")
    async def chain(x: int, steps: int) -> int:
        for _ in range(steps):
            x = await add_one(x)
        return x

    @app.workflow(name="fanout")
    async def fanout(width: int, gathered: bool) -> int:
        if gathered:
            return sum(await durably.gather(*(add_one(n) for n in range(width))))
        return sum([await add_one(n) for n in range(width)])

    touch, since = app.step(protocol.apply_effect), app.step(protocol.since)

    @app.workflow(name="hop")
    async def hop(t0: float) -> float:
        elapsed: float = await since(t0)
        return elapsed

    @app.workflow(name="w3")
    async def w3(index: int, steps: int, sleep_ms: int, path: str) -> int:
        for step in range(steps):
            await touch(path, f"{index}:{step}", sleep_ms)
        return steps

    return app


class ClaimCall(NamedTuple):
    """One claim by a worker: when it began (time.time(), comparable between processes), its
    start and end (time.perf_counter()), the runs it took and the runs it asked for."""

    at: float
    began: float
    ended: float
    got: int
    asked: int


class ClaimTimer:
    """A store whose claim calls are timed (`calls`); every other call passes straight through."""

    def __init__(self, store: Store) -> None:
        self.store, self.calls = store, list[ClaimCall]()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def claim(self, owner: str, workflows: Any, *, limit: int, **options: Any) -> Any:
        at, began = time.time(), time.perf_counter()
        claims = self.store.claim(owner, workflows, limit=limit, **options)
        self.calls.append(ClaimCall(at, began, time.perf_counter(), len(claims), limit))
        return claims

    def write(self, path: Path) -> None:
        """Its calls, as JSON: a worker process's, at its exit."""
        path.write_text(json.dumps(self.calls))


def __getattr__(name: str) -> durably.App:
    """`app`, which `durably worker benchmarks.runners.durably_runner:app` serves on
    $DURABLY_STORE: the step given x == $DURABLY_BENCH_STOP_AT kills it as a crash would; with
    $DURABLY_BENCH_CLAIMS, each claim is timed, and all written to <that directory>/<pid>.json
    when the process exits."""
    if name != "app":
        raise AttributeError(name)
    stop_at = os.environ.get(protocol.STOP_AT)
    kill = functools.partial(os.kill, os.getpid(), signal.SIGKILL)
    store: Store | None = None
    if claims := os.environ.get(protocol.CLAIMS):
        from durably.stores import open_store

        timer = ClaimTimer(open_store(os.environ["DURABLY_STORE"]))
        atexit.register(timer.write, Path(claims) / f"{os.getpid()}.json")
        store = cast("Store", timer)
    return bench_app(store, None if stop_at is None else int(stop_at), kill)


def run_chain(
    url: str, load: Load, setup: Callable[[durably.App], object] = id
) -> tuple[float, float]:
    """`load` on a fresh app (`setup` first): the seconds starting it and running it took."""
    app = bench_app(url)
    try:
        setup(app)
        began = time.perf_counter()
        handles = [app.start("chain", i, load.steps) for i in range(load.workflows)]
        started = time.perf_counter()
        finished = app.run_until_idle(concurrency=load.concurrency)
        ended = time.perf_counter()
        check_completed(app, handles, load, finished)
    finally:
        app.close()
    return started - began, ended - started


def check_completed(app: durably.App, handles: list[durably.RunHandle], load: Load, n: int) -> None:
    """Every run of `load` completed (run i started with i), the first and last with i + steps."""
    completed = app.client.runs(status=durably.RunStatus.COMPLETED, limit=load.workflows).runs
    results = [handles[i].result(timeout="1s") - i for i in (0, len(handles) - 1)]
    if n != load.workflows or {r.id for r in completed} != {h.id for h in handles}:
        raise BenchmarkError(f"{load}: {n} runs ended, not all of them completed")
    if results != [load.steps] * 2:
        raise BenchmarkError(f"{load}: the first and last runs added {results}, not {load.steps}")


def wait_ended(app: durably.App, alive: Callable[[], None]) -> None:
    """Until no run is pending or running (looked at every 10 ms, 600 s at most; `alive()` too)."""
    deadline = time.monotonic() + 600
    while any(app.client.runs(status=status, limit=1).runs for status in LEFT):
        alive()
        if time.monotonic() > deadline:
            raise BenchmarkError("runs still pending or running after 600 s")
        time.sleep(0.01)


@contextmanager
def in_thread(worker: durably.Worker) -> Iterator[Callable[[], None]]:
    """`worker` serving in a thread for the block; yields a check that it has not stopped."""
    loop = asyncio.new_event_loop()
    with ThreadPoolExecutor(1) as pool:
        served = pool.submit(loop.run_until_complete, worker.serve())

        def check() -> None:
            if served.done():
                raise BenchmarkError(f"the worker stopped: {served.exception()!r}")

        yield check
        check()
        loop.call_soon_threadsafe(worker.stop)
        served.result(timeout=30)  # what it died of, if it did on the way out
    loop.close()


@contextmanager
def serving(app: durably.App, url: str, mode: str, *options: str) -> Iterator[durably.Worker]:
    """A worker for `app`, in a thread here or `durably worker OPTIONS` in a child process."""
    from benchmarks.runners.processes import workers

    app.store  # noqa: B018 (opening is the point)
    worker = app.worker(concurrency=32)
    if mode == "in-process":
        with in_thread(worker):
            yield worker
        return
    with workers(url, 1, *options):
        yield worker  # not serving: the child process is


def throughput(args: SimpleNamespace) -> Figures:
    load = Load(args.workflows, args.steps, args.concurrency)
    seconds = run_chain(args.store, load, setup=lambda app: app.store)  # opened before timing
    return {"total_seconds": sum(seconds)}


def w3_work(args: SimpleNamespace) -> None:
    app = bench_app(args.store)
    for i in range(args.workflows):
        app.start("w3", i, args.steps, args.sleep_ms, args.effects)
    emit({"started": args.workflows})
    app.worker(concurrency=args.concurrency, name="w3-worker").run()  # until SIGKILL
    raise BenchmarkError("the worker stopped before it was killed")


def w3_recover(args: SimpleNamespace) -> Figures:
    app = bench_app(args.store)
    with in_thread(app.worker(concurrency=args.concurrency, name="w3-worker")) as check:
        wait_ended(app, check)  # a run left after that is a run lost
    done = app.client.runs(status=durably.RunStatus.COMPLETED, limit=args.workflows + 1).runs
    app.close()
    return {"completed": len(done)}


def queue_hop(args: SimpleNamespace) -> Figures:
    """Milliseconds from app.start to the body of the run's first step, one run at a time,
    each after the worker has idled 50 ms; one hop first, untimed, once it serves."""
    app, hops = bench_app(args.store), list[float]()
    with serving(app, args.store, args.mode):
        for i in range(-1, args.hops):
            elapsed = app.start("hop", time.time()).result(timeout="60s")
            if not isinstance(elapsed, float) or not 0 <= elapsed < 60:
                raise BenchmarkError(f"a hop returned {elapsed!r}, not the seconds since it")
            hops += [1000 * elapsed] if i >= 0 else []
            time.sleep(0.05)  # the worker goes back to waiting for work
    app.close()
    return {"hop_ms": hops}


def queue_throughput(args: SimpleNamespace) -> Figures:
    app = bench_app(args.store)
    with serving(app, args.store, "in-process") as worker:
        began = time.perf_counter()
        handles = [app.start("chain", i, 1) for i in range(args.workflows)]
        while worker.completed < args.workflows and time.perf_counter() - began < 600:
            time.sleep(0.001)
        ended = time.perf_counter()
    check_completed(app, handles, Load(args.workflows, 1), worker.completed)
    app.close()
    return {"total_seconds": ended - began}


def queue_drain(args: SimpleNamespace) -> Figures:
    """--workflows runs of chain(i, --steps) started first (start_many), on the queue of kind
    --queue, over --keys keys; only app.run_until_idle (concurrency --concurrency) timed."""
    app = bench_app(args.store)
    queue = declare(app, args.queue, args.per_key)
    keys = args.keys if queue else 0
    handles = start_backlog(app, args.workflows, args.steps, queue, keys)
    began = time.perf_counter()
    finished = app.run_until_idle(concurrency=args.concurrency)
    seconds = time.perf_counter() - began
    check_completed(app, handles, Load(args.workflows, args.steps), finished)
    app.close()
    return {"total_seconds": seconds}


def small_key(args: SimpleNamespace) -> Figures:
    """--backlog runs of key "big" on a fair queue, then a worker in a thread busy on them
    (--concurrency slots, every one taken); once it has ended a slot's worth, one run of key
    "small" at a time, --samples times: ms from app.start to its result."""
    app = bench_app(args.store)
    declare(app, "fair", None)
    start_backlog(app, args.backlog, 1, protocol.QUEUE, 1, key="big")
    worker, small_ms = app.worker(concurrency=args.concurrency), list[float]()
    with in_thread(worker) as check:
        while worker.completed < args.concurrency:
            check()
            time.sleep(0.001)
        for n in range(args.samples):
            began = time.perf_counter()
            handle = app.start("chain", n, 1, queue=protocol.QUEUE, key="small")
            if (result := handle.result(timeout="60s")) != n + 1:
                raise BenchmarkError(f"a small run returned {result!r}, not {n + 1}")
            small_ms.append(1000 * (time.perf_counter() - began))
        big_ended = worker.completed - args.samples
    app.close()
    if big_ended >= args.backlog:
        raise BenchmarkError(f"the backlog of {args.backlog} ran out before the small runs did")
    return {"small_ms": small_ms, "big_ended": big_ended}


def declare(app: durably.App, kind: str, per_key: int | None) -> str | None:
    """The queue of kind `kind` (protocol.QUEUE_KINDS) declared on `app`: its name, or None
    for runs on no queue."""
    if kind not in protocol.QUEUE_KINDS:
        raise BenchmarkError(f"no queue of kind {kind!r}")
    if kind != "none":
        app.queue(protocol.QUEUE, concurrency_per_key=per_key if kind == "per-key" else None)
    return protocol.QUEUE if kind in ("fair", "per-key") else None


def start_backlog(
    app: durably.App,
    workflows: int,
    steps: int,
    queue: str | None,
    keys: int,
    key: str | None = None,
) -> list[durably.RunHandle]:
    """chain(i, steps) for i below `workflows`, started a thousand a batch, on `queue`, each
    with `key`, else over `keys` keys (protocol.key_of; none if 0); the store opened first."""
    handles: list[durably.RunHandle] = []
    for first in range(0, workflows, 1_000):
        batch = range(first, min(workflows, first + 1_000))
        keyed = [key or (protocol.key_of(i, workflows, keys) if keys else None) for i in batch]
        starts = [
            durably.Start("chain", (i, steps), queue=queue, key=k)
            for i, k in zip(batch, keyed, strict=True)
        ]
        handles += app.start_many(starts)
    return handles


def cold_start(args: SimpleNamespace) -> Figures:
    """durably was imported after LOADED: here, App(url), its workflows, the store opened."""
    app = bench_app(args.store)
    app.store  # noqa: B018 (opening is the point)
    ready_seconds = time.perf_counter() - LOADED
    app.close()
    return {"ready_seconds": ready_seconds}


def roundtrip(args: SimpleNamespace) -> Figures:
    """Start -> result of `chain`, one at a time, run by a worker here (--mode in-process: each
    run handed to it at its start) or in another process (cross-process)."""
    app, totals, heard = bench_app(args.store), list[float](), list[float]()
    with serving(app, args.store, args.mode, "--poll", "60s", "--concurrency", "4"):
        for n in range(-args.warm_up, args.workflows):  # connections, caches, the listener
            began = time.perf_counter()
            handle = app.start("chain", n, args.steps)
            if (result := handle.result(timeout="60s")) != n + args.steps:
                raise BenchmarkError(f"run {n} returned {result!r}, not {n + args.steps}")
            ended, wall = time.perf_counter(), time.time()
            if n >= 0:  # the run's last commit is stamped with the worker's clock before it
                totals.append(1000 * (ended - began))
                heard.append(1000 * (wall - app.client.get(handle.id).updated_at.timestamp()))
    app.close()
    return {"roundtrip_ms": totals, "heard_after_end_ms": heard, "worker_poll_seconds": 60}


def starts(args: SimpleNamespace) -> Figures:
    app = bench_app(args.store)
    app.start("chain", -1, 3)  # the store opened and migrated before the clock starts
    count, every = args.workflows, 8 if args.mode == "threads" else 1

    def starter(first: int) -> None:
        for n in range(first, count, every):
            app.start("chain", n, 3)

    began = time.perf_counter()
    if args.mode == "batch":
        for first in range(0, count, 100):
            batch = range(first, min(count, first + 100))
            app.start_many([durably.Start("chain", (n, 3)) for n in batch])
    else:  # a loop: one thread alone
        with ThreadPoolExecutor(every) as pool:
            list(pool.map(starter, range(every)))
    elapsed = time.perf_counter() - began
    if (found := len(app.client.runs(limit=count + 2).runs)) != count + 1:
        raise BenchmarkError(f"{found} runs in the store, not {count + 1}")
    app.close()
    return {"starts_per_s": count / elapsed}


def debounce(args: SimpleNamespace) -> Figures:
    app = bench_app(args.store)
    app.start("chain", -1, 3, debounce="60s", debounce_key="warm")  # the store opened
    count, every, keys = args.starts, 8 if args.mode == "threads" else 1, protocol.keys(args.mode)

    def starter(first: int) -> None:
        for n in range(first, count, every):
            app.start("chain", n, 3, debounce="60s", debounce_key=f"key-{n % keys}")

    began = time.perf_counter()
    with ThreadPoolExecutor(every) as pool:
        list(pool.map(starter, range(every)))
    elapsed = time.perf_counter() - began
    if (found := len(app.client.runs(limit=count + 2).runs)) != keys + 1:
        raise BenchmarkError(f"{found} runs in the store, not {keys + 1}")
    app.close()
    return {"starts_per_s": count / elapsed}


if __name__ == "__main__":
    commands = [throughput, w3_work, w3_recover, queue_hop, queue_throughput, cold_start]
    main("durably", [*commands, roundtrip, starts, debounce, queue_drain, small_key])

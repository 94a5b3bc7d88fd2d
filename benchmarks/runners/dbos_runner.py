"""DBOS Transact 3.4 under the runner protocol (benchmarks.runners.protocol). Workflows and
steps are async functions under @DBOS.workflow() / @DBOS.step(); DBOS.launch() opens the engine
on `system_database_url` = url in the runner's event loop. throughput calls the workflow
directly, at most C awaited at once (DBOS's fastest path; its queue was slower); w3-work
enqueues every workflow, with a fixed id, on a queue of worker_concurrency C, and w3-recover's
DBOS.launch() puts the PENDING ones of the same executor id and application version back on
it; queue-hop and roundtrip enqueue with DBOSClient on a queue served here (in-process) or by a
`queue-worker` child process; debounce calls Debouncer.debounce (a window of a minute),
from one thread or 8. queue-drain and small-key (the queues benchmark) enqueue a backlog
first, by a DBOS that serves no queue (DBOS.listen_queues([])), a thousand runs a
transaction (DBOSClient.enqueue_in_transaction), then launch DBOS again, serving it, in a new
event loop. Queue workers poll every queue_poll_ms (200 by default, durably's idle poll; DBOS's
is 1 s), get_result every 10 ms (DBOS's: 1 s). DBOS sets neither journal_mode
nor synchronous on SQLite and leaves synchronous_commit to the server: this runner puts the
file in WAL and sets synchronous=FULL or synchronous_commit=on (fast: NORMAL, off) on every
connection of the process, and reports what the first one read back as "durability".
"""

# ruff: noqa: E402  (the clock starts before anything is imported: cold-start counts imports)
# mypy: disable-error-code="import-not-found, untyped-decorator, no-any-return"
# (dbos is the bench extra: where it is not installed, its names are untyped)

import time

STARTED = time.perf_counter()  # before the engine is imported

import asyncio
import functools
import json
import sqlite3
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager, closing
from types import SimpleNamespace
from typing import Any

import sqlalchemy as sa
from dbos import (
    DBOS,
    DBOSClient,
    DBOSConfig,
    Debouncer,
    EnqueueOptions,
    Queue,
    SetEnqueueOptions,
    SetWorkflowID,
)
from sqlalchemy.pool import Pool

from benchmarks.runners import protocol
from benchmarks.runners.protocol import BenchmarkError, Figures, emit, main

RESULT_POLL = 0.01  # seconds between a handle's looks for a finished workflow
QUEUE_POLL_MS = 200  # a queue worker's poll, unless the harness says otherwise
READY = "queue worker ready"  # what a queue-worker says on stderr once it serves
SEEN: dict[str, str] = {}  # the durability settings the first connection read back
ENDED: list[int] = []  # what each run of keyed in this process returned
Enqueue = Callable[..., Awaitable[Any]]  # the workflow's arguments -> its handle
step = DBOS.step()
add_one, touch, since = step(protocol.add_one), step(protocol.apply_effect), step(protocol.since)


@DBOS.workflow(name="chain")
async def chain(x: int, steps: int) -> int:
    for _ in range(steps):
        x = await add_one(x)
    return x


@DBOS.workflow(name="keyed")
async def keyed(x: int, steps: int) -> int:
    for _ in range(steps):
        x = await add_one(x)
    ENDED.append(x)
    return x


@DBOS.workflow(name="w3")
async def w3(index: int, steps: int, sleep_ms: int, path: str) -> int:
    for step in range(steps):
        await touch(path, f"{index}:{step}", sleep_ms)
    return steps


@DBOS.workflow(name="hop")
async def hop(t0: float) -> float:
    return await since(t0)


def hold_durability(args: SimpleNamespace) -> None:
    """Every connection of this process at the durability asked; the first reads it into SEEN."""
    sqlite = args.url.startswith("sqlite")
    names = ["synchronous_commit", "fsync", "wal_sync_method"]
    if sqlite:  # the journal mode is kept in the file
        with closing(sqlite3.connect(sa.make_url(args.url).database or "")) as db:
            db.execute("PRAGMA journal_mode = WAL")
        names = ["journal_mode", "synchronous"]
    level = ("NORMAL" if args.fast else "FULL") if sqlite else ("off" if args.fast else "on")

    setting = f"PRAGMA synchronous = {level}" if sqlite else f"SET synchronous_commit = {level}"

    def connected(connection: Any, _record: Any) -> None:
        cursor = connection.cursor()
        cursor.execute(setting)
        for name in () if SEEN else names:
            cursor.execute(f"PRAGMA {name}" if sqlite else f"SHOW {name}")
            value = str(cursor.fetchone()[0])
            SEEN[name] = {"1": "NORMAL", "2": "FULL"}.get(value, value)  # SQLite's synchronous
        cursor.close()
        connection.commit()  # the pool rolls back on return, which would undo a bare SET

    sa.event.listen(Pool, "connect", connected)


def launch(args: SimpleNamespace) -> None:
    """DBOS open and ready on the store (migrations done, recovery of this executor begun)."""
    hold_durability(args)
    open_dbos(args)


def open_dbos(args: SimpleNamespace, listen: list[str] | None = None) -> None:
    """DBOS launched, serving the queues `listen` names (None: every queue); the application
    version and executor id are fixed, so that w3-recover owns w3-work's."""
    config: DBOSConfig = {"name": "bench", "system_database_url": args.url}
    config |= {"application_version": "bench-1", "executor_id": "bench", "enable_otlp": False}
    DBOS(config=config)
    if listen is not None:
        DBOS.listen_queues(listen)
    DBOS.launch()


async def queue_of(args: SimpleNamespace, name: str, concurrency: int | None = None) -> Queue:
    """Queue `name`, once this process's worker thread for it runs (DBOS's queue thread looks
    for new queues once a second): only then is an idle worker there."""
    poll = args.queue_poll_ms / 1000
    queue = await DBOS.register_queue_async(
        name, worker_concurrency=concurrency, polling_interval_sec=poll
    )
    deadline = time.monotonic() + 10
    while not any(t.name == f"queue-worker-{name}" for t in threading.enumerate()):
        if time.monotonic() > deadline:
            raise BenchmarkError(f"no worker for queue {name} after 10 s")
        await asyncio.sleep(0.01)
    return queue


@asynccontextmanager
async def remote(args: SimpleNamespace, workflow: str) -> AsyncIterator[Enqueue]:
    """A `queue-worker` child serving queue `workflow`; a DBOSClient enqueueing on it."""
    from benchmarks.runners.processes import Child

    serve = {"url": args.url, "fast": args.fast, "queue_poll_ms": args.queue_poll_ms}
    argv = [sys.executable, "-m", "benchmarks.runners.dbos_runner", "queue-worker"]
    argv.append(json.dumps(serve | {"queue": workflow}))
    with Child(argv, ready=READY, stdout=False) as worker:
        worker.wait_started()
        hold_durability(args)  # the client's connections too
        client = DBOSClient(system_database_url=args.url, application_name="bench")
        options: EnqueueOptions = {"queue_name": workflow, "workflow_name": workflow}
        yield lambda *values: client.enqueue_async(options, *values)
        client.destroy()


async def results(handles: list[Any], expected: list[Any], poll: float = RESULT_POLL) -> None:
    """Every handle's result, awaited in enqueue order (queues run FIFO): the one expected."""
    for handle, wanted in zip(handles, expected, strict=True):
        if (result := await handle.get_result(polling_interval_sec=poll)) != wanted:
            raise BenchmarkError(f"a workflow returned {result!r}, not {wanted!r}")


async def throughput(args: SimpleNamespace) -> Figures:
    """Each workflow called and awaited: starting and running cannot be told apart."""
    launch(args)
    gate = asyncio.Semaphore(args.concurrency)

    async def one(i: int) -> None:
        async with gate:
            if (result := await chain(i, args.steps)) != i + args.steps:
                raise BenchmarkError(f"workflow {i} returned {result!r}")

    began = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(args.workflows)))
    return {"total_seconds": time.perf_counter() - began}


async def w3_work(args: SimpleNamespace) -> None:
    launch(args)
    queue, handles = await queue_of(args, "w3", args.concurrency), list[Any]()
    for i in range(args.workflows):
        with SetWorkflowID(f"w3-{i}"):
            handle = await queue.enqueue_async(w3, i, args.steps, args.sleep_ms, args.effects)
        handles.append(handle)
    emit({"started": args.workflows})
    await results(handles, [args.steps] * args.workflows, poll=1.0)  # until killed
    raise BenchmarkError("every workflow finished before the kill")


async def w3_recover(args: SimpleNamespace) -> Figures:
    launch(args)
    await queue_of(args, "w3", args.concurrency)
    ids = [f"w3-{i}" for i in range(args.workflows)]
    retrieve = DBOS.retrieve_workflow_async
    handles: list[Any] = [await retrieve(n, existing_workflow=False) for n in ids]
    await results(handles, [args.steps] * args.workflows)
    done = await DBOS.list_workflows_async(status="SUCCESS", name="w3", load_input=False)
    return {"completed": len(done)}


async def queue_hop(args: SimpleNamespace) -> Figures:
    if args.mode == "cross-process":
        async with remote(args, "hop") as enqueue:
            return {"hop_ms": await hops(args.hops, enqueue)}
    launch(args)
    queue = await queue_of(args, "hop")
    return {"hop_ms": await hops(args.hops, lambda t0: queue.enqueue_async(hop, t0))}


async def hops(count: int, enqueue: Enqueue) -> list[float]:
    """Milliseconds from the enqueue to the first step's body, one hop every 50 ms."""
    measured = []
    for _ in range(count):
        handle = await enqueue(time.time())
        measured.append(1000 * await handle.get_result(polling_interval_sec=RESULT_POLL))
        await asyncio.sleep(0.05)
    return measured


async def queue_worker(args: SimpleNamespace) -> None:
    """The child of remote(): an idle worker on queue `queue` until killed."""
    launch(args)
    await queue_of(args, args.queue)
    print(READY, file=sys.stderr, flush=True)
    await asyncio.Event().wait()


async def queue_throughput(args: SimpleNamespace) -> Figures:
    launch(args)
    queue = await queue_of(args, "throughput", args.concurrency)
    began = time.perf_counter()
    handles = [await queue.enqueue_async(chain, i, 1) for i in range(args.workflows)]
    await results(handles, [i + 1 for i in range(args.workflows)])
    return {"total_seconds": time.perf_counter() - began}


def queue_drain(args: SimpleNamespace) -> Figures:
    """--workflows runs of keyed(i, --steps) enqueued first (backlog), on a plain queue
    (--queue none) or a partitioned one, at most --per-key runs of a partition at once
    (per-key) over --keys keys; then DBOS launched again, serving it: timed from there until
    every run ended."""
    if args.queue not in ("none", "per-key"):
        raise BenchmarkError(f"DBOS 3.4 has no queue like durably's {args.queue!r} one")
    per_key = args.per_key if args.queue == "per-key" else None
    keyed_by = functools.partial(protocol.key_of, workflows=args.workflows, keys=args.keys)
    backlog(
        args,
        per_key,
        [(i, args.steps, keyed_by(i) if per_key else None) for i in range(args.workflows)],
    )
    return asyncio.run(drain(args))


async def drain(args: SimpleNamespace) -> Figures:
    open_dbos(args)
    began = time.perf_counter()
    await ended(args.workflows)
    seconds = time.perf_counter() - began
    done = await DBOS.list_workflows_async(
        status="SUCCESS", queue_name=protocol.QUEUE, load_input=False, load_output=False
    )
    expected = [i + args.steps for i in range(args.workflows)]  # keyed(i, steps)
    if len(done) != args.workflows or sorted(ENDED) != expected:
        raise BenchmarkError(f"{len(done)} runs succeeded, not {args.workflows} (or wrong sums)")
    return {"total_seconds": seconds}


async def ended(count: int, limit: float = 900) -> None:
    """Until `count` runs of keyed have ended here, and no run of the queue is left enqueued
    or running (the last ones' ends committed); looked at every 5 ms, `limit` seconds at most."""
    deadline = time.monotonic() + limit

    async def left() -> bool:
        return len(ENDED) < count or bool(
            await DBOS.list_workflows_async(
                status=["ENQUEUED", "PENDING"],
                queue_name=protocol.QUEUE,
                limit=1,
                load_input=False,
                load_output=False,
            )
        )

    while await left():
        if time.monotonic() > deadline:
            raise BenchmarkError(f"{len(ENDED)} runs ended, not {count}, in {limit:g} s")
        await asyncio.sleep(0.005)


def small_key(args: SimpleNamespace) -> Figures:
    """--backlog runs of partition "big" on a partitioned queue whose partitions may each
    take all --concurrency slots of the worker; then DBOS launched again, serving it; once
    it has ended a slot's worth, one run of partition "small" at a time, --samples times:
    ms from its enqueue to its result."""
    backlog(args, args.concurrency, [(i, 1, "big") for i in range(args.backlog)])
    return asyncio.run(small_runs(args))


async def small_runs(args: SimpleNamespace) -> Figures:
    open_dbos(args)
    queue, small_ms = await DBOS.retrieve_queue_async(protocol.QUEUE), list[float]()
    deadline = time.monotonic() + 60
    while len(ENDED) < args.concurrency:  # the worker busy on big
        if time.monotonic() > deadline:
            raise BenchmarkError(f"{len(ENDED)} runs of big ended in 60 s")
        await asyncio.sleep(0.001)
    assert queue is not None, "registered by backlog()"
    for n in range(args.samples):
        began = time.perf_counter()
        with SetEnqueueOptions(queue_partition_key="small"):
            handle = await queue.enqueue_async(keyed, -1 - n, 1)
        await results([handle], [-n])
        small_ms.append(1000 * (time.perf_counter() - began))
    big_ended = len(ENDED) - args.samples
    if big_ended >= args.backlog:
        raise BenchmarkError(f"the backlog of {args.backlog} ran out before the small runs did")
    return {"small_ms": small_ms, "big_ended": big_ended}


def backlog(
    args: SimpleNamespace, per_key: int | None, runs: list[tuple[int, int, str | None]]
) -> None:
    """Queue QUEUE (partitioned if per_key) and `runs` of keyed(x, steps) on it (each in its
    partition), a thousand a transaction (DBOSClient.enqueue_in_transaction), by a DBOS that
    serves no queue, destroyed after: a backlog waiting for a worker."""

    async def enqueue() -> None:
        open_dbos(args, listen=[])
        await DBOS.register_queue_async(
            protocol.QUEUE,
            worker_concurrency=args.concurrency,
            partition_concurrency=per_key,
            polling_interval_sec=args.queue_poll_ms / 1000,
        )
        client = DBOSClient(system_database_url=args.url, application_name="bench")
        url = sa.make_url(args.url)
        engine = sa.create_engine(
            url if url.drivername == "sqlite" else url.set(drivername="postgresql+psycopg")
        )
        options: EnqueueOptions = {"queue_name": protocol.QUEUE, "workflow_name": "keyed"}
        for first in range(0, len(runs), 1_000):
            with engine.begin() as connection:
                for x, steps, key in runs[first : first + 1_000]:
                    each: EnqueueOptions = (
                        {**options, "queue_partition_key": key} if key else options
                    )
                    client.enqueue_in_transaction(connection, each, x, steps)
        engine.dispose()
        client.destroy()

    asyncio.run(enqueue())
    DBOS.destroy()


async def cold_start(args: SimpleNamespace) -> Figures:
    launch(args)
    return {"ready_seconds": time.perf_counter() - STARTED}


async def roundtrip(args: SimpleNamespace) -> Figures:
    """Start -> result of `chain`, one at a time: started here (--mode in-process:
    DBOS.start_workflow, which runs it in this process at once), or enqueued for a worker in
    another process (cross-process)."""
    if args.mode == "in-process":
        launch(args)

        @asynccontextmanager
        async def here() -> AsyncIterator[Enqueue]:
            yield lambda *values: DBOS.start_workflow_async(chain, *values)

        starting = here()
    else:
        starting = remote(args, "chain")
    totals: list[float] = []
    heard: list[float | None] = []
    async with starting as enqueue:
        for n in range(-args.warm_up, args.workflows):
            began = time.perf_counter()
            handle = await enqueue(n, args.steps)
            await results([handle], [n + args.steps])
            elapsed, wall = 1000 * (time.perf_counter() - began), time.time()
            if n >= 0:  # DBOS stamps the end with the database's clock at its transaction's
                end = (await handle.get_status()).updated_at  # start: on SQLite, to the second
                totals.append(elapsed)
                heard.append(1000 * wall - end if end else None)
    precise = not args.url.startswith("sqlite") or sys.version_info >= (3, 12)
    return {"roundtrip_ms": totals, "heard_after_end_ms": heard if precise else None}


async def debounce(args: SimpleNamespace) -> Figures:
    """--starts debounced starts of `chain` by --mode one-key, keys (100), threads (8)."""
    launch(args)
    debouncer = Debouncer.create_async(chain)
    debouncer.debounce("warm", 60, -1, 3)  # the store opened, the queue's thread running
    count, every, keys = args.starts, 8 if args.mode == "threads" else 1, protocol.keys(args.mode)

    def starter(first: int) -> None:
        for n in range(first, count, every):
            debouncer.debounce(f"key-{n % keys}", 60, n, 3)

    began = time.perf_counter()
    with ThreadPoolExecutor(every) as pool:
        list(pool.map(starter, range(every)))
    elapsed = time.perf_counter() - began
    found = await DBOS.list_workflows_async(name="chain", load_input=False)
    if len(found) != keys + 1:
        raise BenchmarkError(f"{len(found)} workflows in the store, not {keys + 1}")
    return {"starts_per_s": count / elapsed}


def command(
    run: Callable[[SimpleNamespace], Coroutine[Any, Any, Figures | None]],
) -> Callable[[SimpleNamespace], Figures]:
    """`run` in an event loop, DBOS destroyed after: its figures, the polls, the durability."""

    @functools.wraps(run)
    def sync(args: SimpleNamespace) -> Figures:
        args.queue_poll_ms = getattr(args, "queue_poll_ms", QUEUE_POLL_MS)
        figures = asyncio.run(run(args))
        return polled(args, figures or {})

    return sync


def relaunched(run: Callable[[SimpleNamespace], Figures]) -> Callable[[SimpleNamespace], Figures]:
    """`run`, which launches DBOS more than once (each in its own event loop: DBOS.destroy
    shuts the loop's executor down), DBOS destroyed after: as `command`'s."""

    @functools.wraps(run)
    def sync(args: SimpleNamespace) -> Figures:
        args.queue_poll_ms = getattr(args, "queue_poll_ms", QUEUE_POLL_MS)
        hold_durability(args)
        return polled(args, run(args))

    return sync


def polled(args: SimpleNamespace, figures: Figures) -> Figures:
    """The figures, once DBOS is destroyed, with its polls and the durability it ran at."""
    DBOS.destroy()
    polls = {"queue_poll_seconds": args.queue_poll_ms / 1000}
    return {**figures, **polls, "result_poll_seconds": RESULT_POLL, "durability": SEEN}


if __name__ == "__main__":
    commands = [throughput, w3_work, w3_recover, queue_hop, queue_throughput, cold_start]
    main(
        "dbos",
        [
            *(command(run) for run in [*commands, queue_worker, roundtrip, debounce]),
            *(relaunched(run) for run in [queue_drain, small_key]),
        ],
    )

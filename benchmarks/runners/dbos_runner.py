"""DBOS Transact 3.4 under the runner protocol (see benchmarks.runners): the DBOS side of the
side-by-side benchmarks, one measurement per process.

    python -m benchmarks.runners.dbos_runner <command> --url URL [options]

Workflows and steps are async functions decorated with @DBOS.workflow() / @DBOS.step(); the
engine is DBOS(config=...) on `system_database_url` = --url, opened by DBOS.launch() inside
the runner's event loop (so queued workflows run on that loop). How each command uses DBOS:

  throughput        direct calls of the async workflow, at most C awaited at once under an
                    asyncio.Semaphore ("mode": "direct"): DBOS's fastest path, since a queue
                    worker only claims work when it polls (--mode queue measures that path:
                    all N enqueued on a queue with worker_concurrency C).
  w3-work           every workflow enqueued (one committed row each, with a fixed workflow
                    id) on a queue with worker_concurrency C; the queue runs them.
  w3-recover        DBOS.launch() finds the PENDING workflows of this executor id and
                    application version (both fixed, so a new process owns them) and puts them
                    back on their queue (ENQUEUED again, beside the ones never started), which
                    this process polls as the killed one did. It waits for every result.
  queue-hop         a queue worker in this process (in-process), or in a child process running
                    the `queue-worker` command while this one enqueues with DBOSClient
                    (cross-process).
  queue-throughput  N one-step workflows enqueued on a queue with worker_concurrency C.
  cold-start        import, DBOS(config=...) and DBOS.launch() (migrations) on an empty store.
  roundtrip         (not in the protocol: benchmarks.roundtrip's DBOS side) N workflows of S
                    steps (`chain`), one at a time, each enqueued with DBOSClient on a queue
                    that a `queue-worker` child process serves, and waited for with its
                    handle's get_result: ms from before the enqueue to the result, after
                    --warm-up unrecorded ones (the first of which waits for the worker).

Queue workers poll; the poll interval is the queue's `polling_interval_sec` (DBOS's default is
1 s), set here to QUEUE_POLL_SECONDS, durably's default idle poll, and reported in the JSON.
A handle's get_result polls too, every RESULT_POLL_SECONDS (DBOS's default is 1 s).

Durability: DBOS sets neither journal_mode nor synchronous on SQLite (so a new file keeps
SQLite's rollback journal) and leaves synchronous_commit to the PostgreSQL server. This runner
puts the SQLite file in WAL mode before DBOS opens it and sets synchronous (FULL, or NORMAL
with --fast) or synchronous_commit (on, or off with --fast) on every connection any engine of
the process opens (DBOS's own pool and DBOSClient's), reads the settings back on the first
one, prints them to stderr and reports them in the JSON as "durability". Telemetry export
(OTLP) is off, no Conductor key is given, and DBOS 3.4 runs no admin server.
"""

# ruff: noqa: E402  (the clock starts before anything is imported: ready_seconds counts imports)

from __future__ import annotations

import time

STARTED = time.perf_counter()  # before the engine is imported

import argparse
import asyncio
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import closing
from typing import Any

import sqlalchemy as sa
from dbos import (
    DBOS,
    DBOSClient,
    DBOSConfig,
    EnqueueOptions,
    Queue,
    SetWorkflowID,
    WorkflowHandleAsync,
)
from sqlalchemy.pool import Pool

from benchmarks.runners import effects
from benchmarks.runners.protocol import emit, parse_command

APP = "bench"
APP_VERSION = "bench-1"  # fixed, so that w3-recover recovers what w3-work left
EXECUTOR_ID = "bench-executor"  # likewise: DBOS recovers only its own executor's workflows
QUEUE_POLL_SECONDS = 0.2  # how often a queue worker looks for work (DBOS default: 1.0)
RESULT_POLL_SECONDS = 0.01  # how often a handle's get_result looks for a finished workflow
HOP_IDLE_SECONDS = 0.05

W3_QUEUE = "w3"
HOP_QUEUE = "hop"
THROUGHPUT_QUEUE = "throughput"
ROUNDTRIP_QUEUE = "roundtrip"

# -- the workloads ----------------------------------------------------------------------------


@DBOS.step()
async def add_one(x: int) -> int:
    return x + 1


@DBOS.workflow(name="chain")
async def chain(x: int, steps: int) -> int:
    for _ in range(steps):
        x = await add_one(x)
    return x


@DBOS.step()
async def sleep_then_apply(path: str, key: str, sleep_ms: int) -> None:
    await asyncio.sleep(sleep_ms / 1000)
    effects.apply(path, key)


@DBOS.workflow(name="w3")
async def w3(index: int, steps: int, sleep_ms: int, path: str) -> int:
    for step in range(steps):
        await sleep_then_apply(path, f"{index}:{step}", sleep_ms)
    return steps


@DBOS.step()
async def seconds_since(t0: float) -> float:
    return time.time() - t0


@DBOS.workflow(name="hop")
async def hop(t0: float) -> float:
    return await seconds_since(t0)


# -- the engine -------------------------------------------------------------------------------


def enforce_durability(url: str, fast: bool) -> dict[str, str]:
    """Hold every connection of this process to the comparison's durability settings.

    Returns a dict that the first connection fills with the settings it read back."""
    seen: dict[str, str] = {}
    if url.startswith("sqlite"):
        path = sa.make_url(url).database
        assert path, f"no file in {url}"
        with closing(sqlite3.connect(path)) as db:  # the journal mode is kept in the file
            db.execute("PRAGMA journal_mode = WAL")
        level = "NORMAL" if fast else "FULL"

        @sa.event.listens_for(Pool, "connect")
        def sqlite_settings(connection: Any, _record: Any) -> None:
            connection.execute(f"PRAGMA synchronous = {level}")
            if not seen:
                mode = connection.execute("PRAGMA journal_mode").fetchone()[0]
                sync = connection.execute("PRAGMA synchronous").fetchone()[0]
                names = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
                seen.update(journal_mode=str(mode).upper(), synchronous=names[int(sync)])

    else:
        value = "off" if fast else "on"

        @sa.event.listens_for(Pool, "connect")
        def postgres_settings(connection: Any, _record: Any) -> None:
            with connection.cursor() as cursor:
                cursor.execute(f"SET synchronous_commit = {value}")
                if not seen:
                    for name in ("synchronous_commit", "fsync", "wal_sync_method"):
                        cursor.execute(f"SHOW {name}")
                        seen[name] = cursor.fetchone()[0]
            connection.commit()  # the pool rolls back on return, which would undo a bare SET

    return seen


def engine_config(url: str) -> DBOSConfig:
    return {
        "name": APP,
        "system_database_url": url,
        "application_version": APP_VERSION,
        "executor_id": EXECUTOR_ID,
        "enable_otlp": False,
    }


def launch(args: argparse.Namespace) -> dict[str, str]:
    """DBOS open and ready on the store (migrations done, recovery of this executor begun)."""
    seen = enforce_durability(args.url, args.fast)
    DBOS(config=engine_config(args.url))
    DBOS.launch()
    say(f"durability: {seen}")
    return seen


async def register_queue(
    args: argparse.Namespace, name: str, concurrency: int | None = None
) -> Queue:
    return await DBOS.register_queue_async(
        name, worker_concurrency=concurrency, polling_interval_sec=args.queue_poll_ms / 1000
    )


async def idle_worker(args: argparse.Namespace, name: str, concurrency: int | None = None) -> Queue:
    """Queue `name` registered, and this process's worker thread for it running."""
    queue = await register_queue(args, name, concurrency)
    await asyncio.to_thread(wait_for_queue_worker, name)
    return queue


def wait_for_queue_worker(name: str, timeout: float = 10.0) -> None:
    """Until DBOS's queue thread has started the worker thread of queue `name` (it looks for
    newly registered queues once a second): only then is an idle worker running."""
    deadline = time.monotonic() + timeout
    while not any(t.name == f"queue-worker-{name}" for t in threading.enumerate()):
        if time.monotonic() > deadline:
            fail(f"no worker for queue {name} after {timeout:.0f} s")
        time.sleep(0.01)


async def results_in_order(handles: list[Any], poll: float = RESULT_POLL_SECONDS) -> list[Any]:
    """Every handle's result, awaited in enqueue order (queues run FIFO)."""
    return [await h.get_result(polling_interval_sec=poll) for h in handles]


# -- the commands -----------------------------------------------------------------------------


async def throughput(args: argparse.Namespace) -> dict[str, Any]:
    seen = launch(args)
    n, steps = args.workflows, args.steps
    run: Coroutine[Any, Any, tuple[float | None, list[Any]]]
    if args.mode == "direct":
        run = throughput_direct(n, steps, args.concurrency)
    else:
        queue = await idle_worker(args, THROUGHPUT_QUEUE, args.concurrency)
        run = throughput_queued(queue, n, steps)
    began = time.perf_counter()
    start_seconds, results = await run
    total = time.perf_counter() - began
    check_results(results, [i + steps for i in range(n)])
    return {
        "start_seconds": start_seconds,
        "total_seconds": total,
        "completed": n,
        "mode": args.mode,
        **({"queue_poll_seconds": args.queue_poll_ms / 1000} if args.mode == "queue" else {}),
        "durability": seen,
    }


async def throughput_direct(n: int, steps: int, concurrency: int) -> tuple[None, list[Any]]:
    """Each workflow called and awaited; starting and running cannot be told apart."""
    gate = asyncio.Semaphore(concurrency)

    async def one(i: int) -> int:
        async with gate:
            return await chain(i, steps)

    return None, list(await asyncio.gather(*(one(i) for i in range(n))))


async def throughput_queued(queue: Queue, n: int, steps: int) -> tuple[float, list[Any]]:
    began = time.perf_counter()
    handles = [await queue.enqueue_async(chain, i, steps) for i in range(n)]
    start_seconds = time.perf_counter() - began
    return start_seconds, await results_in_order(handles)


async def w3_work(args: argparse.Namespace) -> dict[str, Any]:
    launch(args)
    queue = await register_queue(args, W3_QUEUE, args.concurrency)
    handles: list[Any] = []
    for i in range(args.workflows):
        with SetWorkflowID(w3_id(i)):
            handles.append(
                await queue.enqueue_async(w3, i, args.steps, args.sleep_ms, args.effects)
            )
    emit({"started": args.workflows})
    await results_in_order(handles, poll=1.0)  # nothing is timed here: no need to hurry
    say("w3-work: every workflow finished before the kill")
    return {}


async def w3_recover(args: argparse.Namespace) -> dict[str, Any]:
    seen = launch(args)
    await register_queue(args, W3_QUEUE, args.concurrency)
    ready = time.perf_counter() - STARTED
    say(f"w3-recover: ready after {ready:.3f} s")
    handles: list[WorkflowHandleAsync[int]] = [
        await DBOS.retrieve_workflow_async(w3_id(i), existing_workflow=False)
        for i in range(args.workflows)
    ]
    check_results(await results_in_order(handles), [args.steps] * args.workflows)
    recovered = time.perf_counter() - STARTED
    done = await DBOS.list_workflows_async(
        status="SUCCESS", name="w3", load_input=False, load_output=False
    )
    return {
        "ready_seconds": ready,
        "completed": len(done),
        "recovered_seconds": recovered,
        "queue_poll_seconds": args.queue_poll_ms / 1000,
        "durability": seen,
    }


def w3_id(index: int) -> str:
    return f"w3-{index}"


async def queue_hop(args: argparse.Namespace) -> dict[str, Any]:
    if args.mode == "in-process":
        seen = launch(args)
        queue = await idle_worker(args, HOP_QUEUE)

        async def enqueue(t0: float) -> Any:
            return await queue.enqueue_async(hop, t0)

        return hop_figures(args, await measure_hops(args.hops, enqueue), seen)

    worker = start_worker_process(args, HOP_QUEUE)
    try:
        seen = enforce_durability(args.url, args.fast)  # the client's connections too
        client = DBOSClient(system_database_url=args.url, application_name=APP)
        options: EnqueueOptions = {"queue_name": HOP_QUEUE, "workflow_name": "hop"}

        async def enqueue_remote(t0: float) -> Any:
            return await client.enqueue_async(options, t0)

        hops = await measure_hops(args.hops, enqueue_remote)
        client.destroy()
    finally:
        stop_worker_process(worker)
    return hop_figures(args, hops, seen)


def hop_figures(
    args: argparse.Namespace, hops: list[float], seen: dict[str, Any]
) -> dict[str, Any]:
    poll = args.queue_poll_ms / 1000
    return {"hop_ms": hops, "mode": args.mode, "queue_poll_seconds": poll, "durability": seen}


async def measure_hops(count: int, enqueue: Callable[[float], Awaitable[Any]]) -> list[float]:
    hops = []
    for _ in range(count):
        t0 = time.time()
        handle = await enqueue(t0)
        seconds = await handle.get_result(polling_interval_sec=RESULT_POLL_SECONDS)
        if not isinstance(seconds, float) or seconds < 0:
            fail(f"hop returned {seconds!r}")
        hops.append(seconds * 1000)
        await asyncio.sleep(HOP_IDLE_SECONDS)
    return hops


def start_worker_process(args: argparse.Namespace, queue: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "benchmarks.runners.dbos_runner", "queue-worker"]
    command += ["--url", args.url, "--queue-poll-ms", str(args.queue_poll_ms)]
    command += ["--queue", queue]
    command += ["--fast"] if args.fast else []
    worker = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert worker.stdout is not None
    line = worker.stdout.readline()
    if line.strip() != "ready":
        worker.kill()
        fail(f"the worker process did not start (said {line!r}, exit {worker.wait()})")
    return worker


def stop_worker_process(worker: subprocess.Popen[str]) -> None:
    assert worker.stdin is not None
    worker.stdin.close()  # the worker's cue to shut down
    try:
        worker.wait(timeout=30)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.wait()


async def queue_worker(args: argparse.Namespace) -> None:
    """The child of queue-hop cross-process and of roundtrip: an idle DBOS worker on the queue
    --queue until its standard input closes."""
    launch(args)
    await idle_worker(args, args.queue)
    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.read)


async def queue_throughput(args: argparse.Namespace) -> dict[str, Any]:
    seen = launch(args)
    queue = await idle_worker(args, THROUGHPUT_QUEUE, args.concurrency)
    n = args.workflows
    began = time.perf_counter()
    handles = [await queue.enqueue_async(chain, i, 1) for i in range(n)]
    enqueued = time.perf_counter() - began
    results = await results_in_order(handles)
    total = time.perf_counter() - began
    check_results(results, [i + 1 for i in range(n)])
    say(f"queue-throughput: {n} enqueued in {enqueued:.3f} s")
    return {
        "total_seconds": total,
        "completed": n,
        "queue_poll_seconds": args.queue_poll_ms / 1000,
        "durability": seen,
    }


async def cold_start(args: argparse.Namespace) -> dict[str, Any]:
    seen = launch(args)
    return {"ready_seconds": time.perf_counter() - STARTED, "durability": seen}


async def roundtrip(args: argparse.Namespace) -> dict[str, Any]:
    """Start -> result of `chain`, one workflow at a time, run by a worker in another process."""
    worker = start_worker_process(args, ROUNDTRIP_QUEUE)
    try:
        seen = enforce_durability(args.url, args.fast)  # the client's connections too
        client = DBOSClient(system_database_url=args.url, application_name=APP)
        options: EnqueueOptions = {"queue_name": ROUNDTRIP_QUEUE, "workflow_name": "chain"}
        steps = args.steps

        async def one(n: int) -> tuple[float, float, Any]:
            """ms from before the enqueue to the result in hand, the wall clock then, and the
            workflow's handle."""
            began = time.perf_counter()
            handle = await client.enqueue_async(options, n, steps)
            result = await handle.get_result(polling_interval_sec=RESULT_POLL_SECONDS)
            elapsed, wall = 1000 * (time.perf_counter() - began), time.time()
            if result != n + steps:
                fail(f"workflow {n} returned {result!r}, not {n + steps}")
            return elapsed, wall, handle

        for n in range(args.warm_up):  # the first waits for the worker's first poll
            await one(n)
        totals: list[float] = []
        heard: list[float | None] = []
        for n in range(args.workflows):
            elapsed, wall, handle = await one(n)
            totals.append(elapsed)
            # DBOS stamps the run's end (updated_at, ms) with the database's clock at the start
            # of that transaction: on SQLite before Python 3.12 to the second only
            status = await handle.get_status()
            heard.append(1000 * wall - status.updated_at if status.updated_at else None)
        client.destroy()
    finally:
        stop_worker_process(worker)
    precise = not args.url.startswith("sqlite") or sys.version_info >= (3, 12)
    return {
        "roundtrip_ms": totals,
        "heard_after_end_ms": heard if precise else None,
        "queue_poll_seconds": args.queue_poll_ms / 1000,
        "result_poll_seconds": RESULT_POLL_SECONDS,
        "durability": seen,
    }


Command = Callable[[argparse.Namespace], Coroutine[Any, Any, dict[str, Any] | None]]
COMMANDS: dict[str, Command] = {
    "throughput": throughput,
    "w3-work": w3_work,
    "w3-recover": w3_recover,
    "queue-hop": queue_hop,
    "queue-throughput": queue_throughput,
    "cold-start": cold_start,
    "queue-worker": queue_worker,
    "roundtrip": roundtrip,
}


# -- plumbing ---------------------------------------------------------------------------------


def check_results(results: list[Any], expected: list[Any]) -> None:
    wrong = [(i, r, e) for i, (r, e) in enumerate(zip(results, expected, strict=True)) if r != e]
    if wrong:
        i, got, want = wrong[0]
        fail(f"{len(wrong)} wrong results, the first: workflow {i} returned {got!r}, not {want!r}")


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def fail(message: str) -> None:
    say(f"dbos_runner: {message}")
    raise SystemExit(1)


def parse(argv: list[str] | None) -> argparse.Namespace:
    def own_options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--queue-poll-ms",
            type=float,
            default=QUEUE_POLL_SECONDS * 1000,
            help="the queues' polling_interval_sec, in ms",
        )
        parser.add_argument("--queue", default=HOP_QUEUE, help="queue-worker: the queue served")
        parser.add_argument("--warm-up", type=int, default=10, help="roundtrip: unrecorded first")

    return parse_command(
        "python -m benchmarks.runners.dbos_runner",
        argv,
        commands={
            "throughput": {"mode": "direct"},
            "queue-worker": {},
            "roundtrip": {"workflows": 150, "steps": 3},
        },
        modes={"throughput": ("direct", "queue")},
        more=own_options,
    )


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    figures = asyncio.run(COMMANDS[args.command](args))
    if figures:
        emit(figures)
    DBOS.destroy()


if __name__ == "__main__":
    main()

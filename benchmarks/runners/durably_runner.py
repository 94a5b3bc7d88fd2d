"""The durably runner: the comparison's workloads written as a durably user would write them.

    python -m benchmarks.runners.durably_runner <command> --url URL [options]

The commands, their options and the JSON line each prints are the runner protocol
(benchmarks/runners/__init__.py). How durably does each:

    throughput        app.start of every run (timed on its own: start_seconds), then
                      app.run_until_idle(concurrency=C); every result is checked
    w3-work           app.start of every run, then a worker named "w3-worker" (concurrency
                      32) until SIGKILL
    w3-recover        a new worker under the same name, in a thread of this process, until
                      the store has no run left pending or running
    queue-hop         in-process: a worker serving in a thread of this process;
                      cross-process: a worker in a child process (`serve`, below); the
                      client here calls app.start and waits on the run's handle
    queue-throughput  a worker serving in a thread; app.start from the main thread; the
                      last completion is when the worker has ended N runs
    cold-start        import durably, App(url), register a workflow, open (migrate) the store
    serve             (not in the protocol) the child of queue-hop's cross-process mode:
                      prints "ready" once the store is open, then worker.run() until SIGTERM

Stores: SQLite with synchronous=FULL (NORMAL with --fast); PostgreSQL with
synchronous_commit=on (off with --fast), set per connection.

The clock of cold-start and W3's ready time starts before this module imports anything, and
durably is imported inside the commands, so that both include importing it.
"""

# ruff: noqa: E402  (the clock starts before the imports)

from __future__ import annotations

import time

LOADED = time.perf_counter()  # before anything is imported: cold start and W3 count from here

import argparse
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from benchmarks.runners.protocol import BenchmarkError, emit, parse_command

if TYPE_CHECKING:
    import durably
    from benchmarks.runners.inprocess import BackgroundWorker

__all__ = ["main"]

MODULE = "benchmarks.runners.durably_runner"
W3_WORKER = "w3-worker"  # W3's worker keeps its name across the SIGKILL and the restart
RESULT_WAIT = "60s"  # how long a finished run's handle may take to answer
RECOVERY_LIMIT = 600.0  # seconds w3-recover waits for the runs to end before reporting


# -- stores --------------------------------------------------------------------------------


def store_url(url: str, *, fast: bool) -> str:
    """The harness's URL with the durability the protocol asks for, set per connection."""
    separator = "&" if "?" in url else "?"
    if url.startswith("sqlite:"):
        return f"{url}{separator}synchronous={'NORMAL' if fast else 'FULL'}"
    return f"{url}{separator}synchronous_commit={'off' if fast else 'on'}"


def open_app(url: str) -> durably.App:
    import durably

    return durably.App(url)


def ready(app: durably.App) -> None:
    """Open the store now (connect, migrate), so that no timed part pays for it."""
    app.store  # noqa: B018 (opening is the point)


def wait_until(done: Callable[[], bool], limit: float, pause: float) -> bool:
    """Poll `done` every `pause` seconds for at most `limit` seconds; whether it came true."""
    deadline = time.monotonic() + limit
    while not done():
        if time.monotonic() >= deadline:
            return False
        time.sleep(pause)
    return True


def completed_runs(app: durably.App, expected: int) -> int:
    import durably

    return len(app.runs(status=durably.RunStatus.COMPLETED, limit=expected + 1))


def check_results(
    app: durably.App, handles: list[durably.RunHandle], expect: Callable[[int], Any]
) -> None:
    """Every run completed with the value `expect(i)`, and the store agrees on the count."""
    for i, handle in enumerate(handles):
        if (result := handle.result(timeout=RESULT_WAIT)) != expect(i):
            raise BenchmarkError(f"run {i} ({handle.id}) returned {result!r}, not {expect(i)!r}")
    if (completed := completed_runs(app, len(handles))) != len(handles):
        raise BenchmarkError(f"{completed} runs are completed in the store, not {len(handles)}")


# -- throughput ----------------------------------------------------------------------------


def throughput(args: argparse.Namespace) -> dict[str, Any]:
    from benchmarks.runners.inprocess import chain_app

    app, chain = chain_app(args.store, args.steps)
    try:
        ready(app)
        began = time.perf_counter()
        handles = [app.start(chain, i) for i in range(args.workflows)]
        started = time.perf_counter()
        finished = app.run_until_idle(concurrency=args.concurrency)
        ended = time.perf_counter()
        if finished != args.workflows:
            raise BenchmarkError(f"run_until_idle ended {finished} runs, not {args.workflows}")
        check_results(app, handles, lambda i: i + args.steps)
    finally:
        app.close()
    return {
        "start_seconds": started - began,
        "total_seconds": ended - began,
        "completed": args.workflows,
    }


# -- W3: a worker killed mid-flight, and its successor --------------------------------------


def w3_app(args: argparse.Namespace) -> tuple[durably.App, durably.Workflow]:
    """W3's workflow: `steps` steps, each sleeping, then applying its keyed side effect."""
    import asyncio

    from benchmarks.runners import effects

    app = open_app(args.store)
    pause, sink, steps = args.sleep_ms / 1000, args.effects, args.steps

    @app.step
    async def touch(workflow_index: int, step_index: int) -> None:
        await asyncio.sleep(pause)
        effects.apply(sink, f"{workflow_index}:{step_index}")

    @app.workflow(name="w3")
    async def w3(workflow_index: int) -> int:
        for step_index in range(steps):
            await touch(workflow_index, step_index)
        return workflow_index

    return app, w3


def w3_work(args: argparse.Namespace) -> None:
    app, w3 = w3_app(args)
    for i in range(args.workflows):
        app.start(w3, i)
    emit({"started": args.workflows})
    app.worker(concurrency=args.concurrency, name=W3_WORKER).run()  # until SIGKILL
    raise BenchmarkError("the worker stopped before it was killed")


def w3_recover(args: argparse.Namespace) -> dict[str, Any]:
    from benchmarks.runners.inprocess import BackgroundWorker

    app, _ = w3_app(args)
    ready(app)
    ready_seconds = time.perf_counter() - LOADED
    worker = app.worker(concurrency=args.concurrency, name=W3_WORKER)
    with BackgroundWorker(worker) as background:
        ended = wait_until(lambda: nothing_left(app, background), RECOVERY_LIMIT, pause=0.01)
        recovered_seconds = time.perf_counter() - LOADED
    completed = completed_runs(app, args.workflows)
    if not ended:
        progress(f"w3-recover: runs still pending or running after {RECOVERY_LIMIT:g} s")
    app.close()
    return {
        "ready_seconds": ready_seconds,
        "completed": completed,
        "recovered_seconds": recovered_seconds,
    }


def nothing_left(app: durably.App, background: BackgroundWorker) -> bool:
    """No run is waiting to be claimed or held by a worker (dead or alive)."""
    import durably

    background.check()
    return not any(
        app.runs(status=status, limit=1)
        for status in (durably.RunStatus.PENDING, durably.RunStatus.RUNNING)
    )


# -- the queue -----------------------------------------------------------------------------


def hop_app(url: str) -> tuple[durably.App, durably.Workflow]:
    """A workflow whose first step returns how long ago the client started it."""
    from benchmarks.runners.inprocess import add_hop

    app = open_app(url)
    return app, add_hop(app)


def queue_hop(args: argparse.Namespace) -> dict[str, Any]:
    from benchmarks.runners.inprocess import time_hops

    app, hop = hop_app(args.store)
    ready(app)
    serving = in_process_worker(app) if args.mode == "in-process" else child_worker(args)
    with serving:
        hops = time_hops(app, hop, args.hops, idle=0.05)
    app.close()
    return {"hop_ms": hops}


@contextmanager
def in_process_worker(app: durably.App) -> Iterator[None]:
    from benchmarks.runners.inprocess import BackgroundWorker

    with BackgroundWorker(app.worker()):
        yield


@contextmanager
def child_worker(args: argparse.Namespace) -> Iterator[None]:
    """A worker in a child process (`serve`), stopped with SIGTERM afterwards."""
    import subprocess

    argv = [sys.executable, "-m", MODULE, "serve", "--url", args.url]
    argv += ["--fast"] if args.fast else []
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)  # stderr: this one's
    try:
        assert child.stdout is not None
        if (line := child.stdout.readline().strip()) != "ready":
            raise BenchmarkError(f"the worker process said {line!r}, not 'ready' (see its stderr)")
        yield
    finally:
        child.terminate()
        try:
            code = child.wait(timeout=60)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            raise BenchmarkError("the worker process did not stop within 60 s of SIGTERM") from None
    if code != 0:
        raise BenchmarkError(f"the worker process exited with {code} on SIGTERM")


def serve(args: argparse.Namespace) -> None:
    app, _ = hop_app(args.store)
    ready(app)
    print("ready", flush=True)
    app.worker(concurrency=args.concurrency).run()
    app.close()


def queue_throughput(args: argparse.Namespace) -> dict[str, Any]:
    from benchmarks.runners.inprocess import BackgroundWorker, chain_app

    app, one_step = chain_app(args.store, 1)
    ready(app)
    worker = app.worker(concurrency=args.concurrency)
    with BackgroundWorker(worker) as background:
        began = time.perf_counter()
        handles = [app.start(one_step, i) for i in range(args.workflows)]

        def all_ended() -> bool:
            background.check()
            return bool(worker.completed >= args.workflows)

        if not wait_until(all_ended, limit=600, pause=0.001):
            raise BenchmarkError(f"the worker ended {worker.completed} of {args.workflows} runs")
        ended = time.perf_counter()
    check_results(app, handles, lambda i: i + 1)
    app.close()
    return {"total_seconds": ended - began, "completed": args.workflows}


# -- cold start ----------------------------------------------------------------------------


def cold_start(args: argparse.Namespace) -> dict[str, Any]:
    app = open_app(args.store)  # imports durably

    @app.workflow
    async def nothing() -> None:
        return None

    ready(app)
    ready_seconds = time.perf_counter() - LOADED
    app.close()
    return {"ready_seconds": ready_seconds}


# -- the command ---------------------------------------------------------------------------


COMMANDS: dict[str, Callable[[argparse.Namespace], dict[str, Any] | None]] = {
    "throughput": throughput,
    "w3-work": w3_work,
    "w3-recover": w3_recover,
    "queue-hop": queue_hop,
    "queue-throughput": queue_throughput,
    "cold-start": cold_start,
    "serve": serve,
}


def progress(message: str) -> None:
    print(f"durably runner: {message}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_command(f"python -m {MODULE}", argv, commands={"serve": {"concurrency": 32}})
    args.store = store_url(args.url, fast=args.fast)
    try:
        figures = COMMANDS[args.command](args)
    except BenchmarkError as exc:
        progress(f"{args.command}: {exc}")
        return 1
    if figures is not None:
        emit(figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())

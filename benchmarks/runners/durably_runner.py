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
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import asyncio

    import durably

__all__ = ["main"]

MODULE = "benchmarks.runners.durably_runner"
W3_WORKER = "w3-worker"  # W3's worker keeps its name across the SIGKILL and the restart
RESULT_WAIT = "60s"  # how long a finished run's handle may take to answer
RECOVERY_LIMIT = 600.0  # seconds w3-recover waits for the runs to end before reporting


class WorkNotDone(Exception):
    """The engine did not do the work: no figure may be printed."""


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


class BackgroundWorker:
    """A worker serving in a thread of this process: asyncio.run(worker.serve())."""

    def __init__(self, worker: durably.Worker) -> None:
        import threading

        self.worker = worker
        self._loop: asyncio.AbstractEventLoop | None = None
        self._serving = threading.Event()
        self._error: BaseException | None = None
        self._thread: threading.Thread = threading.Thread(
            target=self._main, name="bench-worker", daemon=True
        )

    def _main(self) -> None:
        import asyncio

        try:
            asyncio.run(self._serve())
        except BaseException as exc:
            self._error = exc
            self._serving.set()

    async def _serve(self) -> None:
        import asyncio

        self._loop = asyncio.get_running_loop()
        self._serving.set()
        await self.worker.serve()

    def check(self) -> None:
        """Raise if the worker died."""
        if self._error is not None:
            raise WorkNotDone(f"the worker died: {self._error!r}") from self._error

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
            raise WorkNotDone("the worker did not stop within 30 s of worker.stop()")
        self.check()


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
            raise WorkNotDone(f"run {i} ({handle.id}) returned {result!r}, not {expect(i)!r}")
    if (completed := completed_runs(app, len(handles))) != len(handles):
        raise WorkNotDone(f"{completed} runs are completed in the store, not {len(handles)}")


# -- throughput ----------------------------------------------------------------------------


def throughput(args: argparse.Namespace) -> dict[str, Any]:
    from benchmarks.core import chain_app

    app, chain = chain_app(args.store, args.steps)
    try:
        ready(app)
        began = time.perf_counter()
        handles = [app.start(chain, i) for i in range(args.workflows)]
        started = time.perf_counter()
        finished = app.run_until_idle(concurrency=args.concurrency)
        ended = time.perf_counter()
        if finished != args.workflows:
            raise WorkNotDone(f"run_until_idle ended {finished} runs, not {args.workflows}")
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
    print(json.dumps({"started": args.workflows}), flush=True)
    app.worker(concurrency=args.concurrency, name=W3_WORKER).run()  # until SIGKILL
    raise WorkNotDone("the worker stopped before it was killed")


def w3_recover(args: argparse.Namespace) -> dict[str, Any]:
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
    """A workflow whose first step returns how long ago the client enqueued it."""
    app = open_app(url)

    @app.step
    async def since(t0: float) -> float:
        return time.time() - t0

    @app.workflow(name="hop")
    async def hop(t0: float) -> float:
        elapsed: float = await since(t0)
        return elapsed

    return app, hop


def queue_hop(args: argparse.Namespace) -> dict[str, Any]:
    app, hop = hop_app(args.store)
    ready(app)
    serving = in_process_worker(app) if args.mode == "in-process" else child_worker(args)
    with serving:
        hop_once(app, hop)  # the worker is up and claiming: not timed
        hops = []
        for _ in range(args.hops):
            hops.append(1000 * hop_once(app, hop))
            time.sleep(0.05)  # idle again
    app.close()
    return {"hop_ms": hops}


def hop_once(app: durably.App, hop: durably.Workflow) -> float:
    t0 = time.time()
    elapsed = app.start(hop, t0).result(timeout=RESULT_WAIT)
    if not isinstance(elapsed, float) or not 0 <= elapsed < 60:
        raise WorkNotDone(f"a hop returned {elapsed!r}, not the seconds since it was enqueued")
    return float(elapsed)


@contextmanager
def in_process_worker(app: durably.App) -> Iterator[None]:
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
            raise WorkNotDone(f"the worker process said {line!r}, not 'ready' (see its stderr)")
        yield
    finally:
        child.terminate()
        try:
            code = child.wait(timeout=60)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            raise WorkNotDone("the worker process did not stop within 60 s of SIGTERM") from None
    if code != 0:
        raise WorkNotDone(f"the worker process exited with {code} on SIGTERM")


def serve(args: argparse.Namespace) -> None:
    app, _ = hop_app(args.store)
    ready(app)
    print("ready", flush=True)
    app.worker(concurrency=args.concurrency).run()
    app.close()


def queue_throughput(args: argparse.Namespace) -> dict[str, Any]:
    from benchmarks.core import chain_app

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
            raise WorkNotDone(f"the worker ended {worker.completed} of {args.workflows} runs")
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


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.runners.durably_runner", description=__doc__.split("\n\n")[0]
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", required=True, help="an empty store made for this measurement")
    common.add_argument("--fast", action="store_true", help="SQLite NORMAL / PostgreSQL off")
    commands = parser.add_subparsers(dest="command", required=True)

    def command(name: str) -> argparse.ArgumentParser:
        return commands.add_parser(name, parents=[common])

    run = command("throughput")
    run.add_argument("--workflows", type=int, required=True)
    run.add_argument("--steps", type=int, required=True)
    run.add_argument("--concurrency", type=int, required=True)
    for name in ("w3-work", "w3-recover"):
        w3 = command(name)
        w3.add_argument("--workflows", type=int, default=500)
        w3.add_argument("--steps", type=int, default=10)
        w3.add_argument("--sleep-ms", type=float, default=10)
        w3.add_argument("--concurrency", type=int, default=32)
        w3.add_argument("--effects", required=True, help="the side-effect sink (a SQLite file)")
    hop = command("queue-hop")
    hop.add_argument("--hops", type=int, default=30)
    hop.add_argument("--mode", choices=["in-process", "cross-process"], required=True)
    queue = command("queue-throughput")
    queue.add_argument("--workflows", type=int, default=1000)
    queue.add_argument("--concurrency", type=int, default=32)
    command("cold-start")
    command("serve").add_argument("--concurrency", type=int, default=32)
    return parser.parse_args(argv)


def progress(message: str) -> None:
    print(f"durably runner: {message}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.store = store_url(args.url, fast=args.fast)
    try:
        figures = COMMANDS[args.command](args)
    except WorkNotDone as exc:
        progress(f"{args.command}: {exc}")
        return 1
    if figures is not None:
        print(json.dumps(figures), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""durably's side of the outputs benchmark (benchmarks.workloads.outputs), under the runner
protocol: `publish` starts a run of --mode's workflow with the id --run_id and serves it in a
worker in a thread of this process, then prints its figures; `read` (another process) reads
what the run publishes as a caller does. The two meet through the run: the run's step sets
event "ready" and waits for the file --go, which the reader makes once it has read "ready".

Modes: events (a step sets e0.. one at a time, --spacing_ms apart, each value its time.time();
then workflow code sets w0.. the same way, each followed by a trivial step whose checkpoint
commits it), stream (a step writes --items integers to stream "items", yielding to the loop
after each, then closes it), quiet (the run waits for signal "checkout", publishing nothing:
the reader counts its statements while blocked in get_event and read_stream for --wait_s
each, then times --updates updates, then sends the signal).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import durably
from durably.runtime.hooks import Hooks
from benchmarks.runners import statements
from benchmarks.runners.durably_runner import in_thread
from benchmarks.runners.protocol import BenchmarkError, Figures, emit, main

READY = "ready"  # the event a run sets once it is about to wait for the reader's go


class Commits(Hooks):
    """When (time.time()) each of the worker's checkpoints committed."""

    def __init__(self) -> None:
        self.at: list[float] = []

    def checkpoint_committed(self, checkpoints: int) -> None:
        self.at.append(time.time())


async def until_go(path: str) -> None:
    """Event READY set (from the step calling this), then wait until the reader's file exists."""
    durably.set_event(READY, True)
    deadline = time.monotonic() + 60
    while not Path(path).exists():
        if time.monotonic() > deadline:
            raise BenchmarkError("the reader never said go")
        await asyncio.sleep(0.001)


def outputs_app(url: str, hooks: Hooks | None = None) -> durably.App:
    app = durably.App(url, hooks=hooks)

    @app.step
    async def step_events(count: int, spacing_ms: float, go: str) -> int:
        await until_go(go)
        for k in range(count):
            await asyncio.sleep(spacing_ms / 1000)
            durably.set_event(f"e{k}", time.time())
        return count

    @app.step
    async def pause(spacing_ms: float) -> None:
        await asyncio.sleep(spacing_ms / 1000)

    @app.step
    async def mark(k: int) -> int:
        return k

    @app.workflow(name="events")
    async def events(count: int, spacing_ms: float, go: str) -> int:
        await step_events(count, spacing_ms, go)
        for k in range(count):
            await pause(spacing_ms)
            durably.set_event(f"w{k}", time.time())
            await mark(k)  # its checkpoint commits the event
        return count

    @app.step
    async def write_items(count: int, go: str) -> dict[str, float]:
        await until_go(go)
        first = time.time()
        for n in range(count):
            durably.write_stream("items", n)
            await asyncio.sleep(0)  # a producer that awaits between items, as a token stream
        durably.close_stream("items")
        return {"first": first, "last": time.time()}

    @app.step
    async def now() -> float:
        return time.time()

    @app.workflow(name="stream")
    async def stream(count: int, go: str) -> dict[str, float]:
        written = await write_items(count, go)
        return written | {"durable": await now()}  # after the step's checkpoint: all stored

    @app.step
    async def ready(go: str) -> None:
        await until_go(go)

    @app.workflow(name="quiet")
    async def quiet(go: str) -> int:
        cart: list[int] = []

        @durably.update
        def add_item(n: int) -> int:
            cart.append(n)
            return len(cart)

        await ready(go)
        await durably.wait_for_signal("checkout")
        return len(cart)

    return app


def publish(args: SimpleNamespace) -> Figures:
    commits = Commits()
    app = outputs_app(args.store, commits)
    if args.mode == "events":
        handle = app.start("events", args.events, args.spacing_ms, args.go, id=args.run_id)
    elif args.mode == "stream":
        handle = app.start("stream", args.items, args.go, id=args.run_id)
    else:
        handle = app.start("quiet", args.go, id=args.run_id)
    emit({"started": handle.id})
    with in_thread(app.worker(concurrency=4)):
        result: Any = handle.result(timeout="300s")
    app.close()
    return {"result": result, "commits": commits.at}


def read(args: SimpleNamespace) -> Figures:
    if args.mode == "quiet":
        statements.count()  # before the store is opened
    app = durably.App(args.store)
    handle = app.handle(args.run_id)
    handle.get_event(READY, timeout="60s")
    Path(args.go).touch()
    if args.mode == "events":
        seen = {}
        for key in [f"e{k}" for k in range(args.events)] + [f"w{k}" for k in range(args.events)]:
            value = handle.get_event(key, timeout="60s")
            seen[key] = [value, time.time()]
        figures: Figures = {"seen": seen}
    elif args.mode == "stream":
        figures = read_items(handle, args.items)
    else:
        figures = quiet(app, handle, args)
    app.close()
    return figures


def read_items(handle: durably.RunHandle, count: int) -> Figures:
    first_seen, read_count = None, 0
    for value in handle.read_stream("items", timeout="60s"):
        if value != read_count:
            raise BenchmarkError(f"item {read_count} of the stream was {value!r}")
        first_seen = first_seen or time.time()
        read_count += 1
    if read_count != count:
        raise BenchmarkError(f"read {read_count} items, not {count}")
    return {"first_seen": first_seen, "last_seen": time.time()}


def quiet(app: durably.App, handle: durably.RunHandle, args: SimpleNamespace) -> Figures:
    waits: dict[str, float] = {}
    for what, wait in {
        "get_event": lambda: handle.get_event("never", timeout=args.wait_s),
        "read_stream": lambda: list(handle.read_stream("nothing", timeout=args.wait_s)),
    }.items():
        before, began = statements.so_far(), time.perf_counter()
        try:
            wait()
        except TimeoutError:
            pass
        else:
            raise BenchmarkError(f"{what} returned on a run that publishes nothing")
        waits[what] = (statements.so_far() - before) / (time.perf_counter() - began)
    updates = []
    for n in range(-2, args.updates):  # two first, untimed: connections, the worker's state
        began = time.perf_counter()
        if handle.update("add_item", n, timeout="60s") != n + 3:
            raise BenchmarkError("an update's answer was not the cart's length")
        updates.append(1000 * (time.perf_counter() - began)) if n >= 0 else None
    app.client.signal(handle.id, "checkout")
    return {"statements_per_s": waits, "update_ms": updates}


if __name__ == "__main__":
    main("durably", [publish, read])

"""durably's side of the outputs benchmark (benchmarks.workloads.outputs), under the runner
protocol: `publish` serves a worker in a thread of this process and runs workflow "outputs"
under the id --run_id (after a small run of it under another id, untimed: imports and type
adapters), then prints its figures; `read`, in another process, reads what the run
publishes as a caller does, having read the small run's first. The two meet through the run:
before each phase, a step sets event "ready-<phase>" and waits until the reader, having read
it, makes the file <--go>/<phase>.

The phases (a count of 0 leaves one out): events (a step sets e0.. one at a time,
--spacing_ms apart, each value its time.time(); then workflow code sets w0.. the same way,
each followed by a trivial step whose checkpoint commits it); stream (a step writes --items
integers to stream "items", yielding to the loop after each, then closes it); quiet (the run
waits for signal "checkout", publishing nothing: the reader counts its SQL statements while
blocked in get_event, then in read_stream, --wait_s each; then times --updates updates).
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import durably
from benchmarks.runners import statements
from benchmarks.runners.durably_runner import in_thread
from benchmarks.runners.protocol import BenchmarkError, Figures, emit, main
from durably.runtime.hooks import Hooks

# the small run's sizes
WARM: dict[str, Any] = {"events": 2, "spacing_ms": 0, "items": 10, "quiet": False}


def say(go: str, *phases: str) -> None:
    """The reader's go for each phase (a file: a stat on a local disk, microseconds)."""
    for phase in phases:
        Path(go, phase).touch()


def said(go: str, phase: str) -> bool:
    return Path(go, phase).exists()


class Commits(Hooks):
    """When (time.time()) each of the worker's checkpoints committed."""

    def __init__(self) -> None:
        self.at: list[float] = []

    def checkpoint_committed(self, checkpoints: int) -> None:
        self.at.append(time.time())


async def until_go(go: str, phase: str) -> None:
    """Event "ready-<phase>" set (from the step calling this); then wait for the reader."""
    durably.set_event(f"ready-{phase}", True)
    deadline = time.monotonic() + 60
    while not said(go, phase):
        if time.monotonic() > deadline:
            raise BenchmarkError(f"the reader never said go for {phase}")
        await asyncio.sleep(0.001)


def outputs_app(url: str, hooks: Hooks) -> durably.App:
    app = durably.App(url, hooks=hooks)

    @app.step
    async def step_events(count: int, spacing_ms: float, go: str) -> int:
        await until_go(go, "events")
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

    @app.step
    async def write_items(count: int, go: str) -> dict[str, float]:
        await until_go(go, "stream")
        first = time.time()
        for n in range(count):
            durably.write_stream("items", n)
            await asyncio.sleep(0)  # a producer that awaits between items, as a token stream
        durably.close_stream("items")
        return {"first": first, "last": time.time()}

    @app.step
    async def now() -> float:
        return time.time()

    @app.step
    async def ready(go: str) -> None:
        await until_go(go, "quiet")

    @app.workflow(name="outputs")
    async def outputs(
        events: int, spacing_ms: float, items: int, quiet: bool, go: str
    ) -> dict[str, float]:
        cart: list[int] = []

        @durably.update
        def add_item(n: int) -> int:
            cart.append(n)
            return len(cart)

        if events:
            await step_events(events, spacing_ms, go)
            for k in range(events):
                await pause(spacing_ms)
                durably.set_event(f"w{k}", time.time())
                await mark(k)  # its checkpoint commits the event
        written: dict[str, float] = {}
        if items:
            written = await write_items(items, go)
            written["durable"] = await now()  # after the step's checkpoint: every item stored
        if quiet:
            await ready(go)
            await durably.wait_for_signal("checkout")
        return written

    return app


def publish(args: SimpleNamespace) -> Figures:
    commits = Commits()
    app = outputs_app(args.store, commits)
    sizes: dict[str, Any] = {
        "events": args.events,
        "spacing_ms": args.spacing_ms,
        "items": args.items,
    }
    with in_thread(app.worker(concurrency=4)), tempfile.TemporaryDirectory() as warm_go:
        say(warm_go, "events", "stream", "quiet")
        app.start("outputs", **WARM, go=warm_go, id=f"{args.run_id}-warm").result(timeout="60s")
        commits.at.clear()
        handle = app.start("outputs", **sizes, quiet=args.quiet, go=args.go, id=args.run_id)
        emit({"started": handle.id})
        written = handle.result(timeout="300s")
    app.close()
    return {"written": written, "commits": commits.at}


def read(args: SimpleNamespace) -> Figures:
    statements.count()  # before the store is opened
    app = durably.App(args.store)
    warm = app.handle(f"{args.run_id}-warm")
    read_events(warm, WARM["events"])
    read_items(warm, WARM["items"])
    handle, figures = app.handle(args.run_id), Figures()
    if args.events:
        figures["seen"] = read_events(handle, args.events, args.go)
    if args.items:
        figures |= read_items(handle, args.items, args.go)
    if args.quiet:
        figures |= quiet(app, handle, args)
    app.close()
    return figures


def said_go(handle: durably.RunHandle, go: str | None, phase: str) -> None:
    """Once the run is ready for the phase, tell it to go (a warm run needs no telling)."""
    if go is not None:
        handle.get_event(f"ready-{phase}", timeout="60s")
        say(go, phase)


def read_events(handle: durably.RunHandle, count: int, go: str | None = None) -> Figures:
    """Each event's value and when it was seen, waiting for each in turn."""
    said_go(handle, go, "events")
    seen = {}
    for key in [f"e{k}" for k in range(count)] + [f"w{k}" for k in range(count)]:
        value = handle.get_event(key, timeout="60s")
        seen[key] = [value, time.time()]
    return seen


def read_items(handle: durably.RunHandle, count: int, go: str | None = None) -> Figures:
    said_go(handle, go, "stream")
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
    """Statements/s blocked on the silent run; then the updates' round trips; then the signal."""
    said_go(handle, args.go, "quiet")
    waits: dict[str, float] = {}
    blocking: dict[str, Callable[[], object]] = {
        "get_event": lambda: handle.get_event("never", timeout=args.wait_s),
        "read_stream": lambda: list(handle.read_stream("nothing", timeout=args.wait_s)),
    }
    for what, wait in blocking.items():
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
        if n >= 0:
            updates.append(1000 * (time.perf_counter() - began))
    app.client.signal(handle.id, "checkout")
    return {"statements_per_s": waits, "update_ms": updates}


if __name__ == "__main__":
    main("durably", [publish, read])

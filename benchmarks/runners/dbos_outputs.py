"""DBOS 3.4's side of the outputs benchmark (benchmarks.workloads.outputs), the same commands,
phases and warm-up as durably's (benchmarks.runners.durably_outputs), as a DBOS user writes
them: `publish` launches DBOS (dbos_runner.launch: WAL and synchronous=FULL on SQLite, or
synchronous_commit=on) and starts workflow "outputs" with the id --run_id; `read` is a
DBOSClient in another process, with use_listen_notify on PostgreSQL (woken by NOTIFY, as DBOS
itself is by default; the client's default is off) and its defaults on SQLite, where DBOS has
no cross-process wake-up and a waiting get_event or read_stream polls every second.

DBOS commits each set_event and each write_stream in a transaction of its own when it is
called, from a step or from workflow code, so a set's "commit" is when the call returned. The
quiet phase's run waits in DBOS.recv for the message "checkout"; DBOS has nothing like an
update (a call answered by the run's code), so the reader times none.
"""

# mypy: disable-error-code="import-not-found, untyped-decorator, no-any-return"
# (dbos is the bench extra: where it is not installed, its names are untyped)

import asyncio
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from dbos import DBOS, DBOSClient, SetWorkflowID

from benchmarks.runners import statements
from benchmarks.runners.dbos_runner import command, hold_durability, launch
from benchmarks.runners.protocol import BenchmarkError, Figures, emit, main

# the small run's sizes
WARM: dict[str, Any] = {"events": 2, "spacing_ms": 0, "items": 10, "quiet": False}


def say(go: str, *phases: str) -> None:
    """The reader's go for each phase (a file: a stat on a local disk, microseconds)."""
    for phase in phases:
        Path(go, phase).touch()


def said(go: str, phase: str) -> bool:
    return Path(go, phase).exists()


async def until_go(go: str, phase: str) -> None:
    """Event "ready-<phase>" set (from the step calling this); then wait for the reader."""
    await DBOS.set_event_async(f"ready-{phase}", True)
    deadline = time.monotonic() + 60
    while not said(go, phase):
        if time.monotonic() > deadline:
            raise BenchmarkError(f"the reader never said go for {phase}")
        await asyncio.sleep(0.001)


@DBOS.step()
async def step_events(count: int, spacing_ms: float, go: str) -> list[float]:
    await until_go(go, "events")
    committed = []
    for k in range(count):
        await asyncio.sleep(spacing_ms / 1000)
        await DBOS.set_event_async(f"e{k}", time.time())
        committed.append(time.time())
    return committed


@DBOS.step()
async def pause(spacing_ms: float) -> None:
    await asyncio.sleep(spacing_ms / 1000)


@DBOS.step()
async def write_items(count: int, go: str) -> dict[str, float]:
    await until_go(go, "stream")
    first = time.time()
    for n in range(count):
        await DBOS.write_stream_async("items", n)
    await DBOS.close_stream_async("items")
    last = time.time()
    return {"first": first, "last": last, "durable": last}  # each write committed as called


@DBOS.step()
async def ready(go: str) -> None:
    await until_go(go, "quiet")


@DBOS.workflow(name="outputs")
async def outputs(events: int, spacing_ms: float, items: int, quiet: bool, go: str) -> Figures:
    committed = await step_events(events, spacing_ms, go) if events else []
    for k in range(events):
        await pause(spacing_ms)
        await DBOS.set_event_async(f"w{k}", time.time())
        committed.append(time.time())
    written = await write_items(items, go) if items else {}
    if quiet:
        await ready(go)
        await DBOS.recv_async("checkout", timeout_seconds=300)
    return {"written": written, "commits": committed}


async def publish(args: SimpleNamespace) -> Figures:
    launch(args)
    sizes: dict[str, Any] = {
        "events": args.events,
        "spacing_ms": args.spacing_ms,
        "items": args.items,
    }
    with tempfile.TemporaryDirectory() as warm_go:
        say(warm_go, "events", "stream", "quiet")
        with SetWorkflowID(f"{args.run_id}-warm"):
            warm = await DBOS.start_workflow_async(outputs, **WARM, go=warm_go)
        await warm.get_result()
    with SetWorkflowID(args.run_id):
        handle = await DBOS.start_workflow_async(outputs, **sizes, quiet=args.quiet, go=args.go)
    emit({"started": args.run_id})
    result: Figures = await handle.get_result()
    return result


async def read(args: SimpleNamespace) -> Figures:
    statements.count()  # before the client connects
    hold_durability(args)
    listen = not args.url.startswith("sqlite")
    client = DBOSClient(system_database_url=args.url, use_listen_notify=listen)
    warm = f"{args.run_id}-warm"
    await read_events(client, warm, WARM["events"])
    read_items(client, warm, WARM["items"])
    run, figures = args.run_id, Figures()
    if args.events:
        figures["seen"] = await read_events(client, run, args.events, args.go)
    if args.items:
        await said_go(client, run, args.go, "stream")
        figures |= read_items(client, run, args.items)
    if args.quiet:
        await said_go(client, run, args.go, "quiet")
        figures |= await waits(client, run, args.wait_s)
        await client.send_async(run, "go", "checkout")
    client.destroy()
    return figures | {"use_listen_notify": listen}


async def said_go(client: DBOSClient, run: str, go: str | None, phase: str) -> None:
    """Once the run is ready for the phase, tell it to go (a warm run needs no telling)."""
    if go is None:
        return
    if await client.get_event_async(run, f"ready-{phase}", timeout_seconds=60) is not True:
        raise BenchmarkError(f"the run never got ready for {phase}")
    say(go, phase)


async def read_events(client: DBOSClient, run: str, count: int, go: str | None = None) -> Figures:
    await said_go(client, run, go, "events")
    seen = {}
    for key in [f"e{k}" for k in range(count)] + [f"w{k}" for k in range(count)]:
        value = await client.get_event_async(run, key, timeout_seconds=60)
        seen[key] = [value, time.time()]
    return seen


def read_items(client: DBOSClient, run: str, count: int) -> Figures:
    first_seen, read_count = None, 0
    for value in client.read_stream(run, "items", timeout_seconds=60):
        if value != read_count:
            raise BenchmarkError(f"item {read_count} of the stream was {value!r}")
        first_seen = first_seen or time.time()
        read_count += 1
    if read_count != count:
        raise BenchmarkError(f"read {read_count} items, not {count}")
    return {"first_seen": first_seen, "last_seen": time.time()}


async def waits(client: DBOSClient, run: str, wait_s: float) -> Figures:
    """Statements/s while blocked in get_event, then in read_stream, on a silent run."""

    def stream() -> None:
        try:
            list(client.read_stream(run, "nothing", timeout_seconds=wait_s))
        except Exception as timed_out:  # DBOSStreamTimeoutError
            if "Timeout" not in type(timed_out).__name__:
                raise
            return
        raise BenchmarkError("read_stream ended on a run that publishes nothing")

    per_s: dict[str, float] = {}
    for what, wait in {
        "get_event": lambda: client.get_event(run, "never", timeout_seconds=wait_s),
        "read_stream": stream,
    }.items():
        before, began = statements.so_far(), time.perf_counter()
        if await asyncio.to_thread(wait) is not None:
            raise BenchmarkError(f"{what} returned a value on a run that publishes nothing")
        per_s[what] = (statements.so_far() - before) / (time.perf_counter() - began)
    return {"statements_per_s": per_s, "update_ms": None}


if __name__ == "__main__":
    main("dbos", [command(publish), command(read)])

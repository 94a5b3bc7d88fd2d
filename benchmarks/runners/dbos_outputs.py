"""DBOS 3.4's side of the outputs benchmark (benchmarks.workloads.outputs), the same commands
and modes as durably's (benchmarks.runners.durably_outputs), as a DBOS user writes them:
`publish` launches DBOS (dbos_runner.launch: WAL and synchronous=FULL on SQLite, or
synchronous_commit=on) and starts the mode's workflow with the id --run_id; `read` is a
DBOSClient in another process, with use_listen_notify on PostgreSQL (woken by NOTIFY, as DBOS
itself is by default; the client's default is off) and its defaults on SQLite, where DBOS has
no cross-process wake-up and a waiting get_event or read_stream polls every second.

DBOS commits each set_event and each write_stream in a transaction of its own when it is
called, from a step or from workflow code, so a set's "commit" is when the call returned. The
quiet mode's run waits in DBOS.recv for the message "checkout"; DBOS has nothing like an
update (a call answered by the run's code), so the reader times none.
"""

# mypy: disable-error-code="import-not-found, untyped-decorator, no-any-return"
# (dbos is the bench extra: where it is not installed, its names are untyped)

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from dbos import DBOS, DBOSClient, SetWorkflowID

from benchmarks.runners import statements
from benchmarks.runners.dbos_runner import command, hold_durability, launch
from benchmarks.runners.protocol import BenchmarkError, Figures, emit, main

READY = "ready"  # the event a run sets once it is about to wait for the reader's go


async def until_go(path: str) -> None:
    await DBOS.set_event_async(READY, True)
    deadline = time.monotonic() + 60
    while not Path(path).exists():
        if time.monotonic() > deadline:
            raise BenchmarkError("the reader never said go")
        await asyncio.sleep(0.001)


@DBOS.step()
async def step_events(count: int, spacing_ms: float, go: str) -> list[float]:
    await until_go(go)
    committed = []
    for k in range(count):
        await asyncio.sleep(spacing_ms / 1000)
        await DBOS.set_event_async(f"e{k}", time.time())
        committed.append(time.time())
    return committed


@DBOS.step()
async def pause(spacing_ms: float) -> None:
    await asyncio.sleep(spacing_ms / 1000)


@DBOS.workflow(name="events")
async def events(count: int, spacing_ms: float, go: str) -> list[float]:
    committed = await step_events(count, spacing_ms, go)
    for k in range(count):
        await pause(spacing_ms)
        await DBOS.set_event_async(f"w{k}", time.time())
        committed.append(time.time())
    return committed


@DBOS.step()
async def write_items(count: int, go: str) -> dict[str, float]:
    await until_go(go)
    first = time.time()
    for n in range(count):
        await DBOS.write_stream_async("items", n)
    await DBOS.close_stream_async("items")
    return {"first": first, "last": time.time()}


@DBOS.workflow(name="stream")
async def stream(count: int, go: str) -> dict[str, float]:
    written = await write_items(count, go)
    return written | {"durable": written["last"]}  # each write committed when it returned


@DBOS.step()
async def ready(go: str) -> None:
    await until_go(go)


@DBOS.workflow(name="quiet")
async def quiet(go: str) -> int:
    await ready(go)
    await DBOS.recv_async("checkout", timeout_seconds=300)
    return 0


async def publish(args: SimpleNamespace) -> Figures:
    launch(args)
    with SetWorkflowID(args.run_id):
        if args.mode == "events":
            handle = await DBOS.start_workflow_async(events, args.events, args.spacing_ms, args.go)
        elif args.mode == "stream":
            handle = await DBOS.start_workflow_async(stream, args.items, args.go)
        else:
            handle = await DBOS.start_workflow_async(quiet, args.go)
    emit({"started": args.run_id})
    result: Any = await handle.get_result()
    commits = result if args.mode == "events" else []
    return {"result": None if commits else result, "commits": commits}


async def read(args: SimpleNamespace) -> Figures:
    if args.mode == "quiet":
        statements.count()  # before the client connects
    hold_durability(args)
    listen = not args.url.startswith("sqlite")
    client = DBOSClient(system_database_url=args.url, use_listen_notify=listen)
    run = args.run_id
    if await client.get_event_async(run, READY, timeout_seconds=60) is not True:
        raise BenchmarkError("the run never set ready")
    Path(args.go).touch()
    if args.mode == "events":
        seen = {}
        for key in [f"e{k}" for k in range(args.events)] + [f"w{k}" for k in range(args.events)]:
            value = await client.get_event_async(run, key, timeout_seconds=60)
            seen[key] = [value, time.time()]
        figures: Figures = {"seen": seen}
    elif args.mode == "stream":
        figures = read_items(client, run, args.items)
    else:
        figures = await waits(client, run, args.wait_s)
        await client.send_async(run, "go", "checkout")
    client.destroy()
    return figures | {"use_listen_notify": listen}


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

"""Waiting runs cost nothing: W1 and the per-step cost beside 100,000 sleeping runs, and how
fast 10,000 timers that come due at once fire.

For each store (SQLite: a fresh file, WAL, synchronous=FULL; PostgreSQL: a fresh schema,
synchronous_commit=on), durably in this process:

    park      start --sleepers runs of a workflow that sleeps a day (app.start_many), and run
              each to its timer: they are pending, with a due time, holding no worker. On
              PostgreSQL the table is then vacuumed, as autovacuum does within minutes: until
              then the index of due times holds the parked runs' dead versions, which every
              claim steps over (W1 measured ~40% slower right after parking 100,000)
    w1        W1 (1,000 workflows x 3 trivial steps, concurrency 32) on an empty store and on
              the store with the sleepers, alternately, --repeat times each
    seq       one workflow at a time, 100 x 3 and 30 x 20 steps: the per-step cost (the slope
              of time per workflow over steps), on both stores likewise
    due       --due runs sleep until the same moment (a fake clock, so nobody waits for it);
              the clock passes it, and a worker (concurrency 256) fires every timer and ends
              every run: the time from the moment to the last run's end

    python -m benchmarks.sleepers                          # both stores, full sizes
    python -m benchmarks.sleepers --sleepers 10000 --due 2000 --stores sqlite

The table goes to stdout (progress to stderr), every sample to
benchmarks/results/sleepers-latest.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack
from datetime import timedelta
from pathlib import Path
from typing import Any

import durably
from benchmarks.runners.inprocess import chain_app
from benchmarks.runners.protocol import Load
from benchmarks.stores import POSTGRES_URL, fresh_schema, fresh_sqlite, postgres_problem
from durably.testing import FakeClock

__all__ = ["main"]

RESULTS = Path(__file__).parent / "results" / "sleepers-latest.json"
W1 = Load(1_000, 3)
SHORT, LONG = Load(100, 3, concurrency=1), Load(30, 20, concurrency=1)
BATCH = 1_000  # runs a start_many call starts


def sleeper_app(url: str, clock: FakeClock | None = None) -> durably.App:
    app = durably.App(url, clock=clock)

    @app.workflow(name="sleeper")
    async def sleeper(seconds: float) -> str:
        await durably.sleep(seconds)
        return "woke"

    return app


def park(url: str, count: int, seconds: float, clock: FakeClock | None = None) -> float:
    """Start `count` runs that sleep `seconds` and run each to its timer; seconds taken."""
    app = sleeper_app(url, clock)
    try:
        began = time.perf_counter()
        for first in range(0, count, BATCH):
            size = min(BATCH, count - first)
            app.start_many([durably.Start("sleeper", (seconds,)) for _ in range(size)])
        app.run_until_idle(concurrency=256)
        elapsed = time.perf_counter() - began
        pending = app.runs(status=durably.RunStatus.PENDING, limit=count + 1)
        if len(pending) != count:
            raise RuntimeError(f"{len(pending)} runs sleep, not {count}")
        return elapsed
    finally:
        app.close()


def chain_seconds(url: str, load: Load) -> float:
    """Run `load` (every run started first) on the store at `url`, which may hold other runs;
    the seconds app.run_until_idle took."""
    app, chain = chain_app(url, load.steps)
    try:
        handles = [app.start(chain, i) for i in range(load.workflows)]
        began = time.perf_counter()
        finished = app.run_until_idle(concurrency=load.concurrency)
        elapsed = time.perf_counter() - began
        if (
            finished != load.workflows
            or handles[-1].result(timeout=0) != len(handles) - 1 + load.steps
        ):
            raise RuntimeError(f"{load}: {finished} runs ended, not {load.workflows}")
        return elapsed
    finally:
        app.close()


def settle(url: str) -> None:
    """Vacuum a PostgreSQL store's tables, as autovacuum would soon after the parking."""
    if url.startswith("postgresql"):
        import psycopg

        with psycopg.connect(url, autocommit=True) as db:
            db.execute("VACUUM ANALYZE durably_runs, durably_events")


def per_step_ms(url: str) -> float:
    """The slope of milliseconds per workflow over steps, one workflow at a time."""
    short, long = (chain_seconds(url, load) / load.workflows for load in (SHORT, LONG))
    return 1000 * (long - short) / (LONG.steps - SHORT.steps)


def due_at_once(url: str, count: int) -> dict[str, float]:
    """Park `count` runs sleeping until one moment, pass it, time the firing of them all."""
    clock = FakeClock()
    park_seconds = park(url, count, 3600.0, clock)
    clock.advance(timedelta(hours=1))
    app = sleeper_app(url, clock)
    try:
        began = time.perf_counter()
        ended = app.run_until_idle(concurrency=256)
        elapsed = time.perf_counter() - began
    finally:
        app.close()
    if ended != count:
        raise RuntimeError(f"{ended} runs woke and ended, not {count}")
    return {"park_s": park_seconds, "fire_s": elapsed, "fired_per_s": count / elapsed}


def measure(
    fresh: Callable[[], AbstractContextManager[str]], args: argparse.Namespace
) -> dict[str, Any]:
    samples: dict[str, list[float]] = {k: [] for k in ("w1_empty", "w1_sleepers", "step_empty",
                                                        "step_sleepers")}  # fmt: skip
    with ExitStack() as stack:
        empty, crowded = stack.enter_context(fresh()), stack.enter_context(fresh())
        say(f"  parking {args.sleepers:,} sleeping runs")
        park_s = park(crowded, args.sleepers, 86_400.0)
        settle(crowded)
        for rep in range(args.repeat):
            say(f"  repetition {rep + 1}/{args.repeat}")
            for label, url in (("empty", empty), ("sleepers", crowded))[:: 1 if rep % 2 else -1]:
                samples[f"w1_{label}"].append(W1.workflows / chain_seconds(url, W1))
                samples[f"step_{label}"].append(per_step_ms(url))
    with fresh() as url:
        say(f"  {args.due:,} timers due at once")
        due = due_at_once(url, args.due)
    return {"park_seconds": park_s, "samples": samples, "due": due}


def report(store: str, figures: dict[str, Any], args: argparse.Namespace) -> list[str]:
    s = {k: statistics.median(v) for k, v in figures["samples"].items()}
    due = figures["due"]
    return [
        f"{store}: parked {args.sleepers:,} sleeping runs in {figures['park_seconds']:.1f} s",
        f"  W1 workflows/s     empty {s['w1_empty']:9,.0f}   beside the sleepers "
        f"{s['w1_sleepers']:9,.0f}   ({pct(s['w1_sleepers'], s['w1_empty'])})",
        f"  per-step ms        empty {s['step_empty']:9.3f}   beside the sleepers "
        f"{s['step_sleepers']:9.3f}   ({pct(s['step_sleepers'], s['step_empty'])})",
        f"  {args.due:,} timers due at once: all fired and ended in {due['fire_s']:.2f} s "
        f"({due['fired_per_s']:,.0f} runs/s)",
    ]


def pct(value: float, base: float) -> str:
    return f"{100 * (value - base) / base:+.1f}%"


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def stores(names: Sequence[str], server: str) -> Iterator[tuple[str, Callable[[], Any]]]:
    for name in names:
        if name == "sqlite":
            yield name, fresh_sqlite
        elif (problem := postgres_problem(server)) is not None:
            say(f"postgres skipped: {problem}")
        else:
            yield name, lambda: fresh_schema(server)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.sleepers",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--sleepers", type=int, default=100_000)
    parser.add_argument("--due", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--postgres-url", default=POSTGRES_URL)
    args = parser.parse_args(argv)
    results: dict[str, Any] = {"sleepers": args.sleepers, "due": args.due, "stores": {}}
    lines: list[str] = []
    for name, fresh in stores(args.stores.split(","), args.postgres_url):
        say(f"{name}:")
        figures = measure(fresh, args)
        results["stores"][name] = figures
        lines += report(name, figures, args)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

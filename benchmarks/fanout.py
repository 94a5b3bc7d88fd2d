"""Fan-out: one run whose durably.gather runs 1,000 steps, against the same 1,000 steps one
after another, and memory held at the widest point.

For each store (SQLite: a fresh file; PostgreSQL: a fresh schema), durably in this process:

    fanout    one workflow gathers --width trivial async steps, at most --limit at once (the
              worker's concurrency by default); the seconds from start to its result, and the
              peak of memory Python allocated meanwhile (tracemalloc), alternately with
    chain     one workflow calling the same steps one after another

    python -m benchmarks.fanout                        # both stores, 1,000 steps, 3 repeats
    python -m benchmarks.fanout --width 200 --stores sqlite

The table goes to stdout (progress to stderr), every sample to
benchmarks/results/fanout-latest.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import durably
from benchmarks.stores import POSTGRES_URL, fresh_schema, fresh_sqlite, postgres_problem

__all__ = ["main"]

RESULTS = Path(__file__).parent / "results" / "fanout-latest.json"


def fan_app(url: str, limit: int | None) -> durably.App:
    app = durably.App(url)

    @app.step(name="part")
    async def part(n: int) -> int:
        return n * 2

    @app.workflow(name="fanout")
    async def fanout(width: int) -> int:
        return sum(await durably.gather(*(part(i) for i in range(width)), limit=limit))

    @app.workflow(name="chain")
    async def chain(width: int) -> int:
        total = 0
        for i in range(width):
            total += await part(i)
        return total

    return app


def one_run(url: str, workflow: str, width: int, limit: int | None) -> tuple[float, float]:
    """Seconds from start to result of one run, and the peak MiB allocated meanwhile."""
    app = fan_app(url, limit)
    try:
        tracemalloc.start()
        began = time.perf_counter()
        handle = app.start(workflow, width)
        app.run_until_idle()
        elapsed = time.perf_counter() - began
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        if handle.result(timeout=0) != width * (width - 1):
            raise RuntimeError(f"{workflow}: a wrong sum")
        return elapsed, peak / 2**20
    finally:
        app.close()


def measure(
    fresh: Callable[[], AbstractContextManager[str]], args: argparse.Namespace
) -> dict[str, Any]:
    samples: dict[str, list[float]] = {key: [] for key in ("fanout_s", "fanout_mib", "chain_s",
                                                            "chain_mib")}  # fmt: skip
    for rep in range(args.repeat):
        say(f"  repetition {rep + 1}/{args.repeat}")
        for workflow in ("fanout", "chain")[:: 1 if rep % 2 else -1]:
            with fresh() as url:
                seconds, mib = one_run(url, workflow, args.width, args.limit)
            samples[f"{workflow}_s"].append(seconds)
            samples[f"{workflow}_mib"].append(mib)
    medians = {key: statistics.median(values) for key, values in samples.items()}
    return {**medians, "samples": samples}


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=1_000, help="steps in the gather")
    parser.add_argument("--limit", type=int, default=None, help="branches at once (default: 32)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--stores", default="sqlite,postgres")
    args = parser.parse_args(argv)
    results: dict[str, Any] = {"width": args.width, "limit": args.limit}
    for store in args.stores.split(","):
        if store == "postgres" and (problem := postgres_problem(POSTGRES_URL)):
            say(f"postgres: skipped ({problem})")
            continue
        say(f"{store}:")
        fresh = fresh_sqlite if store == "sqlite" else (lambda: fresh_schema(POSTGRES_URL))
        results[store] = measure(fresh, args)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"{args.width:,} steps     gather s   chain s  speed-up  gather MiB  chain MiB")
    for store in ("sqlite", "postgres"):
        if store in results:
            r = results[store]
            print(f"{store:<12} {r['fanout_s']:>8.2f} {r['chain_s']:>9.2f} "
                  f"{r['chain_s'] / r['fanout_s']:>8.1f}x {r['fanout_mib']:>11.1f} "
                  f"{r['chain_mib']:>10.1f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())

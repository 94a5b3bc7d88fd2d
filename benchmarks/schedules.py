"""Schedules cost nothing while they wait: W1 (1,000 workflows x 3 trivial steps, concurrency
32) by an app with 200 more workflows, none scheduled, and by the same app with each of them
scheduled hourly (not due during the run; registered before the run is timed), alternately,
on each store. A worker looks at its schedules only when one is due, and once a minute.

    python -m benchmarks.schedules                   # both stores, 3 pairs
    python -m benchmarks.schedules --stores sqlite --pairs 5

The table goes to stdout (progress to stderr), the samples to
benchmarks/results/schedules-latest.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from benchmarks.runners.inprocess import chain_app
from benchmarks.stores import POSTGRES_URL, fresh_schema, fresh_sqlite, postgres_problem

__all__ = ["main"]

RESULTS = Path(__file__).parent / "results" / "schedules-latest.json"
WORKFLOWS, STEPS, SCHEDULES = 1_000, 3, 200


def w1_per_s(url: str, *, schedules: int) -> float:
    """W1's workflows a second, by an app with `schedules` schedules not due meanwhile."""
    app, chain = chain_app(url, STEPS)
    for n in range(SCHEDULES):  # the same workflows either way: only the schedules differ

        async def report() -> None: ...

        workflow = app.workflow(name=f"report_{n}")(report)
        if n < schedules:
            app.schedule(cron=f"{n % 60} * * * *", name=f"hourly-{n}")(workflow)

    try:
        app.run_until_idle()  # registers the schedules (once per worker), starts nothing due
        for i in range(WORKFLOWS):
            app.start(chain, i)
        began = time.perf_counter()
        finished = app.run_until_idle(concurrency=32)
        elapsed = time.perf_counter() - began
        if finished != WORKFLOWS:
            raise RuntimeError(f"{finished} runs ended, not {WORKFLOWS}")
        return WORKFLOWS / elapsed
    finally:
        app.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--pairs", type=int, default=3)
    args = parser.parse_args(argv)
    results: dict[str, dict[str, list[float]]] = {}
    print(f"{'store':<9} {'schedules':>9} {'W1 workflows/s (median)':>24} {'samples':>24}")
    for store in args.stores.split(","):
        if store == "postgres" and (problem := postgres_problem(POSTGRES_URL)):
            print(f"postgres skipped: {problem}", file=sys.stderr)
            continue
        samples: dict[str, list[float]] = {"0": [], str(SCHEDULES): []}
        for pair in range(args.pairs):
            for count in (0, SCHEDULES):
                fresh = fresh_sqlite() if store == "sqlite" else fresh_schema(POSTGRES_URL)
                with fresh as url:
                    samples[str(count)].append(w1_per_s(url, schedules=count))
                print(f"  {store} pair {pair + 1}: {count} schedules done", file=sys.stderr)
        results[store] = samples
        for count, values in samples.items():
            shown = ", ".join(f"{v:,.0f}" for v in values)
            print(f"{store:<9} {count:>9} {statistics.median(values):>24,.0f} {shown:>24}")
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

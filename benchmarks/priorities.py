"""Claims stay flat under a prioritized backlog: the time of one claim (32 runs) from a backlog
of due runs with mixed priorities, small and large, and beside many prioritized runs that
sleep (due later than their head start reaches).

For each store (SQLite: a fresh file, WAL, synchronous=FULL; PostgreSQL: a fresh schema,
synchronous_commit=on), straight on the store (no worker: the claim is what is timed):

    backlog-1k      1,000 due runs, priorities 0..10
    backlog-100k    100,000 due runs, priorities 0..10
    sleepers-100k   1,000 due runs beside 100,000 runs of priority 10 due in a day

Each figure is the median of --claims claims of 32 (each takes the next 32 of the backlog).

    python -m benchmarks.priorities                      # both stores
    python -m benchmarks.priorities --stores sqlite --claims 50

The table goes to stdout (progress to stderr), the samples to
benchmarks/results/priorities-latest.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager
from datetime import timedelta
from pathlib import Path

from benchmarks.stores import POSTGRES_URL, fresh_schema, fresh_sqlite, postgres_problem
from durably.client.ids import new_run_id
from durably.core.status import RunStatus
from durably.stores import Checkpoint, NewRun, Store, open_store
from durably.testing import FakeClock

__all__ = ["main"]

RESULTS = Path(__file__).parent / "results" / "priorities-latest.json"
WORKFLOW = "job"
LEASE = timedelta(minutes=5)
BATCH = 1_000
CLAIM = 32
SCENARIOS = {  # name: (due runs, prioritized sleepers)
    "backlog-1k": (1_000, 0),
    "backlog-100k": (100_000, 0),
    "sleepers-100k": (1_000, 100_000),
}


def fill(store: Store, clock: FakeClock, due: int, sleepers: int) -> None:
    """`sleepers` runs of priority 10 handed back due in a day, then `due` runs due now."""
    for first in range(0, sleepers, BATCH):
        runs = [NewRun(new_run_id(), WORKFLOW, "[]", priority=10) for _ in range(BATCH)]
        store.create_runs(runs, now=clock.now())
        claims = store.claim("filler", [WORKFLOW], now=clock.now(), lease=LEASE, limit=BATCH)
        later = clock.now() + timedelta(days=1)
        store.commit(
            [Checkpoint(c.run_id, c.epoch, (), RunStatus.PENDING, available_at=later)
             for c in claims],
            now=clock.now(),
        )  # fmt: skip
        print(f"  {first + BATCH:,} sleepers", file=sys.stderr, end="\r")
    for first in range(0, due, BATCH):
        size = min(BATCH, due - first)
        runs = [NewRun(new_run_id(), WORKFLOW, "[]", priority=n % 11) for n in range(size)]
        store.create_runs(runs, now=clock.now())
        clock.advance("1ms")


def settle(url: str) -> None:
    """Vacuum a PostgreSQL store's runs, as autovacuum would soon after the fill."""
    if url.startswith("postgresql"):
        import psycopg

        with psycopg.connect(url, autocommit=True) as db:
            db.execute("VACUUM ANALYZE durably_runs")


def claim_ms(store: Store, clock: FakeClock, claims: int) -> list[float]:
    samples = []
    for _ in range(claims):
        began = time.perf_counter()
        taken = store.claim("worker", [WORKFLOW], now=clock.now(), lease=LEASE, limit=CLAIM)
        samples.append(1000 * (time.perf_counter() - began))
        if len(taken) != CLAIM:
            raise RuntimeError(f"a claim took {len(taken)} runs, not {CLAIM}")
    return samples


def stores(names: list[str]) -> Iterator[tuple[str, AbstractContextManager[str]]]:
    for name in names:
        if name == "sqlite":
            yield name, fresh_sqlite()
        elif (problem := postgres_problem(POSTGRES_URL)) is None:
            yield name, fresh_schema(POSTGRES_URL)
        else:
            print(f"postgres skipped: {problem}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--claims", type=int, default=30)
    args = parser.parse_args(argv)
    results: dict[str, dict[str, list[float]]] = {}
    print(f"{'scenario':<16} {'store':<9} {'median ms/claim':>16} {'min..max':>16}")
    for scenario, (due, sleepers) in SCENARIOS.items():
        for name, fresh in stores(args.stores.split(",")):
            with fresh as url:
                store, clock = open_store(url), FakeClock()
                try:
                    print(f"{scenario} on {name}: filling", file=sys.stderr)
                    fill(store, clock, due, sleepers)
                    settle(url)
                    samples = claim_ms(store, clock, args.claims)
                finally:
                    store.close()
            results.setdefault(scenario, {})[name] = samples
            spread = f"{min(samples):.2f}..{max(samples):.2f}"
            print(f"{scenario:<16} {name:<9} {statistics.median(samples):>16.2f} {spread:>16}")
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

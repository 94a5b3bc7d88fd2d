"""What a large store costs: claims, steps, the first page of `durably runs list` (unfiltered
and filtered) and a metrics scrape's run stats on an empty store and beside a million finished
runs of 20 events each (benchmarks.fill), and each figure's ratio, filled over empty
(durably's target: within 10%); what the store takes per million runs, and how fast the fill
wrote them.

Both stores are made at the first repetition and kept for the others. Each figure is measured
on the two in turns, sample by sample (the first alternating), so that the load of a shared
machine falls on both alike: the scaling bench's claims (its backlog of "job" runs made in
each store and vacuumed, claimed one at a time, then deleted); the per-step fit of the core
bench (chains run one at a time), three times; the client's page of `durably runs list`
(newest first, 50 runs), unfiltered, of completed runs, of a workflow, of the default queue
and since a day ago; Store.stats, as a scrape reads it after its first. By then either store
holds the fit's runs, so every page is full. The runs a repetition starts stay for the next.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import durably
from benchmarks.fill import Filled, Plan, fill, postgres_url, sqlite_path, store_size
from benchmarks.plan import Metric, Trial, Values
from benchmarks.runners.protocol import BenchmarkError
from benchmarks.workloads.features import Backlog, backlog, claim_ms, step_ms
from durably import RunStatus
from durably.stores import open_store

PREFIX = "durably_fill"  # of the PostgreSQL databases it makes, durably_fill_... (dropped after)
MIB = 2**20


@dataclass(frozen=True, slots=True)
class Large:
    """The filled store's finished runs, and how many of each measure to take."""

    runs: int
    events_per_run: int = 20
    claims: Backlog = field(default_factory=lambda: Backlog(200, 200, 1))  # as scaling's
    fits: int = 3  # per-step fits, each repetition (one is noisy on a busy machine)
    lists: int = 30  # pages read, each list figure
    page: int = 50  # durably runs list's --limit


@dataclass(frozen=True, slots=True)
class Kept:
    """The two stores, and what filling the second took."""

    empty: str
    filled: str
    fill: Filled
    empty_bytes: int
    filled_bytes: int


@contextmanager
def kept(trial: Trial, size: Large) -> Iterator[Kept]:
    """An empty store, and one filled with `size.runs` finished runs (dropped afterwards)."""
    fresh = trial.store.fresh
    with fresh(trial.name, PREFIX) as empty, fresh(trial.name, PREFIX) as filled:
        open_store(empty).close()  # its tables
        shown = time.monotonic()

        def progress(runs: int, events: int) -> None:
            nonlocal shown
            if time.monotonic() - shown > 30:
                shown = time.monotonic()
                print(f"    filled {runs:,} runs, {events:,} events", file=sys.stderr, flush=True)

        plan = Plan(size.runs, size.events_per_run)
        done = fill(filled, plan, progress)
        print(f"    {trial.store.label}: filled {done}", file=sys.stderr, flush=True)
        yield Kept(empty, filled, done, store_size(empty), store_size(filled))


def forget(url: str, workflow: str) -> None:
    """Delete the runs of `workflow` and their events, straight in the tables."""
    events = "DELETE FROM durably_events WHERE run_id IN"
    events += f" (SELECT id FROM durably_runs WHERE workflow = '{workflow}')"
    runs = f"DELETE FROM durably_runs WHERE workflow = '{workflow}'"
    if url.startswith("sqlite"):
        import sqlite3

        with closing(sqlite3.connect(sqlite_path(url))) as db, db:
            db.execute(events)
            db.execute(runs)
        return
    import psycopg

    with psycopg.connect(postgres_url(url), autocommit=True) as pg:
        pg.execute(events)
        pg.execute(runs)


def paired(
    stores: list[str], times: int, measure: Callable[[str], float]
) -> dict[str, list[float]]:
    """`measure` on each store in turn, `times` times, the first one alternating (so that the
    machine's load as it comes and goes falls on both alike): each store's values."""
    got: dict[str, list[float]] = {url: [] for url in stores}
    for n in range(times):
        for url in stores[:: 1 if n % 2 else -1]:
            got[url].append(measure(url))
    return got


def timed(call: Callable[[], object]) -> float:
    began = time.perf_counter()
    call()
    return 1000 * (time.perf_counter() - began)


def figures(stores: list[str], size: Large) -> dict[str, dict[str, list[float]]]:
    """Each figure's samples on each store, by store."""
    opened = {url: backlog(url, size.claims) for url in stores}
    claims = paired(stores, size.claims.claims, lambda url: claim_ms(opened[url], size.claims))
    for url, store in opened.items():
        store.close()
        forget(url, "job")  # its claimed runs, which later claims would step over
    steps = paired(stores, size.fits, step_ms)
    apps = {url: durably.App(url) for url in stores}
    try:
        pages = {}
        for key, filters in lists().items():
            for app in apps.values():  # untimed, once
                if len(app.client.runs(limit=size.page, **filters).runs) < size.page:
                    raise BenchmarkError(f"a page of runs {filters or ''} is not full")

            def page(url: str, filters: dict[str, Any] = filters) -> float:
                return timed(lambda: apps[url].client.runs(limit=size.page, **filters))

            pages[key] = paired(stores, size.lists, page)
        for app in apps.values():  # untimed: a process's first scrape counts every ended run
            app.client.stats()
        pages["stats"] = paired(stores, size.lists, lambda url: timed(apps[url].client.stats))
    finally:
        for app in apps.values():
            app.close()
    by_figure = {"claim": claims, "step": steps, **pages}
    return {url: {key: got[url] for key, got in by_figure.items()} for url in stores}


def lists() -> dict[str, dict[str, Any]]:
    """Each list figure's filters. Both stores hold the fit's runs (of the workflow "chain", on
    the default queue, started in the last day), so every page is full; in the filled one they
    are few beside the fill's, which the filters pass over (but for a day of them: --since)."""
    return {
        "list": {},
        "list_completed": {"status": RunStatus.COMPLETED},
        "list_workflow": {"workflow": "chain"},
        "list_queue": {"queue": "default"},
        "list_since": {"since": datetime.now(UTC) - timedelta(days=1)},
    }


LABELS = {  # each figure's label and unit
    "claim": ("claim of 1 from 200 due", "ms"),
    "step": ("per-step checkpoint (fit)", "ms/step"),
    "list": ("runs list, first page of 50", "ms"),
    "list_completed": ("runs list --status completed, first page", "ms"),
    "list_workflow": ("runs list --workflow chain, first page", "ms"),
    "list_queue": ("runs list --queue default, first page", "ms"),
    "list_since": ("runs list --since 1d, first page", "ms"),
    "stats": ("metrics scrape's run stats (after its first)", "ms"),
}


def measure(trial: Trial, size: Large) -> Values:
    """Every figure on the empty store and the filled one, in turns; their ratios; the size
    and the fill's speed (at the first repetition)."""
    stores = trial.keep(lambda: kept(trial, size))
    both = [stores.empty, stores.filled][:: 1 if trial.repetition % 2 else -1]
    got = figures(both, size)
    where = f"beside {size.runs:,} finished runs"
    values: Values = {}
    for key, (label, unit) in LABELS.items():
        empty, filled = got[stores.empty][key], got[stores.filled][key]
        values[Metric(f"{key}_empty", f"{label}, empty store", unit)] = empty  # pooled
        values[Metric(f"{key}_filled", f"{label}, {where}", unit)] = filled
        ratio = statistics.median(filled) / statistics.median(empty)
        values[Metric(f"{key}_ratio", f"{label}: filled / empty", "x")] = ratio
    return values | sized(trial, size, stores)


def sized(trial: Trial, size: Large, stores: Kept) -> Values:
    """What the store takes per million runs, and the fill's speed (first repetition only)."""
    first, done = trial.repetition == 1, stores.fill
    per_million = (stores.filled_bytes - stores.empty_bytes) / size.runs * 1_000_000 / MIB
    events = f"{done.events / done.runs:.1f} events each"
    figures = {
        Metric("size_mib_per_million", f"store size per million runs ({events})", "MiB"): (
            per_million
        ),
        Metric("filled_mib", f"store size, {size.runs:,} finished runs", "MiB"): (
            stores.filled_bytes / MIB
        ),
        Metric("fill_s", f"fill of {size.runs:,} runs", "s"): done.seconds,
        Metric("fill_runs_per_s", "fill", "runs/s", True): done.runs / done.seconds,
        Metric("fill_events_per_s", "fill", "events/s", True): done.events / done.seconds,
    }
    return {metric: value if first else None for metric, value in figures.items()}

"""What a run publishes, as a caller in another process sees it (the outputs benchmark): each
engine's `publish` process runs the run, its `read` process reads (benchmarks.runners
.<engine>_outputs), on a fresh store each time. Events: a value's time.time() against when
the reader got it (set -> seen), and against when the worker saw the commit that holds it
(commit -> seen: durably's checkpoint_committed hook; DBOS's set_event, which commits as it
is called, returning); each repetition's p50, p95 and p99. A stream: its items/s end to end,
the writer's own, the reader's lag. A run that publishes nothing: the reader's statements per
second while blocked in get_event, then in read_stream; durably's update round trip.
"""

import bisect
import json
import statistics
import sys
import tempfile
import uuid
from dataclasses import asdict, dataclass
from typing import Any

from benchmarks.plan import Metric, Trial, Values
from benchmarks.runners.processes import Child, ProcessRunner
from benchmarks.runners.protocol import BenchmarkError

WHERE = {"e": "a step", "w": "workflow code"}  # who sets the events of each key prefix


@dataclass(frozen=True, slots=True)
class Phases:
    """What one run publishes: `events` events set by a step, then as many by workflow code,
    `spacing_ms` apart; a stream of `items` items; if `quiet`, a wait of `wait_s` in get_event,
    then in read_stream, and `updates` updates (a count of 0 leaves a phase out)."""

    events: int
    items: int
    quiet: bool = True
    wait_s: float = 2.0
    updates: int = 20
    spacing_ms: float = 10


def pair(trial: Trial, phases: Phases) -> tuple[dict[str, Any], dict[str, Any]]:
    """The engine's publish process, then its read process once the run is started, on a
    fresh store: what each printed (recorded in the trial)."""
    runner = trial.engine
    assert isinstance(runner, ProcessRunner), "an engine in processes of its own"
    module = f"benchmarks.runners.{runner.name}_outputs"
    with trial.fresh() as url, tempfile.TemporaryDirectory(prefix="bench-outputs-") as go:
        run_id = f"outputs-{uuid.uuid4().hex[:12]}"
        given = {"url": url, "fast": runner.fast, "run_id": run_id, **asdict(phases)}
        options = json.dumps(given | {"go": go})
        with Child([sys.executable, "-m", module, "publish", options]) as writer:
            writer.json_line("started")
            with Child([sys.executable, "-m", module, "read", options]) as reader:
                read = reader.json_line()
                if (code := reader.wait()) != 0:
                    raise reader.failed(f"exited with {code}")
            wrote = writer.json_line()
            if (code := writer.wait()) != 0:
                raise writer.failed(f"exited with {code}")
    trial.record(f"{module} publish", given, wrote)
    trial.record(f"{module} read", given, read)
    return wrote, read


def percentiles(samples: list[float]) -> tuple[float, float, float]:
    """p50, p95, p99."""
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return statistics.median(samples), cuts[94], cuts[98]


def measure(trial: Trial, phases: Phases) -> Values:
    """Every phase of one run, each engine's figures."""
    wrote, read = pair(trial, phases)
    values = event_figures(phases.events, wrote["commits"], read["seen"])
    values |= stream_figures(phases.items, wrote["written"], read)
    return values | quiet_figures(phases, read)


def stream_alone(trial: Trial, items: int) -> Values:
    """durably's stream of `items` items alone (DBOS: none, it would take minutes)."""
    if trial.name != "durably":
        return {}
    wrote, read = pair(trial, Phases(0, items, quiet=False))
    return stream_figures(items, wrote["written"], read)


def event_figures(count: int, commits: list[float], seen: dict[str, list[float]]) -> Values:
    """Events set one at a time from a step, then from workflow code, each seen by a reader
    in another process waiting in get_event: set -> seen and commit -> seen, in ms."""
    commits = sorted(commits)
    values: Values = {}
    for prefix, where in WHERE.items():
        keys = [f"{prefix}{k}" for k in range(count)]
        set_seen = [1000 * (seen[key][1] - seen[key][0]) for key in keys]
        commit_seen = []
        for key in keys:
            value, at = seen[key]
            if (i := bisect.bisect_left(commits, value)) == len(commits):
                raise BenchmarkError(f"no commit of the worker after event {key} was set")
            commit_seen.append(1000 * (at - commits[i]))
        for name, samples in (("set", set_seen), ("commit", commit_seen)):
            label = f"event from {where}, {name} -> seen in another process"
            for p, value in zip(("p50", "p95", "p99"), percentiles(samples), strict=True):
                key = f"event_{prefix}_{name}_seen_{p}_ms"
                values[Metric(key, f"{label} ({count}, {p})", "ms")] = value
    return values


def stream_figures(items: int, written: dict[str, float], read: dict[str, Any]) -> Values:
    """`items` small items written to a stream by a step, read from the start by a reader in
    another process: end to end (first write -> last item read), the writer's own rate (its
    writes returning), until all are stored, and how far the reader's last item trailed."""
    label, unit = f"stream of {items:,} items", "items/s"
    first = written["first"]

    def span(end: float) -> float:
        return end - first

    return {
        Metric(f"stream_{items}_end_to_end_per_s", f"{label}, end to end", unit, True): items
        / span(read["last_seen"]),
        Metric(f"stream_{items}_writer_per_s", f"{label}, the writer's calls", unit, True): items
        / span(written["last"]),
        Metric(f"stream_{items}_stored_per_s", f"{label}, all stored", unit, True): items
        / span(written["durable"]),
        Metric(f"stream_{items}_first_ms", f"{label}: first item seen after written", "ms"): 1000
        * (read["first_seen"] - first),
        Metric(f"stream_{items}_lag_ms", f"{label}: last item seen after written", "ms"): 1000
        * (read["last_seen"] - written["last"]),
    }


def quiet_figures(phases: Phases, read: dict[str, Any]) -> Values:
    """A run waiting for a signal, publishing nothing: the reader's SQL statements per second
    blocked `wait_s` in get_event, then in read_stream; then `updates` updates, one at a time
    (durably's; DBOS has none), each timed from the caller."""
    per_s, update_ms = read["statements_per_s"], read["update_ms"]
    values: Values = {
        Metric(f"waiting_{what}_statements_per_s", f"reader blocked in {what}", "stmts/s"): (
            per_s[what]
        )
        for what in ("get_event", "read_stream")
    }
    label = f"update round trip from another process ({phases.updates} one at a time)"
    values[Metric("update_p50_ms", f"{label}, p50", "ms")] = (
        statistics.median(update_ms) if update_ms else None
    )
    values[Metric("update_p95_ms", f"{label}, p95", "ms")] = (
        statistics.quantiles(update_ms, n=20, method="inclusive")[18] if update_ms else None
    )
    return values

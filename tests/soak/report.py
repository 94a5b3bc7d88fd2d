"""The soak run's report: its samples as CSV, and a PNG chart of throughput, memory,
connections and backlog over time (matplotlib, the `soak` extra)."""

from __future__ import annotations

import csv
import itertools
from dataclasses import asdict, dataclass, fields
from pathlib import Path

__all__ = ["Sample", "write_report"]


@dataclass(frozen=True, slots=True)
class Sample:
    seconds: float  # since the load began
    phase: str  # "peak", "double", "drain"
    started: int  # runs started so far
    completed: int  # runs completed so far
    backlog: int  # runs due and not yet claimed
    in_flight: int  # runs started and not ended
    rss_mb: float  # the live workers' resident memory, summed
    connections: int  # the workers' open database connections (or SQLite file handles)
    kills: int  # workers killed so far


def write_report(samples: list[Sample], folder: Path, title: str) -> Path:
    """Write samples.csv and soak.png into `folder`; the PNG's path."""
    import matplotlib

    matplotlib.use("Agg")  # no display: files only
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "samples.csv").open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=[f.name for f in fields(Sample)])
        writer.writeheader()
        writer.writerows(asdict(sample) for sample in samples)
    t = [s.seconds / 60 for s in samples]
    rate = [0.0] + [
        (b.completed - a.completed) / max(b.seconds - a.seconds, 1e-9)
        for a, b in itertools.pairwise(samples)
    ]
    figure, axes = plt.subplots(4, 1, figsize=(10, 11), sharex=True)
    axes[0].plot(t, rate, label="completed runs/s")
    axes[0].set_ylabel("runs/s")
    axes[1].plot(t, [s.rss_mb for s in samples], label="workers' RSS")
    axes[1].set_ylabel("MiB")
    axes[2].plot(t, [s.connections for s in samples], label="open connections")
    axes[2].set_ylabel("connections")
    axes[3].plot(t, [s.backlog for s in samples], label="backlog (due, unclaimed)")
    axes[3].plot(t, [s.in_flight for s in samples], label="in flight")
    axes[3].set_ylabel("runs")
    axes[3].set_xlabel("minutes")
    kills = [s.seconds / 60 for a, s in itertools.pairwise(samples) if s.kills > a.kills]
    for axis in axes:
        for moment in kills:
            axis.axvline(moment, color="red", alpha=0.15, linewidth=0.8)
        axis.legend(loc="upper right")
        axis.grid(alpha=0.3)
    axes[0].set_title(f"{title} (red lines: a worker killed)")
    figure.tight_layout()
    chart = folder / "soak.png"
    figure.savefig(chart, dpi=90)
    plt.close(figure)
    return chart

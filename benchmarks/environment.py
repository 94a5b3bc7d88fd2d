"""Where and on what a benchmark ran: the machine and its load, and the durably measured (its
version, git commit, and whether its tree had local changes)."""

from __future__ import annotations

import os
import platform
import subprocess
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import durably

__all__ = ["busy_note", "load_average", "run_context"]


def run_context() -> dict[str, Any]:
    """What was measured where, taken before measuring (the source may change meanwhile)."""
    changes = git("status", "--porcelain", "--", ".")
    version = next((d.version for d in metadata.distributions(name="durably")), None)
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    cpu = next(
        (line.split(":")[1].strip() for line in cpuinfo.splitlines() if "model name" in line), ""
    )
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "durably": {
            "version": version,
            "commit": git("rev-parse", "HEAD"),
            "local_changes": None if changes is None else bool(changes),
        },
        "machine": {
            "platform": platform.platform(),
            "cpu": cpu or platform.processor(),
            "cpus": os.cpu_count(),
            "load_average": load_average(),
        },
    }


def git(*args: str) -> str | None:
    """git's answer about the durably package's source, or None."""
    where = str(Path(durably.__file__).parent)
    try:
        done = subprocess.run(
            ["git", "-C", where, *args], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def busy_note() -> str | None:
    """A warning when other work keeps the machine busy (the figures will be noisy)."""
    load, cpus = load_average(), os.cpu_count() or 1
    if load is None or load[0] < 0.5 * cpus:
        return None
    return f"the machine is busy (load average {load[0]:.1f} on {cpus} CPUs): figures may be noisy"


def load_average() -> tuple[float, float, float] | None:
    return os.getloadavg() if hasattr(os, "getloadavg") else None

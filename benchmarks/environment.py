"""Where and on what a benchmark ran: machine, load, filesystem, and the durably measured."""

from __future__ import annotations

import os
import platform
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import durably

__all__ = ["busy_note", "filesystem_of", "load_average", "run_context"]


def run_context() -> dict[str, Any]:
    """What was measured where, taken before measuring (the source may change meanwhile)."""
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "durably": {"version": _package_version(), **source_revision()},
        "machine": machine(),
    }


def machine() -> dict[str, Any]:
    return {
        "platform": platform.platform(),
        "arch": platform.machine(),
        "cpu": _cpu_model() or platform.processor(),
        "cpus": os.cpu_count(),
        "load_average": load_average(),  # other work on the machine makes figures noisy
    }


def source_revision() -> dict[str, Any]:
    """The git commit of the durably measured, and whether its tree had local changes."""
    package = Path(durably.__file__).parent

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", "-C", str(package), *args], capture_output=True, text=True, timeout=10
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    changes = git("status", "--porcelain", "--", ".")
    return {
        "commit": git("rev-parse", "HEAD"),
        "local_changes": None if changes is None else bool(changes),
    }


def busy_note() -> str | None:
    """A warning when other work keeps the machine busy (the figures will be noisy)."""
    load, cpus = load_average(), os.cpu_count() or 1
    if load is None or load[0] < 0.5 * cpus:
        return None
    return f"the machine is busy (load average {load[0]:.1f} on {cpus} CPUs): figures may be noisy"


def filesystem_of(path: str) -> str:
    """The type of the filesystem `path` lives on (Linux), e.g. ext4 or tmpfs."""
    try:
        mounts = [line.split()[1:3] for line in Path("/proc/mounts").read_text().splitlines()]
    except OSError:
        return "unknown"
    real = os.path.realpath(path)
    inside = [
        (point, kind)
        for point, kind in mounts
        if real == point or real.startswith(point.rstrip("/") + "/")
    ]
    return max(inside, key=lambda mount: len(mount[0]))[1] if inside else "unknown"


def load_average() -> tuple[float, float, float] | None:
    try:
        return os.getloadavg()
    except OSError:
        return None


def _cpu_model() -> str:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return ""
    return next(
        (line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), ""
    )


def _package_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("durably")
    except PackageNotFoundError:
        return None

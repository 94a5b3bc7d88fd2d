"""What an upgrade did, in one line a person reads (the CLI, the worker's log, the
dashboard)."""

from __future__ import annotations

from collections.abc import Sequence

from durably.runtime.upgrades import Outcome, Upgrade

__all__ = ["summary"]


def summary(upgrades: Sequence[Upgrade], *, dry_run: bool) -> str:
    """One line: how many runs moved (or would), and how many stay, and why."""
    if not upgrades:
        return "no run is stranded: every run in flight is on a version a worker or this code runs"
    counts = {outcome: 0 for outcome in Outcome}
    for upgraded in upgrades:
        counts[upgraded.outcome] += 1
    moved = counts[Outcome.WOULD_MOVE] if dry_run else counts[Outcome.MOVED]
    said = f"{moved} run(s) {'would move' if dry_run else 'moved'} to the deployed code"
    if counts[Outcome.DIVERGES]:
        said += (
            f"; {counts[Outcome.DIVERGES]} stay: the code no longer follows their histories "
            "(keep a worker with their code, or make the change with durably.patched)"
        )
    if counts[Outcome.CHANGED]:
        said += f"; {counts[Outcome.CHANGED]} changed meanwhile: run durably upgrade again"
    return said

"""A run taken over from a worker that died (or stalled past its lease): what its history
says of that, before the workflow body goes on.

- Every step attempt the dead worker had started and not finished is recorded as lost
  (`attempt_lost`, at the step's position, with its attempt): a person reading the run sees
  where the worker died, and the attempt that follows is reconciled, then retried.
- A run under which workers keep dying is parked (PoisonPill) rather than taken over again.
"""

from __future__ import annotations

from collections.abc import Sequence

from durably.core.event_data import read_payload
from durably.core.history import Event, EventKind
from durably.core.payloads import Claimed
from durably.core.replay import RunPhase
from durably.errors import PayloadError, PoisonPill
from durably.runtime.checkpoints import HistoryWriter

__all__ = ["check_poison", "first_claim", "record_lost_attempts", "taken_over_from"]


def first_claim(events: Sequence[Event]) -> bool:
    """Whether the claim that ends `events` is the run's first: it was started, and now runs
    (a restarted run's reused history holds no claim)."""
    return sum(1 for event in events if event.kind is EventKind.CLAIMED) == 1


def taken_over_from(events: Sequence[Event]) -> str | None:
    """The worker a claim took the run over from (its lease had expired), if it did."""
    last = events[-1] if events else None
    if last is None or last.kind is not EventKind.CLAIMED:
        return None
    if "took_over_from" not in (last.data or ""):  # the usual claim: no JSON to read
        return None
    try:
        return read_payload(last, Claimed).took_over_from
    except PayloadError:
        return None


def record_lost_attempts(writer: HistoryWriter, phase: RunPhase) -> None:
    """After a takeover: an `attempt_lost` event for each step attempt left in flight."""
    if taken_over_from(writer.events) is None:
        return
    for record in phase.steps:
        if record.in_flight and record.call == "step":
            writer.append(EventKind.ATTEMPT_LOST, record.position, record.name, record.attempts)


def check_poison(phase: RunPhase, limit: int) -> None:
    if phase.deaths.poison(limit):
        raise PoisonPill(
            f"{phase.deaths.count} workers died or lost their lease while running this run, "
            f"the last while it ran alone on its worker (limit {limit}); parked so it stops "
            "taking workers down. Inspect it, then retry it (durably dlq retry) or fail it."
        )

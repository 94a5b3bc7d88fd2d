"""How long a run spent in each state, read off its history: pending (waiting for a worker),
running (a worker at it), waiting (for a retry, a timer, a signal, an approval, a gate),
paused, needs_attention (parked for a person). What the `durably_run_state_seconds`
histogram observes when a run ends."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from durably.core.history import Event, EventKind

__all__ = ["time_in_states"]

# the event that puts the run in a state; any other event of a claimed run means running
_ENTERS = {
    EventKind.RUN_STARTED: "pending",
    EventKind.RELEASED: "pending",
    EventKind.STEP_ATTEMPT_FAILED: "waiting",
    EventKind.STEP_WAITING: "waiting",
    EventKind.TIMER_SET: "waiting",
    EventKind.SIGNAL_WAITING: "waiting",
    EventKind.APPROVAL_REQUESTED: "waiting",
    EventKind.COMPENSATION_ATTEMPT_FAILED: "waiting",
    EventKind.RUN_PAUSED: "paused",
    EventKind.RUN_PARKED: "needs_attention",
}
# bookkeeping that does not move the run out of the state it is in
_NEUTRAL = frozenset(
    {
        EventKind.MESSAGE_RECEIVED,
        EventKind.APPROVAL_TOKEN,
        EventKind.STEP_HEARTBEAT,
        EventKind.RUN_RESTARTED,
        EventKind.UPGRADED,
        EventKind.PATCH_DECIDED,
        EventKind.VALUE_RECORDED,
        EventKind.CHILD_STARTED,
        EventKind.EVENT_SET,
    }
)


_HELD = frozenset({"paused", "needs_attention"})


def time_in_states(events: Sequence[Event], end: datetime | None = None) -> dict[str, float]:
    """Seconds per state, from the first event to `end` (default: the last event)."""
    if not events:
        return {}
    spent: dict[str, float] = {}
    state, since = "pending", events[0].at
    for event in events[1:]:
        new = _ENTERS.get(event.kind)
        if new is None:
            if event.kind in _NEUTRAL:
                continue
            if state in _HELD and event.kind is not EventKind.CLAIMED:
                continue  # a paused or parked run moves on only once a worker claims it again
            new = "running"
        if new != state:
            spent[state] = spent.get(state, 0.0) + max(0.0, (event.at - since).total_seconds())
            state, since = new, event.at
    last = end or events[-1].at
    spent[state] = spent.get(state, 0.0) + max(0.0, (last - since).total_seconds())
    return spent

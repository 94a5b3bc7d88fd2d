"""The state of each dependency's breaker and limits, as people read it: `durably breakers`,
the API's /api/breakers and the dashboard's page. Made from the gates `Client.gates` reads
(durably.resilience.gates), at `now`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from durably.resilience.gates import GateState

__all__ = ["BreakerInfo", "breakers"]


@dataclass(frozen=True, slots=True)
class BreakerInfo:
    dependency: str
    breaker: str  # closed, open, half_open
    failures: int  # in the breaker's current window
    opened_at: datetime | None  # while open or half open
    in_flight: int  # attempts holding a concurrency slot now
    waiting: int  # attempts in line for the gate
    tokens: float | None  # left in the rate limit's bucket (None: full, or no rate limit)


def breakers(gates: Mapping[str, GateState], *, now: datetime) -> list[BreakerInfo]:
    """Every dependency that has a gate, by name."""
    seconds = now.timestamp()
    return [_info(name, state, seconds) for name, state in sorted(gates.items())]


def _info(name: str, state: GateState, now: float) -> BreakerInfo:
    opened = None if state.breaker == "closed" else datetime.fromtimestamp(state.opened_at, UTC)
    return BreakerInfo(
        dependency=name,
        breaker=state.breaker,
        failures=state.failures,
        opened_at=opened,
        in_flight=sum(1 for expiry in state.in_flight.values() if expiry > now),
        waiting=len(state.waiting),
        tokens=None if state.tokens < 0 else round(state.tokens, 2),
    )

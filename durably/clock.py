"""Where durably reads the time. The worker and the app take a Clock, so tests can fake it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Protocol

__all__ = ["Clock", "SystemClock"]


class Clock(Protocol):
    def now(self) -> datetime:
        """The current instant, UTC-aware."""
        ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

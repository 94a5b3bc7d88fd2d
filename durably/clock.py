"""Where durably reads the time. The worker and the app take a Clock, so tests can fake it."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Protocol

from durably.durations import Duration, parse_duration

__all__ = ["Clock", "FakeClock", "SystemClock"]


class Clock(Protocol):
    def now(self) -> datetime:
        """The current instant, UTC-aware."""
        ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


class FakeClock:
    """A Clock for tests: starts at a fixed instant and moves only by `advance`."""

    def __init__(self, start: datetime = datetime(2026, 1, 1, tzinfo=UTC)) -> None:
        if start.tzinfo is None:
            raise ValueError("FakeClock needs a timezone-aware start")
        self._now = start
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, by: Duration) -> datetime:
        with self._lock:
            self._now += parse_duration(by, what="advance")
            return self._now

    def set(self, moment: datetime) -> None:
        with self._lock:
            if moment < self._now:
                raise ValueError("a FakeClock does not go backwards")
            self._now = moment

    def __repr__(self) -> str:
        return f"<FakeClock {self._now.isoformat()}>"

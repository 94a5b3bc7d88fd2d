"""The dashboard's charts of the last hour: a sampler that reads the store's counts (one
Store.stats query) every few seconds into a ring of samples, and the pure code that turns a
series of samples into an SVG polyline. Plain SVG drawn on the server: no chart library and
no front-end build for a handful of lines."""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from durably.clock import Clock
from durably.errors import DurablyError
from durably.stores.protocol import Store
from durably.stores.records import Ended, RunStats

__all__ = ["Chart", "Sample", "Sampler", "chart", "per_minute"]

log = logging.getLogger("durably.web")
_HOUR = timedelta(hours=1)


@dataclass(frozen=True, slots=True)
class Sample:
    at: datetime
    by_status: dict[str, int]
    due: int
    oldest_due_seconds: float


class Sampler:
    """Reads the store's counts every `every` seconds, keeping the last hour's."""

    def __init__(self, store: Callable[[], Store], clock: Clock, *, every: float) -> None:
        self._store = store
        self._clock = clock
        self._every = every
        self._samples: deque[Sample] = deque(maxlen=max(2, int(3600 / every) + 1))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="durably-charts", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def samples(self) -> list[Sample]:
        """The last hour's samples, oldest first."""
        return list(self._samples)

    def sample(self) -> None:
        """Read the store once now (what the loop does every `every` seconds)."""
        now = self._clock.now()
        self.add(self._store().stats(now=now), now)

    def add(self, stats: RunStats, now: datetime) -> None:
        """Keep `stats`, read at `now` (by the loop, or by a page that read them anyway)."""
        oldest = 0.0 if stats.oldest_due is None else (now - stats.oldest_due).total_seconds()
        self._samples.append(Sample(now, dict(stats.by_status), stats.due, max(0.0, oldest)))

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample()
            except DurablyError as exc:  # the store is down: a gap in the charts, said once
                log.warning("the dashboard's charts could not read the store: %s", exc)
            self._stop.wait(self._every)


@dataclass(frozen=True, slots=True)
class Chart:
    title: str
    points: str  # an SVG polyline's points, in a 300 x 60 box
    latest: float
    peak: float


def chart(
    title: str, samples: Sequence[Sample], value: Callable[[Sample], float], now: datetime
) -> Chart:
    """`value` of each sample over the last hour, as a polyline in a 300 x 60 box (time
    across, 0 at the bottom, the hour's peak at the top)."""
    return _line(title, [(s.at, value(s)) for s in samples], now)


def per_minute(
    title: str, ended: Sequence[Ended], statuses: Collection[str], now: datetime
) -> Chart:
    """Runs that ended in one of `statuses`, a point a minute over the last hour (Store.activity;
    a minute without any is 0), the current minute last."""
    counts: dict[datetime, float] = {}
    for row in ended:
        if row.status in statuses:
            counts[row.minute] = counts.get(row.minute, 0.0) + row.count
    this = now.replace(second=0, microsecond=0)
    minutes = [this - timedelta(minutes=back) for back in range(59, -1, -1)]
    return _line(title, [(m, counts.get(m, 0.0)) for m in minutes], now)


def _line(title: str, points: Sequence[tuple[datetime, float]], now: datetime) -> Chart:
    recent = [(at, value) for at, value in points if now - at <= _HOUR]
    peak = max((value for _, value in recent), default=0.0)
    scale = 56.0 / peak if peak > 0 else 0.0
    drawn = " ".join(
        f"{300 - (now - at).total_seconds() / 12:.1f},{58 - value * scale:.1f}"
        for at, value in recent
    )
    return Chart(title, drawn, recent[-1][1] if recent else 0.0, peak)

"""The count of ended runs by status, for a metrics scrape, at a cost that does not grow with
how many runs the store holds: counted once, then kept up to date by counting only the runs
that ended since.

Counting them at each scrape read every ended run, the bulk of a store's runs (58 ms beside
100,000 on SQLite; seconds beside millions). An ended run never changes again (its status is
final: durably.core.status) and only pruning deletes one, oldest first, so a store object
keeps, for each status, how many ended in each ten minutes up to a time a little in the past
(`through`), and each scrape reads from the (status, updated_at) index only what changed: the
runs since `through`, a new `through` ten minutes on, each status's oldest time and how many
runs have it (pruning changes one or the other), and, where that changed, the ten minutes it
lies in, again. The first scrape of a process counts every ended run once.

A run whose end is written more than `_MARGIN` after the time it records (a worker whose clock
is that far behind the others', a commit held that long) is counted only by the next process's
first scrape: the gauge is then that much short until then.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

from durably.core.status import FINAL
from durably.stores.sql.reads import Connection, Dialect
from durably.stores.sql.rows import ts

__all__ = ["Tally"]

_SPAN = 600  # seconds: the tally's ten minutes
_MARGIN = timedelta(minutes=10)  # how long after `through` the ends before it are all written
_ENDED = sorted(str(status) for status in FINAL)


class Tally:
    """Ended runs by status and ten minutes, up to `through` (one store's, kept in memory)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # one scrape at a time updates it
        self._through: float | None = None  # no count yet
        self._spans: dict[str, dict[int, int]] = {status: {} for status in _ENDED}
        self._totals = dict.fromkeys(_ENDED, 0)  # the sums of _spans
        self._oldest: dict[str, tuple[float, int] | None] = {}

    def ended(self, db: Connection, dialect: Dialect, *, now: datetime) -> dict[str, int]:
        """How many runs ended in each final status (a status none did is left out). Read
        first, kept after: a read that fails (and is run again) leaves the tally as it was."""
        with self._lock:
            through = max((ts(now - _MARGIN) // _SPAN) * _SPAN, self._through or 0.0)
            oldest = _oldest(db, dialect)
            new = _count(db, dialect, self._through, through) if through != self._through else {}
            moved = {  # pruned since (or a first end): the span of its oldest, counted again
                status: _count(db, dialect, *_span(first, through), status)
                for status, first in oldest.items()
                if self._through is not None and first != self._oldest.get(status)
            }
            recent = _recent(db, dialect, through)
            for (status, span), count in new.items():
                self._add(status, span, count)
            for status, counted in moved.items():
                first = _time(oldest[status])
                spans = self._spans[status]
                for span in [s for s in spans if first is None or s * _SPAN <= first]:
                    self._totals[status] -= spans.pop(span)  # emptied, or counted again
                for (_, span), count in counted.items():
                    self._add(status, span, count)
            self._through, self._oldest = through, oldest
            totals = dict(self._totals)
        for status, count in recent.items():
            totals[status] += count
        return {status: count for status, count in totals.items() if count}

    def _add(self, status: str, span: int, count: int) -> None:
        spans = self._spans[status]
        spans[span] = spans.get(span, 0) + count
        self._totals[status] += count


def _time(oldest: tuple[float, int] | None) -> float | None:
    return None if oldest is None else oldest[0]


def _span(oldest: tuple[float, int] | None, through: float) -> tuple[float, float]:
    """The span (start, end) the oldest run is in, up to `through` (none: empty)."""
    if oldest is None:
        return through, through
    start = (oldest[0] // _SPAN) * _SPAN
    return start, max(start, min(start + _SPAN, through))


def _oldest(db: Connection, dialect: Dialect) -> dict[str, tuple[float, int] | None]:
    """Each final status's oldest updated_at and how many runs of it have that time, from the
    end of its index entries. Pruning deletes the oldest first: either the oldest time moves
    on, or fewer runs have it (a batch commit gives one time to many runs)."""
    mark = dialect.mark
    rows = db.execute(
        "SELECT o.column1, o.t, (SELECT count(*) FROM durably_runs AS r"
        " WHERE r.status = o.column1 AND r.updated_at = o.t) FROM (SELECT s.column1,"
        " (SELECT min(r.updated_at) FROM durably_runs AS r WHERE r.status = s.column1) AS t"
        f" FROM (VALUES {', '.join([f'({mark})'] * len(_ENDED))}) AS s) AS o",
        _ENDED,
    ).fetchall()
    return {
        str(status): None if first is None else (float(first), int(count))
        for status, first, count in rows
    }


def _count(
    db: Connection, dialect: Dialect, start: float | None, end: float, status: str | None = None
) -> dict[tuple[str, int], int]:
    """The ended runs (of `status`, or all) by status and span, from `start` to `end`."""
    mark = dialect.mark
    which, params = dialect.one_of("status", [status] if status else _ENDED)
    span = dialect.whole.format(f"updated_at / {_SPAN}")
    after = "" if start is None else f" AND updated_at >= {mark}"
    rows = db.execute(
        f"SELECT status, {span} AS span, count(*) FROM durably_runs WHERE {which}"
        f"{after} AND updated_at < {mark} GROUP BY status, span",
        [*params, *([] if start is None else [start]), end],
    ).fetchall()
    return {(str(status), int(span)): int(count) for status, span, count in rows}


def _recent(db: Connection, dialect: Dialect, through: float) -> dict[str, int]:
    """The ended runs since `through`, by status: a range at the end of each status's index
    entries."""
    which, params = dialect.one_of("status", _ENDED)
    rows = db.execute(
        f"SELECT status, count(*) FROM durably_runs WHERE {which}"
        f" AND updated_at >= {dialect.mark} GROUP BY status",
        [*params, through],
    ).fetchall()
    return {str(status): int(count) for status, count in rows}

"""The count of ended runs by status, for a metrics scrape, at a cost that does not grow with
how many runs the store holds: counted once, then kept up to date by counting only the runs
that ended since.

Counting them at each scrape read every ended run, the bulk of a store's runs (58 ms beside
100,000 on SQLite; seconds beside millions). An ended run never changes again (its status is
final: durably.core.status) and only pruning deletes one, oldest first. So a store object
keeps, for each final status, how many runs ended before a time a little in the past
(`through`), those of its oldest day by ten minutes (the spans pruning reaches next), and
each scrape reads from the (status, updated_at) index only what changed: the runs since
`through`; a new `through` ten minutes on; each status's oldest time and how many runs have
it (pruning changes one or the other) and, where that changed, the ten minutes it lies in
again, and the oldest day's spans it brought in. The first scrape of a process counts the
ended runs by status from the index alone (and the oldest day's by ten minutes); so does a
scrape after pruning went past the oldest day at once, for that status.

Pruning by anything but the oldest end first (PostgreSQL's retention deletes the runs of a
history partition, by birth: durably.stores.postgres.partitions) would leave spans counted
that lost runs; such a prune marks the store (`mark_pruned_out_of_order`, in its transaction),
and the next scrape of every process counts afresh, as a first scrape does.

A run whose end is written more than `_MARGIN` after the time it records (a worker whose clock
is that far behind the others', a commit held that long) is counted only by the next process's
first scrape: the gauge is then that much short until then.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from durably.core.status import FINAL
from durably.stores.sql.reads import Connection, Dialect
from durably.stores.sql.rows import ts

__all__ = ["Tally", "mark_pruned_out_of_order"]

_SPAN = 600  # seconds: the tally's ten minutes
_AHEAD = 144 * _SPAN  # the oldest day, kept by span
_MARGIN = timedelta(minutes=10)  # how long after `through` the ends before it are all written
_ENDED = tuple(sorted(str(status) for status in FINAL))
_MARK = "pruned_out_of_order"  # durably_meta's key: how many such prunes the store has had

Oldest = tuple[float, int] | None  # a status's oldest time, and how many runs have it


@dataclass(frozen=True, slots=True)
class _Kept:
    """One status's count up to `through`: its oldest spans (up to `end`), and the rest."""

    spans: dict[int, int]  # span (updated_at // _SPAN) -> runs, for the spans before `end`
    end: float
    rest: int  # runs from `end` to `through`

    @property
    def total(self) -> int:
        return sum(self.spans.values()) + self.rest


class Tally:
    """Ended runs by status, up to `through` (one store's, kept in memory)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # one scrape at a time updates it
        self._through: float | None = None  # no count yet
        self._kept: dict[str, _Kept] = {}
        self._oldest: dict[str, Oldest] = {}
        self._marked: str | None = None  # the store's mark when the tally was last kept

    def ended(self, db: Connection, dialect: Dialect, *, now: datetime) -> dict[str, int]:
        """How many runs ended in each final status (a status none did is left out). Read
        first, kept after: a read that fails (and is run again) leaves the tally as it was."""
        with self._lock:
            marked = _marked(db, dialect)
            was = self._through if marked == self._marked else None  # None: count afresh
            through = max((ts(now - _MARGIN) // _SPAN) * _SPAN, was or 0.0)
            oldest = _oldest(db, dialect)
            new = _totals(db, dialect, was, through) if was is not None and through > was else {}
            afresh = [  # first counted, or pruned past the spans kept
                status
                for status, first in oldest.items()
                if was is None
                or (first != self._oldest[status] and _past(first, self._kept[status]))
            ]
            below = _totals(db, dialect, None, through, afresh) if afresh else {}
            kept: dict[str, _Kept] = {}
            for status in _ENDED:
                if status in afresh:
                    first = oldest[status]
                    kept[status] = _fresh(db, dialect, status, first, through, below.get(status, 0))
                    continue
                firsts = (self._oldest[status], oldest[status])
                before = self._kept[status]
                kept[status] = _kept_on(
                    db, dialect, status, before, firsts, through, new.get(status, 0)
                )
            recent = _totals(db, dialect, through, None)
            self._through, self._kept, self._oldest = through, kept, oldest
            self._marked = marked
        totals = {status: kept[status].total + recent.get(status, 0) for status in _ENDED}
        return {status: count for status, count in totals.items() if count}


def mark_pruned_out_of_order(db: Connection, dialect: Dialect) -> None:
    """In the caller's transaction: say that runs were deleted by something other than their
    end's order, so that every tally counts afresh at its next scrape."""
    db.execute(
        f"INSERT INTO durably_meta (key, value) VALUES ({dialect.mark}, '1')"
        " ON CONFLICT (key) DO UPDATE SET value = CAST(CAST(durably_meta.value AS INTEGER) + 1"
        " AS TEXT)",
        (_MARK,),
    )


def _marked(db: Connection, dialect: Dialect) -> str | None:
    row = db.execute(
        f"SELECT value FROM durably_meta WHERE key = {dialect.mark}", (_MARK,)
    ).fetchone()
    return None if row is None else str(row[0])


def _past(first: Oldest, kept: _Kept) -> bool:
    """Whether the oldest run now lies past the spans kept (or there is none)."""
    return first is None or first[0] >= kept.end


def _fresh(
    db: Connection, dialect: Dialect, status: str, first: Oldest, through: float, below: int
) -> _Kept:
    """A status counted afresh: `below` runs before `through`, its oldest day by span."""
    start = through if first is None else min((first[0] // _SPAN) * _SPAN, through)
    end = min(start + _AHEAD, through)
    spans = _spans(db, dialect, status, start, end)
    return _Kept(spans, end, below - sum(spans.values()))


def _kept_on(
    db: Connection,
    dialect: Dialect,
    status: str,
    kept: _Kept,
    firsts: tuple[Oldest, Oldest],
    through: float,
    new: int,
) -> _Kept:
    """`kept`, with the `new` runs that ended up to `through`; if the oldest run changed (from
    `firsts[0]` to `firsts[1]`, which lies within the spans kept), the spans before its own
    dropped and its own counted again; and the spans of the oldest day brought in."""
    spans, end, rest = dict(kept.spans), kept.end, kept.rest + new
    previous, first = firsts
    if first is None:  # _past: counted afresh instead
        return kept
    span = int(first[0] // _SPAN)
    if first != previous:
        for gone in [s for s in spans if s <= span]:
            del spans[gone]
        spans.update(_spans(db, dialect, status, span * _SPAN, min((span + 1) * _SPAN, end)))
    reach = min(span * _SPAN + _AHEAD, through)
    if reach > end:
        more = _spans(db, dialect, status, end, reach)
        spans.update(more)
        end, rest = reach, rest - sum(more.values())
    return _Kept(spans, end, rest)


def _oldest(db: Connection, dialect: Dialect) -> dict[str, Oldest]:
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


def _totals(
    db: Connection,
    dialect: Dialect,
    start: float | None,
    end: float | None,
    statuses: Sequence[str] = _ENDED,
) -> dict[str, int]:
    """The ended runs (of these statuses) from `start` to `end` (None: no bound), by status:
    from the (status, updated_at) index alone."""
    mark = dialect.mark
    which, params = dialect.one_of("status", statuses)
    bounds = [(start, f"updated_at >= {mark}"), (end, f"updated_at < {mark}")]
    where = [which, *(condition for bound, condition in bounds if bound is not None)]
    rows = db.execute(
        f"SELECT status, count(*) FROM durably_runs WHERE {' AND '.join(where)} GROUP BY status",
        [*params, *(bound for bound, _ in bounds if bound is not None)],
    ).fetchall()
    return {str(status): int(count) for status, count in rows}


def _spans(
    db: Connection, dialect: Dialect, status: str, start: float, end: float
) -> dict[int, int]:
    """A status's ended runs from `start` to `end`, by span."""
    if end <= start:
        return {}
    mark = dialect.mark
    span = dialect.whole.format(f"updated_at / {_SPAN}")
    rows = db.execute(
        f"SELECT {span} AS span, count(*) FROM durably_runs WHERE status = {mark}"
        f" AND updated_at >= {mark} AND updated_at < {mark} GROUP BY span",
        [status, start, end],
    ).fetchall()
    return {int(span): int(count) for span, count in rows}

"""What runs publish, in SQL for both stores (durably.core.outputs): the latest value of each
event key (written with the checkpoint that records the set), and streams (appended by the
run's lease holder, fenced like a checkpoint). Each function runs in the caller's
transaction."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from durably.core.history import EventKind
from durably.core.outputs import PublishedEvent, StreamItem, StreamWrite, close_place
from durably.stores.records import Checkpoint
from durably.stores.sql.reads import Connection, Dialect
from durably.stores.sql.rows import from_ts, ts

__all__ = ["append", "events", "forget", "latest_events", "publish", "stream"]

_ROWS_A_STATEMENT = 100  # 700 parameters: under SQLite's oldest limit (999)
# places looked up a statement on SQLite: a step that writes without awaiting hands one batch
# of every item it wrote, and a parameter per place would pass SQLite's limit (32,766 in its
# default build) and fail the append
_PLACES_A_STATEMENT = 500


def latest_events(checkpoint: Checkpoint) -> dict[str, tuple[str, float]]:
    """The last value (and time) the checkpoint sets for each event key."""
    found: dict[str, tuple[str, float]] = {}
    for event in checkpoint.events:
        if event.kind is EventKind.EVENT_SET and event.name is not None and event.data:
            found[event.name] = (event.data, ts(event.at))
    return found


def publish(db: Connection, dialect: Dialect, checkpoint: Checkpoint) -> bool:
    """Keep the latest value of each event key the fenced-in checkpoint sets; whether it
    set any (then callers waiting on the run are told, after the commit)."""
    latest = latest_events(checkpoint)
    mark = dialect.mark
    for key, (value, at) in latest.items():
        db.execute(
            "INSERT INTO durably_published_events (run_id, key, value, at)"
            f" VALUES ({mark}, {mark}, {mark}, {mark}) ON CONFLICT (run_id, key)"
            " DO UPDATE SET value = excluded.value, at = excluded.at",
            (checkpoint.run_id, key, value, at),
        )
    return bool(latest)


def events(
    db: Connection, dialect: Dialect, run_id: str, keys: Sequence[str] | None
) -> list[PublishedEvent]:
    """The run's published events (those of `keys` only, if given), by key."""
    mark = dialect.mark
    where, params = f"run_id = {mark}", list[object]([run_id])
    if keys is not None:
        which, more = dialect.one_of("key", list(keys))
        where, params = f"{where} AND {which}", [*params, *more]
    rows = db.execute(
        f"SELECT key, value, at FROM durably_published_events WHERE {where} ORDER BY key",
        params,
    ).fetchall()
    return [PublishedEvent(key, value, from_ts(at)) for key, value, at in rows]


def append(
    db: Connection,
    dialect: Dialect,
    run_id: str,
    epoch: int,
    writes: Sequence[StreamWrite],
    *,
    now: datetime,
) -> bool | None:
    """Append `writes` to the run's streams, each at the next offset of its stream, unless
    its place was written already (a replay or a retried step) or the stream has ended.
    None (writing nothing) if `epoch` is not the run's any more; else whether anything new
    was appended. The run's row is held (PostgreSQL: FOR UPDATE; SQLite writes one at a time),
    so that appends of one run, and a takeover of its lease, go one at a time."""
    mark = dialect.mark
    held = db.execute(
        f"SELECT 1 FROM durably_runs WHERE id = {mark} AND lease_epoch = {mark}"
        f" AND status = 'running'{dialect.row_lock}",
        (run_id, epoch),
    ).fetchone()
    if held is None:
        return None
    at, appended = ts(now), False
    for key in dict.fromkeys(write.key for write in writes):
        mine = [write for write in writes if write.key == key]
        places = [close_place(), *(write.place for write in mine)]
        known = _known_places(db, dialect, run_id, key, places)
        row = db.execute(  # through the primary key
            f"SELECT max(item) FROM durably_stream_items WHERE run_id = {mark} AND key = {mark}",
            (run_id, key),
        ).fetchone()
        last = -1 if row is None or row[0] is None else row[0]
        ended = close_place() in known
        rows: list[tuple[object, ...]] = []
        for write in mine:
            if ended or write.place in known:
                continue
            last += 1
            known.add(write.place)
            rows.append((run_id, key, last, write.value, write.place, write.attempt, at))
            ended = write.value is None
        _insert(db, dialect, rows)
        appended = appended or bool(rows)
    return appended


_INSERT = "INSERT INTO durably_stream_items (run_id, key, item, value, place, attempt, at)"
# PostgreSQL: the rows as one array a column, in one statement whatever their number (a
# VALUES list of 100 rows took 3 to 7 ms a statement, most of it binding 700 parameters)
_UNNEST = (
    f"{_INSERT} SELECT * FROM unnest(%s::text[], %s::text[], %s::integer[], %s::text[],"
    " %s::text[], %s::integer[], %s::double precision[])"
)


def _insert(db: Connection, dialect: Dialect, rows: list[tuple[object, ...]]) -> None:
    """The new items' rows, in as few round trips as the store allows."""
    if rows and dialect.arrays:
        db.execute(_UNNEST, [list(column) for column in zip(*rows, strict=True)])
        return
    mark = dialect.mark
    for start in range(0, len(rows), _ROWS_A_STATEMENT):  # one round trip a chunk
        chunk = rows[start : start + _ROWS_A_STATEMENT]
        one = f"({', '.join([mark] * 7)})"
        db.execute(
            f"{_INSERT} VALUES {', '.join([one] * len(chunk))}",
            [value for row in chunk for value in row],
        )


def _known_places(
    db: Connection, dialect: Dialect, run_id: str, key: str, places: Sequence[str]
) -> set[str]:
    """Which of `places` the stream holds already (through the (run_id, key, place) index);
    on SQLite, a statement per _PLACES_A_STATEMENT places (PostgreSQL: one array)."""
    mark, known = dialect.mark, set[str]()
    step = len(places) if dialect.arrays else _PLACES_A_STATEMENT
    for start in range(0, len(places), step):
        which, params = dialect.one_of("place", places[start : start + step])
        rows = db.execute(
            f"SELECT place FROM durably_stream_items WHERE run_id = {mark} AND key = {mark}"
            f" AND {which}",
            [run_id, key, *params],
        ).fetchall()
        known.update(place for (place,) in rows)
    return known


def stream(
    db: Connection, dialect: Dialect, run_id: str, key: str, *, offset: int, limit: int
) -> list[StreamItem]:
    """Up to `limit` items of the stream from `offset` on, in order."""
    mark = dialect.mark
    rows = db.execute(
        "SELECT item, value, place, attempt, at FROM durably_stream_items"
        f" WHERE run_id = {mark} AND key = {mark} AND item >= {mark} ORDER BY item LIMIT {mark}",
        (run_id, key, offset, limit),
    ).fetchall()
    return [
        StreamItem(item, value, place, attempt, from_ts(at))
        for item, value, place, attempt, at in rows
    ]


def forget(db: Connection, dialect: Dialect, run_ids: Sequence[str]) -> None:
    """Delete what these runs published, of those of them that are gone (pruned)."""
    which, params = dialect.one_of("run_id", list(run_ids))
    for table in ("durably_published_events", "durably_stream_items"):
        db.execute(
            f"DELETE FROM {table} WHERE {which} AND NOT EXISTS"
            f" (SELECT 1 FROM durably_runs WHERE durably_runs.id = {table}.run_id)",
            params,
        )

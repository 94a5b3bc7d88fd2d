"""Rewriting every stored payload in place, a batch at a time, the same SQL for both stores:
what `durably keys rotate` does (durably.stores.encrypted) to seal old values with the
current key. Each row is written back only if it still holds what was read, so a run that
moved on meanwhile is left for the next pass, never overwritten with an older value."""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Iterator
from typing import Any, Protocol

from durably.stores.sql.reads import Connection, Dialect

__all__ = ["count", "rewrite"]

# A payload text -> its new text (sealed, opened, or sealed again); (event kind, data) -> its
# new data
TextChange = Callable[[str], str]
EventChange = Callable[[str, str | None, TextChange], str | None]
Writing = Callable[[Callable[[Any], list[tuple[Any, ...]]]], list[tuple[Any, ...]]]


def count(db: Connection, dialect: Dialect, kinds: Collection[str]) -> int:
    """How many rows hold payloads: runs, events of `kinds`, inbox messages with data."""
    which, params = dialect.one_of("kind", sorted(kinds))
    runs = db.execute("SELECT count(*) FROM durably_runs").fetchone()[0]
    events = db.execute(f"SELECT count(*) FROM durably_events WHERE {which}", params).fetchone()[0]
    mail = db.execute("SELECT count(*) FROM durably_inbox WHERE data IS NOT NULL").fetchone()[0]
    published = sum(
        int(db.execute(f"SELECT count(*) FROM {table.table}").fetchone()[0])
        for table in _published(dialect, str)
    )
    return int(runs) + int(events) + int(mail) + published


def rewrite(
    writing: Writing,
    dialect: Dialect,
    change: TextChange,
    change_event: EventChange,
    kinds: Collection[str],
    *,
    batch: int,
) -> Iterator[int]:
    """Rewrite the payloads of runs, events of `kinds`, inbox messages and what runs published
    (events' latest values, stream items), `batch` rows a transaction (through `writing`);
    yields the rows each batch read."""
    tables: tuple[_Table, ...] = (
        _Runs(dialect, change),
        _Events(dialect, change, change_event, kinds),
        _Inbox(dialect, change),
        *_published(dialect, change),
    )
    for table in tables:
        after = table.start
        while True:
            read = writing(functools.partial(table.rewrite, after=after, batch=batch))
            if not read:
                break
            after = read[-1]
            yield len(read)


class _Table(Protocol):
    start: tuple[Any, ...]

    def rewrite(self, db: Any, *, after: tuple[Any, ...], batch: int) -> list[tuple[Any, ...]]: ...


class _Runs:
    """A run's input and result, by id."""

    start: tuple[Any, ...] = ("",)

    def __init__(self, dialect: Dialect, change: TextChange) -> None:
        self.mark, self.change = dialect.mark, change

    def rewrite(self, db: Any, *, after: tuple[Any, ...], batch: int) -> list[tuple[Any, ...]]:
        mark, change = self.mark, self.change
        rows = db.execute(
            f"SELECT id, input, result FROM durably_runs WHERE id > {mark} ORDER BY id"
            f" LIMIT {mark}",
            [after[0], batch],
        ).fetchall()
        for run_id, input_, result in rows:
            new_input = change(input_)
            new_result = None if result is None else change(result)
            if (new_input, new_result) != (input_, result):
                db.execute(
                    f"UPDATE durably_runs SET input = {mark}, result = {mark}"
                    f" WHERE id = {mark} AND input = {mark} AND coalesce(result, '') = {mark}",
                    [new_input, new_result, run_id, input_, result or ""],
                )
        return [(row[0],) for row in rows]


class _Events:
    """The data of events of the kinds that carry a value, by run and place."""

    start: tuple[Any, ...] = ("", 0)

    def __init__(
        self,
        dialect: Dialect,
        change: TextChange,
        change_event: EventChange,
        kinds: Collection[str],
    ) -> None:
        self.mark, self.change, self.change_event = dialect.mark, change, change_event
        self.which, self.params = dialect.one_of("kind", sorted(kinds))

    def rewrite(self, db: Any, *, after: tuple[Any, ...], batch: int) -> list[tuple[Any, ...]]:
        mark = self.mark
        rows = db.execute(
            f"SELECT run_id, seq, kind, data FROM durably_events WHERE {self.which}"
            f" AND (run_id > {mark} OR (run_id = {mark} AND seq > {mark}))"
            f" ORDER BY run_id, seq LIMIT {mark}",
            [*self.params, after[0], after[0], after[1], batch],
        ).fetchall()
        for run_id, seq, kind, data in rows:
            new = self.change_event(kind, data, self.change)
            if new != data:
                db.execute(
                    f"UPDATE durably_events SET data = {mark}"
                    f" WHERE run_id = {mark} AND seq = {mark} AND data = {mark}",
                    [new, run_id, seq, data],
                )
        return [(row[0], row[1]) for row in rows]


class _Inbox:
    """The data of messages not yet folded into their run's history, by id."""

    start: tuple[Any, ...] = (0,)

    def __init__(self, dialect: Dialect, change: TextChange) -> None:
        self.mark, self.change = dialect.mark, change

    def rewrite(self, db: Any, *, after: tuple[Any, ...], batch: int) -> list[tuple[Any, ...]]:
        mark = self.mark
        rows = db.execute(
            f"SELECT id, data FROM durably_inbox WHERE id > {mark} AND data IS NOT NULL"
            f" ORDER BY id LIMIT {mark}",
            [after[0], batch],
        ).fetchall()
        for message_id, data in rows:
            new = self.change(data)
            if new != data:
                db.execute(
                    f"UPDATE durably_inbox SET data = {mark} WHERE id = {mark} AND data = {mark}",
                    [new, message_id, data],
                )
        return [(row[0],) for row in rows]


def _published(dialect: Dialect, change: TextChange) -> tuple[_Values, ...]:
    """What runs publish (durably.stores.outputs): each a value of the workflow's."""
    return (
        _Values(dialect, change, "durably_published_events", ("run_id", "key"), ("", "")),
        _Values(dialect, change, "durably_stream_items", ("run_id", "key", "item"), ("", "", -1)),
    )


class _Values:
    """A table's `value` column, by its primary key (`keys`), in key order; a NULL value (a
    stream's end) carries nothing to seal."""

    def __init__(
        self,
        dialect: Dialect,
        change: TextChange,
        table: str,
        keys: tuple[str, ...],
        start: tuple[Any, ...],
    ) -> None:
        self.mark, self.change, self.table, self.keys, self.start = (
            dialect.mark,
            change,
            table,
            keys,
            start,
        )

    def rewrite(self, db: Any, *, after: tuple[Any, ...], batch: int) -> list[tuple[Any, ...]]:
        mark, columns = self.mark, ", ".join(self.keys)
        marks = ", ".join([mark] * len(self.keys))
        rows = db.execute(
            f"SELECT {columns}, value FROM {self.table} WHERE ({columns}) > ({marks})"
            f" ORDER BY {columns} LIMIT {mark}",
            [*after, batch],
        ).fetchall()
        where = " AND ".join(f"{key} = {mark}" for key in self.keys)
        for *key, value in rows:
            new = None if value is None else self.change(value)
            if new != value:
                db.execute(
                    f"UPDATE {self.table} SET value = {mark} WHERE {where} AND value = {mark}",
                    [new, *key, value],
                )
        return [tuple(row[: len(self.keys)]) for row in rows]
